"""The security primitives every layer stands on, in one leaf package.

It imports nothing of Loopwork, so the workflows' rules, the activities, the CLI and
the review page all use the same code (docs/architecture.md, "The layers"):

- ``git``: the one way Loopwork runs git. A repository is untrusted, so every call
  pins what its configuration could otherwise make git do: no hooks, no fsmonitor,
  no external diff or textconv, no prompts, no ``GIT_*`` from the caller's
  environment, the C locale.
- ``files``: reading a file a sandbox could have written (no link followed, no FIFO
  opened, regular files only, a size cap).
- ``text``: making text an agent, a repository or an issue wrote inert wherever a
  person reads it: on a terminal, in HTML, in a Slack message.
- ``tar``: unpacking an archive from outside (a repository's ``git archive``, an
  sdist) under ``tarfile``'s ``data`` filter rules, on every Python 3.11.
- ``json_in``: parsing JSON from outside (a hook's body, a model call, a file an agent
  wrote) within a bound on its nesting and on the values it would build.
"""
