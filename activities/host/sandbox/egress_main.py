"""The egress proxy's process: proxy.py with Loopwork's allowlist, tied to its worker.

``python -m activities.host.sandbox.egress_main FOLDER WORKER_PID`` serves
``FOLDER/proxy.sock`` (PROXY protocol first, one thread per connection, so a slow name
lookup holds up no one else). A watchdog ends the whole process group when the worker
that started it is gone: a worker killed with ``-9`` runs no cleanup of its own. The
worker's pid is an argument, not this process's parent at its start: a worker killed
while the proxy was still starting has made init its parent already.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time


def _watch(worker: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != worker:
            os.killpg(os.getpgid(0), signal.SIGKILL)


def main() -> None:
    folder, worker = sys.argv[1], int(sys.argv[2])
    threading.Thread(target=_watch, args=(worker,), daemon=True).start()
    sys.argv = [
        "proxy",
        "--unix-socket-path", f"{folder}/proxy.sock",
        "--enable-proxy-protocol",
        "--threaded",
        "--num-acceptors", "1",
        "--plugins", "activities.host.sandbox.egress_plugin.Allowlist",
        "--data-dir", folder,
        "--log-level", "WARNING",
    ]  # fmt: skip
    from proxy.proxy import main as serve

    serve()


if __name__ == "__main__":
    main()
