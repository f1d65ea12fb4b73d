"""The stage server: one warm process per ``privhar run`` that forks each stage DVC starts (issue 31).

A stage started cold spends seconds before its first line of work: Python imports torch, MLflow, polars and
the stage's modules, and MLflow opens its SQLite store (a schema check). ``privhar run`` starts this server
first; it imports the modules of every stage command in :mod:`flows.stage_commands` and opens the store once, then waits
on a Unix socket. Each ``privhar stage`` that DVC runs (:mod:`flows.launch`) hands it argv, folder, environment
and its stdin / stdout / stderr; the server forks, and the child runs the command line exactly as the process
would have, in its own process group.

What a fork must not carry is kept out: the server runs no torch, polars or OpenMP work (their thread pools do
not survive a fork). Importing starts a few idle housekeeping threads (OpenBLAS's pool, jemalloc's background
threads, polars' spill cleaner, OpenCV's), each in a library that prepares for fork itself (``pthread_atfork``);
the server counts them once warm and declines any request once it holds more; MLflow's store keeps no pooled
SQLite connection (``NullPool``); a request whose thread or library settings (``OMP_NUM_THREADS``,
``PYTHONHASHSEED``, ...) or interpreter differ from the server's is declined, and the stage runs cold. Each child
re-seeds NumPy's global generator from the OS, as a fresh process would be (Python's ``random`` does so itself).

Kill guarantees: SIGINT / SIGTERM / SIGHUP to the client reach the stage's process group; a client killed
outright (SIGKILL) closes its connection and the server kills the stage's group; the server ends with its
parent (``PR_SET_PDEATHSIG``), and each stage with the server, so nothing outlives the run.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import importlib
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator

from flows.group_guard import end_with_parent
from flows.stage_protocol import MESSAGE_LIMIT, SERVER_ENV
from tasks.core.environ import exported
from tasks.core.tracking import FORKED_ENV

LOG = logging.getLogger("privhar.stage_server")
# Read once, when a library loads: a stage asking for other values must start its own interpreter.
STARTUP_SETTINGS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "PYTHONHASHSEED",
    "PYTHONPATH",
    "PYTHONWARNINGS",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
)
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0


def stage_imports() -> set[tuple[str, str]]:
    """(module, name) of each ``from … import …`` in the ``privhar stage`` commands (read from :mod:`flows.stage_commands`'s
    source, so none is missed): the stage functions and their modules.

    >>> ("tasks.private.stage", "train_private") in stage_imports()
    True
    """
    from flows.code_deps import stage_command_functions

    commands = stage_command_functions().values()
    return {
        (node.module, alias.name)
        for command in commands
        for node in ast.walk(command)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def stage_modules() -> list[str]:
    """The modules the ``privhar stage`` commands import.

    >>> {"tasks.train", "tasks.report.stage", "tasks.private.stage"} <= set(stage_modules())
    True
    """
    return sorted({module for module, _ in stage_imports()})


def warm() -> None:
    """Import what the stages import and open MLflow's store, without running any torch, polars or OpenMP work."""
    started = time.perf_counter()
    import mlflow  # noqa: F401

    import flows.stage_commands  # noqa: F401
    from tasks.core import tracking

    for module in stage_modules():
        try:
            importlib.import_module(module)
        except (
            Exception
        ) as error:  # an optional extra not installed: that stage imports it itself, cold
            LOG.info("stage server: %s not preloaded (%s)", module, error)
    os.environ["MLFLOW_SQLALCHEMYSTORE_POOLCLASS"] = (
        "NullPool"  # no SQLite connection may cross a fork
    )
    try:
        tracking.configure()
    except (
        Exception
    ) as error:  # the stage will say what is wrong with the store, with its own message
        LOG.info("stage server: MLflow store not opened (%s)", error)
    LOG.info(
        "stage server: warm in %.1f s (%d threads)", time.perf_counter() - started, thread_count()
    )


def thread_count() -> int:
    """Threads of this process, native ones included (a fork keeps only the calling thread)."""
    return len(os.listdir("/proc/self/task"))


def exit_status(code: object) -> int:
    """A ``SystemExit`` code as a process exit status, as the interpreter maps it.

    >>> [exit_status(None), exit_status(3), exit_status("message")]
    [0, 3, 1]
    """
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


class StageServer:
    """Accepts requests on ``address`` and runs each in a forked child; see the module's docstring."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(address)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.running: dict[int, tuple[socket.socket | None, int]] = {}
        self.settings = {name: os.environ.get(name) for name in STARTUP_SETTINGS}
        self.threads = 1  # the idle library threads counted once warm (serve)

    def serve(self) -> None:
        """Until SIGTERM or SIGINT: accept requests, report each stage's exit, kill stages whose client is gone."""
        self.threads = thread_count()
        self.selector.register(self.listener, selectors.EVENT_READ, ("accept", 0))
        try:
            while True:
                for key, _ in self.selector.select():
                    what, pid = key.data
                    if what == "accept":
                        self.accept()
                    elif what == "client":
                        self.client_gone(pid)
                    else:
                        self.child_ended(pid)
        finally:
            self.stop()

    def refusal(self, request: dict, fds: list[int]) -> str:
        """Why this request must run cold, or ``""``."""
        if len(fds) != 3:
            return "stdin, stdout and stderr were not passed"
        if request.get("executable") != sys.executable:
            return f"another interpreter ({request.get('executable')})"
        changed = [
            name
            for name in STARTUP_SETTINGS
            if request.get("env", {}).get(name) != self.settings[name]
        ]
        if changed:
            return f"{', '.join(changed)} differ from the server's"
        if thread_count() > self.threads:
            return f"the server holds {thread_count()} threads, {self.threads} once warm; a fork would lose them"
        return ""

    def accept(self) -> None:
        connection, _ = self.listener.accept()
        fds: list[int] = []
        try:
            message, fds, flags, _ = socket.recv_fds(connection, MESSAGE_LIMIT, 3)
            request = json.loads(message) if message and not flags & socket.MSG_TRUNC else {}
            reason = self.refusal(request, fds) if request else "an unreadable request"
            if reason:
                connection.send(f"refused {reason}".encode())
                raise ConnectionAbortedError(reason)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                self.run_child(request, fds)
            with contextlib.suppress(OSError):  # the child does it too: whichever runs first
                os.setpgid(pid, pid)
            self.running[pid] = (connection, os.pidfd_open(pid))
            connection.send(f"started {pid}".encode())
            self.selector.register(connection, selectors.EVENT_READ, ("client", pid))
            self.selector.register(self.running[pid][1], selectors.EVENT_READ, ("child", pid))
        except (OSError, ValueError) as error:
            LOG.info("stage server: request not run (%s)", error)
            connection.close()
        finally:
            for fd in fds:
                os.close(fd)

    def client_gone(self, pid: int) -> None:
        """The client closed its end before its stage ended: it was killed, so the stage goes too."""
        connection, pidfd = self.running[pid]
        assert connection is not None
        self.selector.unregister(connection)
        connection.close()
        self.running[pid] = (None, pidfd)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    def child_ended(self, pid: int) -> None:
        connection, pidfd = self.running.pop(pid)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if connection is not None:
            self.selector.unregister(connection)
            with contextlib.suppress(OSError):
                connection.send(f"exited {code if code >= 0 else 128 - code}".encode())
            connection.close()

    def stop(self) -> None:
        """Terminate the stages still running and wait for them (SIGKILL after ``STOP_GRACE_S``), close the socket.
        Their clients stay connected until then: a ``privhar stage`` waiting on this server, and so the run's
        guard and lock (flows/group_guard.py), outlive the stage (issue 35)."""
        for pid in self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for pid in list(self.running):
            with contextlib.suppress(ChildProcessError):
                while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
                    time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self.selector.close()
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.address)

    def run_child(self, request: dict, fds: list[int]) -> None:
        """In the fork: become the process the client would have been, run the command line, exit. Never returns."""
        status = 1
        try:
            os.setpgid(0, 0)
            end_with_parent()
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.selector.close()
            self.listener.close()
            for connection, pidfd in self.running.values():
                if connection is not None:
                    connection.close()
                os.close(pidfd)
            for target, fd in zip((0, 1, 2), fds):
                os.dup2(fd, target)
            for fd in fds:
                os.close(fd)
            sys.stdin = os.fdopen(0, "r", closefd=False)
            sys.stdout = os.fdopen(1, "w", buffering=1 if os.isatty(1) else -1, closefd=False)
            sys.stderr = os.fdopen(2, "w", buffering=1, errors="backslashreplace", closefd=False)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            os.environ[FORKED_ENV] = str(os.getppid())
            sys.argv = list(request["argv"])
            if "numpy" in sys.modules:
                sys.modules["numpy"].random.seed()  # from the OS, as in a fresh process
            from flows.entry import run_as_process
            from flows.stage_commands import stage

            try:  # argv is ["privhar", "stage", ...]: the client sends stage commands only (flows/launch.py)
                run_as_process(stage, sys.argv[2:], prog_name="privhar stage")
                status = 0
            except SystemExit as stopped:
                status = exit_status(stopped.code)
            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001  (a fault of the server itself: shown, never silent)
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(status)


# the startup settings of the stage server this process exported, while it runs (see with_server_settings)
_exported_settings: dict[str, str | None] = {}


def with_server_settings(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the startup settings the exported stage server was started with. The flow runs the sharded
    stages in its own process, and OpenCV's import there appends to ``LD_LIBRARY_PATH`` (for subprocesses): every
    stage DVC started after it differed from the server and ran cold, ≈ 5 s each on this machine."""
    env = dict(env)
    for name, value in _exported_settings.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@contextlib.contextmanager
def _exporting(address: str) -> Iterator[None]:
    with exported(SERVER_ENV, address):
        _exported_settings.update({name: os.environ.get(name) for name in STARTUP_SETTINGS})
        try:
            yield
        finally:
            _exported_settings.clear()


@contextlib.contextmanager
def stage_server(export: bool = False) -> Iterator[dict[str, str]]:
    """Start a stage server for the block; yield the environment that sends ``privhar stage`` to it (empty where
    it did not start: the stages then run cold, as before), set in ``os.environ`` for the block if ``export``."""
    folder = tempfile.mkdtemp(prefix="privhar-stages-")
    address = os.path.join(folder, "stage.sock")
    process = subprocess.Popen(
        [sys.executable, "-m", "flows.stage_server", address],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while (
            not os.path.exists(address) and process.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        if os.path.exists(address):
            with _exporting(address) if export else contextlib.nullcontext():
                yield {SERVER_ENV: address}
        else:
            LOG.warning(
                "privhar: the stage server did not start; every stage starts its own interpreter"
            )
            yield {}
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S + 5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def main(address: str) -> None:
    """``python -m flows.stage_server ADDRESS``: bind first (clients queue while it warms), warm, serve."""
    handler = logging.StreamHandler(
        sys.stderr
    )  # this logger only: the stages' own logging stays as a fresh process has it
    handler.setFormatter(logging.Formatter("%(message)s"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False
    end_with_parent()
    server = StageServer(address)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    warm()
    with contextlib.suppress(KeyboardInterrupt, SystemExit):
        server.serve()


if __name__ == "__main__":
    main(sys.argv[1])
