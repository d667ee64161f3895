"""Where the policy file and the default store live."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from ctrlrun.errors import PolicyError

POLICY_FILE: Final = "ctrlrun.yaml"
STATE_DIR: Final = ".ctrlrun"
STATE_FILE: Final = "state.db"


def policy_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ``$CTRLRUN_CONFIG``, else ``./ctrlrun.yaml``. A set-but-empty variable is
    an error, not a fallback."""
    if path is not None:
        return Path(path)
    env = os.environ.get("CTRLRUN_CONFIG")
    if env is not None:
        if not env.strip():
            raise PolicyError("CTRLRUN_CONFIG is set but empty", key="CTRLRUN_CONFIG")
        return Path(env)
    return Path(POLICY_FILE)


def missing_policy_text(path: Path) -> str:
    """Why there is no policy at ``path``, naming where it was looked for and how to point
    ctrlrun at another file (``$CTRLRUN_CONFIG``)."""
    where = path.absolute()
    if os.environ.get("CTRLRUN_CONFIG") is not None:
        return (
            f"no policy file at {where} (the path CTRLRUN_CONFIG names): point CTRLRUN_CONFIG"
            " at your policy, or run `ctrlrun init` to write one there"
        )
    return (
        f"no policy file at {where}: looked for {POLICY_FILE} in {where.parent} (the working"
        " directory); run from the directory that holds it, set CTRLRUN_CONFIG to its path,"
        " or run `ctrlrun init`"
    )


def default_store_path(policy: Path) -> Path:
    """``.ctrlrun/state.db`` beside the policy file."""
    return policy.absolute().parent / STATE_DIR / STATE_FILE


def open_default_store(policy: Path, *, create: bool = False) -> Any:
    """``$CTRLRUN_STORE_URL`` if set, else the SQLite file beside ``policy``. Without
    ``create`` a missing or empty store is ``StoreNotFound`` naming ``ctrlrun init``: the lazy
    default never creates one (an existing store is still migrated)."""
    from ctrlrun.store import open_store

    url = os.environ.get("CTRLRUN_STORE_URL")
    if url is not None:  # set but empty is refused by open_store, never a silent fallback
        return open_store(url, create=create)
    target = default_store_path(policy)
    if create:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    from ctrlrun.store.sqlite import SQLiteStateStore

    return SQLiteStateStore(target, create=create)
