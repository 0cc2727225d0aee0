"""The package as pip installs it for development (``pip install -e .``), built offline."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.paths import ROOT


def test_the_editable_install_prints_no_warning(tmp_path: Path) -> None:
    """pip prints setuptools' "folders with the same name as your package" block when the
    editable wheel needs an import finder; a plain path file needs none (and warns of none)."""
    build = "import sys; from setuptools import build_meta; build_meta.build_editable(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", build, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("loopwork-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith("_finder.py")], names
    (pth,) = [n for n in names if n.endswith(".pth")]
    assert zipfile.ZipFile(wheel).read(pth).decode().strip() == str(ROOT)
    assert "same name as your package" not in done.stdout + done.stderr
