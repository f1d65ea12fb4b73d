"""One pipeline run per project at a time.

Two runs on one workspace would race on the same outputs and on ``dvc.lock``. The lock is
an advisory ``flock`` on ``.privhar/run.lock``: the kernel drops it when its holder dies,
so a killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from tasks.core.errors import PrivharError

LOCK_NAME = Path(".privhar") / "run.lock"


def check_unlocked(project: Path) -> None:
    """Fail at once, naming the holder, if a run holds the lock (before a command starts servers for its own run)."""
    with project_lock(project, "a lock check"):
        pass


@contextlib.contextmanager
def project_lock(project: Path, what: str) -> Iterator[None]:
    """Hold the project's run lock for the block, or fail at once naming the holder."""
    path = Path(project) / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held for the whole block
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise PrivharError(f"{project}: a pipeline run is already in progress ({holder}); "
                               f"wait for it to finish or stop it, then try again") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{what}, pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()
