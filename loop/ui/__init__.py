"""The review page (``loop ui``): the fleet's tasks, their evidence and diffs, and the
decision, in the browser.

Server-rendered: Starlette routes, Jinja2 templates, Pygments for the diff, HTML and
CSS bars for the charts, and a few lines of JavaScript that refresh the live parts of
a page. No build step, no database: everything it shows is read through Temporal (the
visibility list, the ``status`` and ``trace`` queries, search attributes, a task's
history) and from the files tasks already write under ``LOOP_HOME`` (``runs/``,
``eval-results.json``), with the same client configuration and payload codec as the
CLI. The modules, from the bottom up:

- ``config``: ``--bind`` and ``LOOP_UI_TOKEN``, checked before anything starts;
- ``views``: pure view models (a trace in, the rows, timeline and bars out);
- ``diff``: a unified diff into files of highlighted lines;
- ``source``: the reads (Temporal, ``runs/``, the repository's objects for the diff)
  and the one write, an answer, after the same state check as the CLI's;
- ``guard``: who is asking (a token or the local user), sessions, and the checks
  against cross-site requests;
- ``app``: the routes; ``server``: the listening socket and uvicorn.

The CLI's ``loop ui`` imports this package; nothing here imports the CLI.
"""
