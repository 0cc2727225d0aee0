"""How often the diff scan stops a person for honest code: real projects' sources.

The scan (``loop.rules.tamper``) reads what an attempt *adds*. Honest additions are
measured here two ways, on releases of well-known projects from the package registry
(sdists, nobody here wrote them):

- changed files: each project's change from one release to the next, file by file (the
  lines the later release added, as the scan gets an attempt's), the measure that
  matches what the scan is given;
- whole files: every source file of the later release as if all of it were added (the
  worst case: an attempt that writes a module from nothing).

Test files and sources are counted apart (the scan's rules differ). Each table lists the
rules that fired, with the count of files and one example.

    .venv/bin/python bench/scan_false_positives.py [--quick] [--cache DIR]
"""

from __future__ import annotations

import argparse
import collections
import difflib
import subprocess
import sys
import tarfile
from pathlib import Path

from common import print_machine, print_table

from loop.hardened import tar as hardened_tar
from loop.rules import tamper

PAIRS = [
    ("attrs", "23.2.0", "24.2.0"), ("click", "8.1.3", "8.1.8"), ("docutils", "0.20.1", "0.21.2"),
    ("flask", "2.3.3", "3.0.3"), ("httpx", "0.26.0", "0.27.2"), ("jinja2", "3.1.2", "3.1.4"),
    ("markdown", "3.5.2", "3.7"), ("more-itertools", "10.3.0", "10.5.0"),
    ("packaging", "23.2", "24.1"), ("pluggy", "1.3.0", "1.5.0"), ("pygments", "2.17.2", "2.18.0"),
    ("python-dateutil", "2.8.2", "2.9.0.post0"), ("requests", "2.31.0", "2.32.3"),
    ("rich", "13.7.1", "13.9.4"), ("sqlparse", "0.4.4", "0.5.1"), ("toolz", "0.12.1", "1.0.0"),
    ("tqdm", "4.66.1", "4.66.5"), ("werkzeug", "3.0.1", "3.0.6"),
]  # fmt: skip
"""(project, earlier release, later release), fixed so that every run reads the same code."""
QUICK = PAIRS[:4]
SKIPPED = ("docs/", "doc/", "examples/", "scripts/", "tools/", "benchmarks/")


def fetch(pairs: list[tuple[str, str, str]], cache: Path) -> dict[tuple[str, str], Path]:
    """Each release unpacked under ``cache`` (downloaded once)."""
    wanted = [f"{name}=={v}" for name, a, b in pairs for v in (a, b)]
    sdists = cache / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    missing = [w for w in wanted if not _archive(sdists, *w.split("=="))]
    if missing:
        print(f"downloading {len(missing)} sdists from the package registry ...", flush=True)
        # One release of a project per pip call: pip resolves the names of one call together.
        for batch in (missing[0::2], missing[1::2]):
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
                 ":all:", "-d", str(sdists), *batch],
                check=True,
            )  # fmt: skip
    found: dict[tuple[str, str], Path] = {}
    for name, *versions in pairs:
        for version in versions:
            archive = _archive(sdists, name, version)
            assert archive is not None, (name, version)
            target = cache / "src" / f"{name}-{version}"
            if not target.exists():
                with tarfile.open(archive) as tar:
                    hardened_tar.unpack(tar, target)
            found[(name, version)] = next(p for p in target.iterdir() if p.is_dir())
    return found


def _archive(folder: Path, name: str, version: str) -> Path | None:
    stems = {name, name.replace("-", "_"), name.capitalize(), name.replace("-", "_").capitalize()}
    for stem in stems:
        for candidate in folder.glob(f"{stem}-{version}.tar.gz"):
            return candidate
    for candidate in folder.glob("*.tar.gz"):
        if candidate.name.lower().replace("_", "-") == f"{name}-{version}.tar.gz".lower():
            return candidate
    return None


def sources(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*.py")
        if not str(p.relative_to(root)).startswith(SKIPPED)
    )  # fmt: skip


def added(before: bytes | None, after: bytes) -> set[int]:
    old = before.decode("utf-8", "replace").splitlines() if before is not None else []
    new = after.decode("utf-8", "replace").splitlines()
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            lines.update(range(j1 + 1, j2 + 1))
    return lines


class Tally:
    def __init__(self) -> None:
        self.files: collections.Counter[str] = collections.Counter()
        self.flagged: collections.Counter[str] = collections.Counter()
        self.rules: collections.Counter[tuple[str, str]] = collections.Counter()
        self.example: dict[tuple[str, str], str] = {}

    def add(self, label: str, path: str, found: list[tamper.Finding], project: str) -> None:
        kind = "tests" if tamper.is_test_path(path) else "sources"
        self.files[kind] += 1
        found = [f for f in found if not f.construct.startswith("file:")]
        if not found:
            return
        self.flagged[kind] += 1
        for construct in sorted({f.construct for f in found}):
            key = (kind, construct)
            self.rules[key] += 1
            hit = next(f for f in found if f.construct == construct)
            self.example.setdefault(key, f"{project}/{hit.path}:{hit.line}")

    def rows(self) -> list[list[str]]:
        out = []
        for kind in ("sources", "tests"):
            n, k = self.files[kind], self.flagged[kind]
            out.append([kind, str(n), str(k), f"{100 * k / max(n, 1):.2f} %"])
        return out

    def rule_rows(self) -> list[list[str]]:
        return [
            [kind, construct, str(count), self.example[(kind, construct)]]
            for (kind, construct), count in self.rules.most_common()
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="four projects instead of eighteen")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "loopwork-bench")
    args = parser.parse_args()
    pairs = QUICK if args.quick else PAIRS
    print_machine("The diff scan on honest code: real projects' sources")
    trees = fetch(pairs, args.cache)
    changed, whole = Tally(), Tally()
    for name, earlier, later in pairs:
        old_root, new_root = trees[(name, earlier)], trees[(name, later)]
        for path in sources(new_root):
            data = (new_root / path).read_bytes()
            before_path = old_root / path
            before = before_path.read_bytes() if before_path.is_file() else None
            lines = added(before, data)
            if lines:
                changed.add("changed", path, tamper.scan({path: (data, lines)}, set()), name)
            everything = set(range(1, data.count(b"\n") + 2))
            whole.add("whole", path, tamper.scan({path: (data, everything)}, set()), name)
    header = ["files", "read", "with a finding", "rate"]
    print(f"\n### Changed files: {len(pairs)} projects, one release to the next\n")
    print_table(header, changed.rows())
    print("\nRules that fired (changed files):\n")
    print_table(["files", "rule", "count", "e.g."], changed.rule_rows())
    print("\n### Whole files: every file of the later release as if added\n")
    print_table(header, whole.rows())
    print("\nRules that fired (whole files, first 25):\n")
    print_table(["files", "rule", "count", "e.g."], whole.rule_rows()[:25])


if __name__ == "__main__":
    main()
