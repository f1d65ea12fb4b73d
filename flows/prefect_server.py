"""The project's own Prefect server: SQLite database and home inside ``.prefect/``, on loopback.

Prefect reads its settings from the environment when it is first imported, so
:func:`use_project_server` must run before ``import prefect``; privhar's commands import
Prefect lazily for that reason.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from flows.servers import LocalServer, answers, pid_alive

HOME = ".prefect"
SERVE_PID = "serve.pid"  # privhar serve's pid, host and port (flows/deployment.py)
# where a server listens: a temporary server picks its own port, so only these are left to it
SERVER_ADDRESS = ("PREFECT_SERVER_API_HOST", "PREFECT_SERVER_API_PORT", "PREFECT_API_URL")


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
        # a temporary server's first start on a fresh clone (a new database to migrate, nothing byte-compiled yet) took
        # over Prefect's 20 s on 2 cores on 2026-11-27, and `make run` failed before its first stage
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    }


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def prefect_server(project: Path, host: str, port: int) -> LocalServer:
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
        home / "server.pid",
        home / "server.log",
        host,
        port,
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
    """Point this process at the project's Prefect server if it is up; return its API URL.

    With no server up (and no ``PREFECT_API_URL`` of the user's), Prefect starts a temporary one for the run, on the
    project's own database: the flow run, its task graph and its logs are there when ``privhar serve`` later opens
    the dashboard (a temporary server on Prefect's default home would take them away with it).
    """
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from tasks.core.params import OrchestrateParams, load_section

    settings = load_section(Path(project) / "params.yaml", "orchestrate", OrchestrateParams)
    running = serving(project)  # privhar serve --port N: its server, wherever it listens
    host, port = (running[1], running[2]) if running else (settings.host, settings.prefect_port)
    env = prefect_environment(project, host, port)
    if not answers(f"{env['PREFECT_API_URL']}/health"):
        temporary = {key: value for key, value in env.items() if key not in SERVER_ADDRESS}
        (Path(project).resolve() / HOME).mkdir(exist_ok=True)
        os.environ.update(temporary)
        return None
    os.environ.update(env)
    return env["PREFECT_API_URL"]
