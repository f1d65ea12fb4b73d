"""One pipeline run per project at a time, held for as long as any of its work runs.

Two runs on one workspace would race on the same outputs and on ``dvc.lock``. The lock is an advisory
``flock`` on ``.privhar/run.lock``: the kernel drops it when the last descriptor of its open file closes, so a
killed run never leaves a stale lock. The flow hands that descriptor to each ``dvc repro``
(:func:`held_lock_fds`): a runner killed outright (SIGKILL) leaves the lock held until its ``dvc`` has ended too,
and a second run cannot start beside work still running (issue 35). ``filelock`` is not used for this: its
release unlocks (``LOCK_UN``) the open file for every process that shares it, children included; here the
runner only closes its own descriptor. Who holds the lock is written beside it, in ``.privhar/run.holder``,
for the message a second run gets.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import psutil

from tasks.core.errors import PrivharError

LOCK_NAME = Path(".privhar") / "run.lock"
HOLDER_NAME = Path(".privhar") / "run.holder"
_HELD: set[int] = set()


def check_project(project: Path) -> Path:
    """The project folder, resolved; one line if it holds no ``dvc.yaml``."""
    project = Path(project).resolve()
    if not (project / "dvc.yaml").is_file():
        raise PrivharError(f"{project}: no dvc.yaml here (run privhar from the project folder)")
    return project


def check_unlocked(project: Path) -> None:
    """Fail at once, naming the holder, if a run holds the lock (before a command starts servers for its own run)."""
    with project_lock(project, "a lock check"):
        pass


def held_lock_fds() -> tuple[int, ...]:
    """The descriptors of the project locks this process holds: pass them to the processes that do its work."""
    return tuple(sorted(_HELD))


def holder_named(holder: Path) -> str:
    """Who holds the lock, as ``.privhar/run.holder`` names it; a holder that is gone left its stages stopping."""
    try:
        named = holder.read_text().strip()
    except OSError:
        return "another process"
    _, _, pid = named.rpartition("pid ")
    if pid.isdigit() and not psutil.pid_exists(int(pid)):
        return f"{named}, which has ended: its dvc and stages are stopping"
    return named or "another process"


@contextlib.contextmanager
def project_lock(project: Path, what: str) -> Iterator[None]:
    """Hold the project's run lock for the block, or fail at once naming the holder."""
    path, holder = Path(project) / LOCK_NAME, Path(project) / HOLDER_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise PrivharError(
            f"{project}: a pipeline run is already in progress ({holder_named(holder)}); "
            f"wait for it to finish or stop it, then try again"
        ) from None
    _HELD.add(fd)
    try:
        holder.write_text(f"{what}, pid {os.getpid()}")
        yield
    finally:
        holder.unlink(missing_ok=True)
        _HELD.discard(fd)
        os.close(fd)  # not LOCK_UN: a child still holding the descriptor keeps the lock
