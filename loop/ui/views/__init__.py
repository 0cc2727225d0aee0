"""View models: what the pages show, computed from Loopwork's contracts with no I/O.

A trace (``TaskResult``) and a status (``TaskStatus``) go in; ready-for-a-template rows
come out, one module per part of the site: the task list (``task_list``), a task's
attempts with their gates (``timeline``), its budget bars (``spending``), the rest of
its page (``task_panels``), the eval charts (``evals``) and the period ledgers
(``ledger``).
Tested without a browser or a server.
"""
