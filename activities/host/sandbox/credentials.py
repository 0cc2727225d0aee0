"""The worker's credential files: which they are, and whether a sandbox can keep them out.

A sandbox hides them by path (``mounts.plan_view`` covers each one its view would
show with ``/dev/null``); what a path cannot account for is refused when the worker
starts (``check``), with the fix, instead of failing every task later or leaking.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from temporalio.envconfig import ClientConfig

from loop.errors import BadInput

SECRET_FILE_VARS = (
    "LOOP_CODEC_KEY_FILE",
    "LOOP_ANSWER_KEY_FILE",
    "TEMPORAL_CONFIG_FILE",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
)
"""Variables of the worker that name files with its secrets: covered in every sandbox."""
DEFAULT_CONFIG = "~/.config/temporalio/temporal.toml"


def _profile_files() -> list[tuple[str, str]]:
    """TLS key and certificate files that the client config's profiles name (a profile
    may point at them instead of the variables). A config that does not parse names
    none: the worker could not connect with it either."""
    try:
        config = ClientConfig.load()
    except Exception:  # the SDK's bridge raises its own ConfigError
        return []
    found: list[tuple[str, str]] = []
    for name, profile in config.profiles.items():
        tls = profile.tls
        if tls is None:
            continue
        for what, source in (("key", tls.client_private_key), ("cert", tls.client_cert)):
            if isinstance(source, Path):
                found.append((f"the client config's profile {name} client_{what}", str(source)))
    return found


def named_files() -> list[tuple[str, str]]:
    """(what names it, path) for every credential file of the worker, as configured."""
    named = [(v, os.environ[v]) for v in SECRET_FILE_VARS if os.environ.get(v)]
    named.append(("the Temporal client config", os.path.expanduser(DEFAULT_CONFIG)))
    return named + _profile_files()


def secret_files() -> list[str]:
    """Where those files really are (every link followed): what a sandbox must not show."""
    return sorted({os.path.realpath(path) for _, path in named_files()})


def refusal() -> str:
    """Why a sandbox could not keep a credential file out, with the fix; empty when all
    can be. Covering works by path, so a file reachable by a second name (a hard link)
    would still be read through that name; and a folder cannot be covered as a file."""
    for what, path in named_files():
        try:
            st = os.stat(path)
        except OSError:
            continue  # nothing there to show; the worker reports a key it cannot read itself
        if stat.S_ISDIR(st.st_mode):
            return f"{what} {path} is a folder: name the file itself"
        if st.st_nlink > 1:
            return (
                f"{what} {path} has {st.st_nlink} names (hard links): a sandbox covers one "
                "path and another name would show it; keep it in a file of its own (copy "
                "it to a new file, use that one, remove the old names)"
            )
    return ""


def check() -> None:
    """For worker start (``worker.serve``, ``loop demo``'s worker): refuse, before anything
    starts, a credential file that no sandbox could keep out."""
    refused = refusal()
    if refused:
        raise BadInput(refused)
