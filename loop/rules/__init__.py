"""Loopwork's pure rules: decisions made from contracts alone, no I/O, no clock.

Workflows import these (and ``loop.contracts``) and nothing else of Loopwork, so
every rule here is deterministic and replays: budget arithmetic (``budget``),
feedback from a failed verdict (``feedback``), failure fingerprints
(``fingerprint``), the triage policy (``triage``), harness comparison
(``evaluation``), what a task teaches its repository (``memory``), the
commands that answer a waiting task (``answers``), and why an agent's run went
wrong (``explain``).
"""
