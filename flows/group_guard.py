"""``python flows/group_guard.py OWNER_PID -- COMMAND...``: run a command whose process group cannot outlive its owner.

Two kinds of work run this way (issue 35). A local server (``privhar ui`` / ``serve``) runs in its own process
group so that stopping it ends its workers too; and each ``dvc repro`` of the flow, with every
stage it starts. Their owner may be killed outright (SIGKILL, a closed terminal) and then runs no cleanup: this
guard leads the group, starts the command in it, and ends the whole group when the owner is gone (the kernel's
``PR_SET_PDEATHSIG`` tells it at once; a poll of the owner's pid covers a platform without it) or when the guard
itself is terminated. Ending means SIGTERM to the group (a stage unwinds: its staging folder goes, its MLflow run
ends), up to ``GRACE_SECONDS`` for every member to leave, then SIGKILL. Descriptors passed to the guard stay
open in it until then: the project's run lock (:mod:`flows.project_lock`) is held until the last stage is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

POLL_SECONDS = 0.5
GRACE_SECONDS = 10.0
PR_SET_PDEATHSIG = 1


def guarded(command: list[str] | tuple[str, ...], owner: int | None = None) -> list[str]:
    """``command`` run under the guard on behalf of ``owner`` (this process by default). Start it with
    ``start_new_session=True``: the guard must lead its own group."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        str(owner or os.getpid()),
        "--",
        *command,
    ]


def end_with_parent() -> None:
    """SIGTERM this process when the thread that started it ends (Linux's ``PR_SET_PDEATHSIG``; elsewhere nothing).
    The guard asks it of its owner."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def group_members() -> list[int]:
    """The other live processes of this guard's group (a zombie has left it)."""
    group, members = os.getpgid(0), []
    for process in psutil.process_iter(["status"]):
        if process.pid == os.getpid() or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(process.pid) == group:
                members.append(process.pid)
    return members


def _end_group(child: subprocess.Popen) -> None:
    """TERM the group (the guard ignores it), wait for its members to leave, then KILL what is left, the guard
    included."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline:
        child.poll()
        if not group_members():
            break
        time.sleep(0.05)
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: group_guard.py OWNER_PID -- COMMAND...", file=sys.stderr)
        return 2
    owner, command = int(argv[0]), argv[2:]
    started: list[subprocess.Popen] = []

    def terminated(signum: int, frame: object) -> None:
        if not started:
            sys.exit(128 + signum)
        _end_group(started[0])

    signal.signal(signal.SIGTERM, terminated)
    # an interrupt reaches the group's members; the guard waits for them
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() == owner:
        end_with_parent()
    if not psutil.pid_exists(owner):
        return 1
    started.append(subprocess.Popen(command))
    child = started[0]
    while True:
        try:
            code = child.wait(timeout=POLL_SECONDS)
        except subprocess.TimeoutExpired:
            if not psutil.pid_exists(owner):
                _end_group(child)
            continue
        return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
