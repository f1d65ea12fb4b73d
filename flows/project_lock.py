"""One pipeline run per project at a time.

Two runs on one workspace would race on the same outputs and on ``dvc.lock``. The lock is
``filelock``'s ``FileLock`` on ``.privhar/run.lock`` (an advisory ``flock``: the kernel drops it
when its holder dies, so a killed run never leaves a stale lock behind); who holds it is written
beside it, in ``.privhar/run.holder``, for the message a second run gets.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from tasks.core.errors import PrivharError

LOCK_NAME = Path(".privhar") / "run.lock"
HOLDER_NAME = Path(".privhar") / "run.holder"


def check_unlocked(project: Path) -> None:
    """Fail at once, naming the holder, if a run holds the lock (before a command starts servers for its own run)."""
    with project_lock(project, "a lock check"):
        pass


@contextlib.contextmanager
def project_lock(project: Path, what: str) -> Iterator[None]:
    """Hold the project's run lock for the block, or fail at once naming the holder."""
    path, holder = Path(project) / LOCK_NAME, Path(project) / HOLDER_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, timeout=0, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        try:
            named = holder.read_text().strip()
        except OSError:
            named = ""
        raise PrivharError(
            f"{project}: a pipeline run is already in progress ({named or 'another process'}); "
            f"wait for it to finish or stop it, then try again"
        ) from None
    try:
        holder.write_text(f"{what}, pid {os.getpid()}")
        yield
    finally:
        holder.unlink(missing_ok=True)
        lock.release()
