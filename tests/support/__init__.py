"""Helpers shared by the test layers (``tests/unit``, ``tests/workflow``, ``tests/e2e``).

Test modules import from here, never from each other; pytest fixtures live in
``tests/conftest.py``, which imports from here too.

- ``paths``: the repository's root and examples.
- ``git``: git with a fixed identity, for the repositories tests make.
- ``levels``: what this host's sandbox can give, and how tests ask for a level.
- ``agents``: scripted agents (Python scripts speaking the command protocol).
- ``tasks``: task specs, waiting on a task's status, reading its history.
- ``model_server``: a scripted OpenAI-compatible server.
- ``sandbox``: a repository, worktree and LOOP_HOME to run sandboxed commands in.
- ``system``: free ports and live processes.
- ``cli``: the ``temporal`` binary run against a test's server.
- ``triage``: sources files for triage.
"""
