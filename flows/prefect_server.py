"""The project's own Prefect server: SQLite database and home inside ``.prefect/``, on loopback.

Prefect reads its settings from the environment when it is first imported, so
:func:`use_project_server` must run before ``import prefect``; privhar's commands import
Prefect lazily for that reason.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from flows.servers import LocalServer, answers, free_port, pid_alive

HOME = ".prefect"
SERVE_PID = "serve.pid"  # privhar serve's pid, host and port (flows/deployment.py)


def prefect_environment(project: Path, host: str, port: int) -> dict[str, str]:
    """Settings that put Prefect's home, database and API for this project where they belong."""
    home = Path(project).resolve() / HOME
    return {
        "PREFECT_HOME": str(home),
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{home / 'prefect.db'}",
        "PREFECT_SERVER_API_HOST": host,
        "PREFECT_SERVER_API_PORT": str(port),
        "PREFECT_API_URL": f"http://{_client_host(host)}:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # no network here; and no telemetry unasked
        "PREFECT_UI_ENABLED": "true",
        "PREFECT_LOGGING_EXTRA_LOGGERS": "tasks",  # the stages' logging (progress, privacy lines) in the run's log
    }


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def prefect_server(project: Path, host: str, port: int, files: str = "server") -> LocalServer:
    """The project's Prefect server on ``host``:``port``; its pid and log in ``.prefect/<files>.pid`` / ``.log``."""
    env = {**os.environ, **prefect_environment(project, host, port)}
    home = Path(env["PREFECT_HOME"])
    command = (
        str(Path(sys.executable).parent / "prefect"),
        "server",
        "start",
        "--host",
        host,
        "--port",
        str(port),
        "--analytics-off",
    )
    return LocalServer(
        "Prefect server",
        command,
        env,
        f"{env['PREFECT_API_URL']}/health",
        home / f"{files}.pid",
        home / f"{files}.log",
        host,
        port,
        cwd=home,
    )


def serving(project: Path) -> tuple[int, str, int] | None:
    """(pid, host, port) of the project's running ``privhar serve`` (its pid file, flows/deployment.py writes it), or
    None (a stale pid file is removed)."""
    pid_file = Path(project).resolve() / HOME / SERVE_PID
    try:
        fields = pid_file.read_text().split()
        pid, host, port = int(fields[0]), fields[1], int(fields[2])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    if not pid_alive(pid):
        pid_file.unlink(missing_ok=True)
        return None
    return pid, host, port


def use_project_server(project: Path) -> str | None:
    """Point this process at the project's Prefect server if it is up; return its API URL (None: none is up)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from flows.stage_readers import orchestrate

    settings = orchestrate(project)
    running = serving(project)  # privhar serve --port N: its server, wherever it listens
    host, port = (running[1], running[2]) if running else (settings.host, settings.prefect_port)
    env = prefect_environment(project, host, port)
    if not answers(f"{env['PREFECT_API_URL']}/health"):
        return None
    os.environ.update(env)
    return env["PREFECT_API_URL"]


@contextlib.contextmanager
def project_server(project: Path) -> Iterator[str]:
    """The project's Prefect server for one command; yield its API URL.

    The one that is up (``privhar serve``'s, or the user's ``PREFECT_API_URL``); else a temporary one on the project's
    own database and a free loopback port, stopped when the block ends: the flow run, its task graph and its logs
    are there when ``privhar serve`` later opens the dashboard. Not Prefect's own temporary server: that one runs in
    the terminal's process group (one Ctrl-C ended it under the flow, which then hung on ``ConnectError``: issue 61)
    and outlives a run killed outright; this one runs in its own session under :mod:`flows.group_guard`, which ends it
    with this process.
    """
    url = use_project_server(project)
    if url is not None:
        yield url
        return
    port = free_port()
    server = prefect_server(project, "127.0.0.1", port, files="flow-server")
    server.start()
    try:
        env = prefect_environment(project, "127.0.0.1", port)
        os.environ.update(env)
        yield env["PREFECT_API_URL"]
    finally:
        server.stop()
