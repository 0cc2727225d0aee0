"""Helpers the tests share; test modules import from here, never from each other.

- ``repos``: git with a fixed identity, the demo repository, the repository's paths.
- ``agents``: scripted agents (``write_agent``), what they left (``agent_file``,
  ``agent_calls``) and the agent bodies several tests use (``COMPLETE_FIX``, ...).
- ``tasks``: task files (``task``, ``model_task``), starting a task, and bounded waits
  on it (``wait_for`` a status, ``result_of`` its end, which fails saying where it is).
- ``host``: which sandbox levels this host gives (``needs``, ``LEVELS``).
- ``model_server``: a scripted OpenAI-compatible server (``ScriptedModel``).
- ``gates``, ``tools``, ``triage``: what the unit and end-to-end tests of gates, the
  model's toolbox and triage both use.
- ``net``: free ports, a socket that listens and never answers.
- ``temporal``: the names Temporal registers an activity or a workflow under.

Fixtures (the dev server, ``client``, ``settings``, ``demo_repo``) are in ``tests/conftest.py``.
"""
