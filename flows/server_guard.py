"""``python flows/server_guard.py OWNER_PID -- COMMAND...``: run a server that cannot outlive its owner.

A local server runs in its own process group so that stopping it ends its workers too. That
also means a ``privhar ui`` killed outright (SIGKILL, a closed terminal) could not stop it: the
server would be orphaned, still listening. This guard leads the group, starts the server in it,
and ends the whole group when the owner process is gone (or when it is itself terminated).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_SECONDS = 0.5
GRACE_SECONDS = 10.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end_group(child: subprocess.Popen) -> None:
    """TERM the group (the guard ignores it), wait, then KILL what is left, the guard included."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    try:
        child.wait(GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: server_guard.py OWNER_PID -- COMMAND...", file=sys.stderr)
        return 2
    owner, command = int(argv[0]), argv[2:]
    child = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda signum, frame: _end_group(child))
    while child.poll() is None:
        if not _alive(owner):
            _end_group(child)
        time.sleep(POLL_SECONDS)
    return int(child.returncode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
