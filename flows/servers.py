"""Local servers privhar starts for its UIs (Prefect, MLflow): start or reuse, wait, stop.

A server runs in its own process group, with its pid in a file of its own inside the project
(one per server and port), so that stopping it (from the same shell or from ``--stop`` in
another) ends every process it started, workers included. The group is led by
:mod:`flows.group_guard`, which ends it when the command that started it is gone: a killed
``privhar ui`` leaves no orphan. A port something else listens on is refused in one line.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

from flows.group_guard import guarded
from tasks.core.errors import PrivharError


def interrupt_on_signals() -> None:
    """Let SIGTERM and SIGINT end a server command through its cleanup (even if SIGINT was ignored)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (for tests and ad-hoc servers)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    target = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    try:
        with socket.create_connection((target, port), timeout=1.0):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie child of ours is reaped first)."""
    _reap(pid)
    return psutil.pid_exists(pid)


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether ``url`` answers HTTP 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback URLs we build
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass(frozen=True)
class LocalServer:
    """One server process group: how to start it, how to tell it is up, where its pid is kept."""

    name: str
    command: tuple[str, ...]
    env: dict[str, str]
    health_url: str
    pid_file: Path
    log_file: Path
    host: str
    port: int
    cwd: Path | None = None  # where it runs (a server is no work of a run in the project's folder)

    def is_up(self) -> bool:
        return answers(self.health_url)

    def ours(self) -> bool:
        """Whether this project started the server on its port: its pid file names a live process group."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return False
        return pid_alive(pid)

    def start(self, timeout: float = 180.0) -> bool:
        """Start the server unless this project's already answers; return whether this call started it. A server
        on the port that this project did not start (another project's, on the same port) is refused in one line:
        its store and its deployments are not this project's (issue 35)."""
        if self.is_up():
            if not self.ours():
                raise PrivharError(
                    f"{self.name}: port {self.port} on {self.host} answers, but not as this project's server (no "
                    f"live process in {self.pid_file}: another project's, or one started by hand); stop it or "
                    "choose another with --port"
                )
            return False
        if port_in_use(self.host, self.port):
            raise PrivharError(
                f"{self.name}: port {self.port} on {self.host} is busy (another program listens there); "
                "choose another with --port"
            )
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                guarded(self.command),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.cwd,
            )
        self.pid_file.write_text(str(process.pid))
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.is_up():
                    return True
                if process.poll() is not None:
                    self.pid_file.unlink(missing_ok=True)
                    raise PrivharError(
                        f"{self.name} exited with status {process.returncode} while starting; "
                        f"see {self.log_file}"
                    )
                time.sleep(0.5)
        except KeyboardInterrupt:
            self.stop()
            raise
        self.stop()
        raise PrivharError(
            f"{self.name} did not answer at {self.health_url} within {timeout:.0f} s; see {self.log_file}"
        )

    def stop(self, grace: float = 15.0) -> bool:
        """End the server's whole process group (TERM, then KILL after ``grace`` s); False if none ran."""
        return stop_process_group(self.pid_file, grace)


def stop_process_group(
    pid_file: Path, grace: float = 15.0, first_signal: int = signal.SIGTERM
) -> bool:
    """Signal the process group whose leader's pid is in ``pid_file``; wait for it to end."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    pid_file.unlink(missing_ok=True)
    try:
        os.killpg(pid, first_signal)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _group_alive(pid):
        time.sleep(0.2)
    if _group_alive(pid):
        os.killpg(pid, signal.SIGKILL)
        time.sleep(0.2)
        _reap(pid)
    return True


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (its leader reaped first if it is our zombie child)."""
    _reap(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _reap(pid: int) -> None:
    """Collect the leader if it is our own child, so a zombie does not look alive."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
