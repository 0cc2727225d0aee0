#!/bin/sh
# Makes examples/triage/repo: a git repository with the demo's slugify bug (so the
# CI source fails), TODO markers for the todo source, and the scripted demo agent.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$here/repo"
cp -r "$here/../demo/repo" "$here/repo"
cp "$here/../demo/agent.py" "$here/repo/scripted_agent.py"
cat > "$here/repo/text.py" <<'PY'
"""Text helpers built on slugify."""

from slugify import slugify


def title_slug(title: str) -> str:
    # TODO(loop): strip accents first, so "Crème brûlée" becomes "creme-brulee"
    return slugify(title)


def shout(text: str) -> str:
    # TODO: decide whether this belongs here
    return text.upper() + "!"
PY
cd "$here/repo"
git init -q -b main
git add -A
git -c user.name=Example -c user.email=example@localhost -c commit.gpgsign=false \
  commit -q -m "slugify with a bug, and TODO markers"
echo "made $here/repo"
