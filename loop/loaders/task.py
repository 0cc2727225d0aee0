"""The task file: YAML or JSON in, a validated ``TaskSpec`` with an absolute repo out.

Everything that can be checked before a workflow starts is checked here, so that
bad input costs a one-line message and exit code 2, never a started task that
fails later: unknown keys, types and ranges (pydantic), the repository (exists,
is a non-bare git repository), the base (resolves to a commit) and the agent
command (can be found).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from loop.contracts import CANDIDATE_MARK, AgentSpec, Gate, HiddenTestsGate, TaskSpec, is_remote
from loop.errors import TaskFileError
from loop.hardened import git
from loop.loaders.common import read, validated
from loop.rules.clis import usage_source
from loop.rules.commands import programs


def load_task(path: str | Path, repo: str | None = None) -> TaskSpec:
    """The task file at ``path``, resolved; ``repo`` (a path from the current folder, or a
    URL) stands in for the file's own, so one example serves any repository."""
    file = Path(path)
    data = read(file, "task", "id, goal, repo, agent, verify")
    if repo is not None:
        data["repo"] = repo if is_remote(repo) else str(Path(repo).expanduser().resolve())
    return resolve(validated(TaskSpec, data, str(file)), file.resolve().parent, str(file))


def _git(repo: Path, *args: str) -> git.Result:
    return git.run_sync(list(args), repo)


REMOTE_CHECK_S = 30


def _remote(spec: TaskSpec, source: str) -> TaskSpec:
    """A repository at a URL: it answers, and the base is one of its branches (or a commit
    name, which only the host's fetch can check)."""
    url = spec.repo
    allow = ("-c", "protocol.file.allow=always") if url.startswith("file:") else ()
    try:
        found = git.run_sync(
            ["ls-remote", "--symref", url, "HEAD", "refs/heads/*"],
            timeout=REMOTE_CHECK_S,
            config=allow,
        )
    except git.Timeout:
        raise TaskFileError(f"{source}: repo: {url} did not answer in {REMOTE_CHECK_S} s") from None
    if found.code != 0:
        why = (found.err.strip().splitlines() or ["git ls-remote failed"])[-1]
        raise TaskFileError(f"{source}: repo: cannot reach {url}: {why}")
    lines = found.text.splitlines()
    branches = {ln.split()[1].removeprefix("refs/heads/") for ln in lines if "\trefs/heads/" in ln}
    base = spec.base
    if base is None:
        head = [ln.split()[1] for ln in lines if ln.startswith("ref: refs/heads/")]
        if not head:
            raise TaskFileError(f"{source}: base: {url} has no HEAD branch; name the base")
        base = head[0].removeprefix("refs/heads/")
    base = base.removeprefix("refs/heads/")
    looks_like_commit = len(base) >= 7 and all(c in "0123456789abcdef" for c in base)
    if base not in branches and not looks_like_commit:
        raise TaskFileError(f"{source}: base: {base!r} is not a branch of {url}")
    return spec.model_copy(update={"base": base})


def resolve(spec: TaskSpec, folder: Path, source: str) -> TaskSpec:
    """Absolute repo (relative to the task file's folder) or a git URL that answers, a
    concrete base, a findable agent."""
    if is_remote(spec.repo):
        spec = _remote(spec, source)
        _findable(spec, [folder], source)
        return spec
    repo = Path(spec.repo).expanduser()
    repo = (folder / repo).resolve() if not repo.is_absolute() else repo.resolve()
    if not repo.is_dir():
        raise TaskFileError(f"{source}: repo: {repo} does not exist")
    bare = _git(repo, "rev-parse", "--is-bare-repository")
    if bare.code != 0:
        raise TaskFileError(f"{source}: repo: {repo} is not a git repository (run `git init`)")
    if bare.text.strip() == "true":
        raise TaskFileError(f"{source}: repo: {repo} is a bare repository; point at a clone")
    top = Path(_git(repo, "rev-parse", "--show-toplevel").text.strip())
    if _git(top, "rev-parse", "--verify", "-q", "HEAD").code != 0:
        raise TaskFileError(f"{source}: repo: {top} has no commits yet; commit first")
    base = spec.base
    if base is None:
        branch = _git(top, "symbolic-ref", "--short", "-q", "HEAD")
        base = branch.text.strip() if branch.code == 0 else None
        if base is None:
            base = _git(top, "rev-parse", "--verify", "HEAD").text.strip()
    if _git(top, "rev-parse", "--verify", "-q", f"{base}^{{commit}}").code != 0:
        raise TaskFileError(f"{source}: base: {base!r} is not a branch or commit in {top}")
    _findable(spec, [top, folder], source)
    verify = _hidden_refs(spec, top, folder, source)
    return spec.model_copy(update={"repo": str(top), "base": base, "verify": verify})


def _hidden_refs(spec: TaskSpec, top: Path, folder: Path, source: str) -> list[Gate]:
    """Each ``hidden_tests.ref`` as the worker will read it: a folder (relative to the
    file's folder, made absolute; never inside the repository, where the agent would see
    it) or a commit of the repository."""
    gates: list[Gate] = []
    for g in spec.verify:
        if isinstance(g, HiddenTestsGate):
            ref = g.hidden_tests.ref
            where = (folder / Path(ref).expanduser()).resolve()
            if where.is_dir():
                if where == top or top in where.parents:
                    raise TaskFileError(
                        f"{source}: {g.name}: hidden_tests.ref {where} is inside the repository, "
                        "where the agent would see it; keep hidden tests outside it"
                    )
                hidden = g.hidden_tests.model_copy(update={"ref": str(where)})
                g = g.model_copy(update={"hidden_tests": hidden})
            elif (
                ref.startswith("/")
                or _git(top, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}").code
            ):
                raise TaskFileError(
                    f"{source}: {g.name}: hidden_tests.ref {ref!r} is neither a folder nor a "
                    f"commit of {top}"
                )
        gates.append(g)
    return gates


def _findable(spec: TaskSpec, folders: list[Path], source: str) -> None:
    """Every program each agent's command runs (the task's, its candidates') is on PATH or
    a file here; a token or cost budget has usage to count. A task's id is not a
    candidate's."""
    if CANDIDATE_MARK in spec.id:
        raise TaskFileError(
            f"{source}: id: {spec.id!r}: '{CANDIDATE_MARK}' is kept for a task's candidates "
            "(<id>+<name>); a task's id is letters, digits, '.', '_' and '-'"
        )
    agents = [("agent", spec.agent)]
    if isinstance(spec.candidates, list):
        agents += [(f"candidates[{i}].agent", c.agent) for i, c in enumerate(spec.candidates)]
    for where, agent in agents:
        _runs(agent, spec, where, folders, source)


def _runs(agent: AgentSpec, spec: TaskSpec, where: str, folders: list[Path], source: str) -> None:
    command = agent.command or []
    limited = [k for k in ("max_tokens", "max_cost_usd") if getattr(spec.budget, k) is not None]
    metered = agent.provider is not None  # the gateway measures every call
    if command and limited and not metered and usage_source(command, agent.usage) == "none":
        which = "" if where == "agent" else f" ({where})"
        raise TaskFileError(
            f"{source}: budget.{limited[0]}: this command agent{which} reports no usage, so "
            "the budget could not be enforced; name its model API in agent.provider (the "
            "gateway meters every call), have it write LOOP_USAGE_FILE and set agent.usage: "
            "file, or remove the limit"
        )
    for exe in programs(command) if command else []:
        if shutil.which(exe) is None and not any((f / exe).exists() for f in folders):
            raise TaskFileError(
                f"{source}: {where}.command runs {exe!r}, which is not on PATH, not a file, "
                "and not in the repo"
            )
