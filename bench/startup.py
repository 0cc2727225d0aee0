"""What a process of Loopwork's spends before it does anything: the CPU of its imports.

A new worker's start is what a dead worker's step waits for (``bench/recovery.py``:
the retried step starts ~40 ms after the new worker is ready), and every ``loop``
command pays its imports before its first line of output. Each sample is a fresh
``python -c`` in a checkout (its own modules first on ``sys.path``), timed by its own
``time.process_time()`` around the import, so other processes on the machine show up
as spread, not as cost:

- ``import worker``: the worker's modules, up to registering its activities;
- ``+ a step's models``: and the validators a retried ``make`` needs first (its input
  and result; contract models build theirs when first used);
- ``loop status --help``: a whole short CLI command (the user and system CPU of its
  process, from ``os.wait4``).

Checkouts alternate sample by sample (``--compare``), so a change of the machine's speed
hits them alike. Byte-compile every checkout first (``python -m compileall``) on a
machine that sets ``PYTHONDONTWRITEBYTECODE``.

    .venv/bin/python bench/startup.py [--samples 15] [--compare ../clone-at-main]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from common import ROOT, median, print_machine, print_table

IMPORT = """
import time
started = time.process_time()
import worker
imported = time.process_time()
from loop import contracts
contracts.MakeInput.model_rebuild()
contracts.MakeResult.model_rebuild()
print(imported - started, time.process_time() - started)
"""

CLI = "import sys; sys.argv = ['loop', 'status', '--help']; from loop.cli import main; main()"


def imports(root: Path) -> tuple[float, float]:
    """Seconds of CPU for ``import worker``, and with a step's models built."""
    out = subprocess.run(
        [sys.executable, "-c", IMPORT], cwd=root, capture_output=True, text=True, check=True
    )
    bare, models = out.stdout.split()
    return float(bare), float(models)


def command(root: Path) -> float:
    """Seconds of CPU (user + system) of one ``loop status --help`` process."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI], cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"loop status --help failed in {root} (exit {proc.returncode})")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=15, help="samples per checkout (>= 5)")
    parser.add_argument(
        "--compare", type=Path, help="another checkout (e.g. a clone at main), as 'before'"
    )
    parser.add_argument("--quick", action="store_true", help="a tiny version (3 samples)")
    args = parser.parse_args()
    if args.quick:
        args.samples = 3
    elif args.samples < 5:
        parser.error("--samples must be at least 5 (the median of fewer says little)")
    roots = {"this checkout": ROOT}
    if args.compare is not None:
        if not (args.compare / "worker.py").is_file():
            parser.error(f"--compare {args.compare}: no worker.py there; give a checkout")
        roots["before"] = args.compare.resolve()
    print_machine("the CPU of a process's imports: a new worker, a short loop command")
    print(f"{args.samples} samples per checkout, alternating; ms of CPU.\n", flush=True)
    samples: dict[str, dict[str, list[float]]] = {
        name: {"import": [], "models": [], "cli": []} for name in roots
    }
    for i in range(args.samples):
        for name, root in roots.items():
            bare, models = imports(root)
            samples[name]["import"].append(bare * 1000)
            samples[name]["models"].append(models * 1000)
            samples[name]["cli"].append(command(root) * 1000)
        print(f"  sample {i + 1}/{args.samples}", file=sys.stderr, flush=True)
    rows = []
    for name, got in samples.items():
        rows.append([name, *(f"{median(v):.0f} ({min(v):.0f}-{max(v):.0f})" for v in got.values())])
    headers = ["checkout", "import worker", "+ a step's models", "loop status --help"]
    print_table(headers, rows, title="median (min-max), ms of CPU")
    if "before" in samples:
        now, before = samples["this checkout"], samples["before"]
        ratios = [f"{median(now[k]) / median(before[k]):.3f}" for k in now]
        print_table(headers, [["this / before", *ratios]])


if __name__ == "__main__":
    main()
