#!/usr/bin/env bash
# The floor: one trivial task with the same isolation, done by hand.
#
#   bench/floor.sh REPO WORK UID AGENT_PY PYTHON
#
# A branch worktree of REPO's main; the agent (a Python script) under bubblewrap with new
# network, pid and IPC namespaces, a read-only host, a private /tmp, as UID (setpriv, no
# groups, no new privileges) when the script runs as root; `git add -A && git commit`; a
# detached worktree of that commit; both gates (`true` and the demo's unit tests) under
# bubblewrap the same way on it, read-only; then both worktrees and the branch removed.
# Nothing of Loopwork runs: this is what the isolation itself costs (bench/vs_floor.py
# measures a Loopwork task against it). Exits non-zero if a step or a gate fails.
set -euo pipefail
repo=$1 work=$2 uid=$3 agent=$4 python=$5
id=floor-$$-$RANDOM
branch=floor/$id
tree=$work/$id
checkout=$work/$id.check
git=(git -c user.name=Floor -c user.email=floor@localhost -c commit.gpgsign=false -C "$repo")

as_uid=()
if [ "$(id -u)" = 0 ]; then
  as_uid=(setpriv "--reuid=$uid" "--regid=$uid" --clear-groups --inh-caps=-all
          --bounding-set=-all --no-new-privs --)
fi

# The folders between /tmp and $1 (exclusive), outermost first.
parents() {
  local path=${1%/*} out=()
  while [ "${path#/tmp/}" != "$path" ]; do out=("$path" "${out[@]}"); path=${path%/*}; done
  echo "${out[@]}"
}

# $1: "rw" (the agent) or "ro" (a gate); $2: the tree, its cwd, shown over the private
# /tmp (as is the agent's script); then argv.
confined() {
  local how=$1 cwd=$2
  shift 2
  local bind=() dir
  # bubblewrap makes a bind's missing parents 0700: under the private /tmp, make them 0755.
  for dir in $(parents "$agent") $(parents "$cwd"); do bind+=(--perms 0755 --dir "$dir"); done
  bind+=(--ro-bind "$agent" "$agent")
  if [ "$how" = rw ]; then bind+=(--bind "$cwd" "$cwd"); else bind+=(--ro-bind "$cwd" "$cwd"); fi
  bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp "${bind[@]}" \
    --unshare-net --unshare-pid --unshare-ipc --new-session --die-with-parent \
    --chdir "$cwd" --setenv HOME /tmp --setenv TMPDIR /tmp --setenv PYTHONDONTWRITEBYTECODE 1 \
    -- "${as_uid[@]}" "$@"
}

"${git[@]}" worktree add -q -b "$branch" "$tree" main
[ "$(id -u)" = 0 ] && chown -R "$uid:$uid" "$tree"
confined rw "$tree" "$python" "$agent" >/dev/null
[ "$(id -u)" = 0 ] && chown -R 0:0 "$tree"
git -c user.name=Floor -c user.email=floor@localhost -c commit.gpgsign=false -C "$tree" \
  add -A
git -c user.name=Floor -c user.email=floor@localhost -c commit.gpgsign=false -C "$tree" \
  commit -q -m "floor: the agent's work"
commit=$(git -C "$tree" rev-parse HEAD)
"${git[@]}" worktree add -q --detach "$checkout" "$commit"
confined ro "$checkout" true
confined ro "$checkout" "$python" -m unittest discover -s tests -t . >/dev/null 2>&1
"${git[@]}" worktree remove --force "$checkout"
"${git[@]}" worktree remove --force "$tree"
"${git[@]}" branch -q -D "$branch"
