"""The scheduled deployment of the pipeline flow: ``privhar serve`` serves it until interrupted, and every
``privhar flow`` (so ``make run``) is one run of it.

The deployment is declared here and only here, with ``flow.serve``, not in a
``prefect.yaml``: serving needs no work pool, no worker and no copy of the project for a
worker to pull, so one command on a laptop gives a real schedule; its cron, time zone,
profile and stages come from ``params.yaml: orchestrate``. (On a cluster, the same flow
can be deployed to a work pool instead: README, "Running on a cluster".)

A run of ``privhar flow``:

- ``privhar serve`` is up: the run is created from its deployment and executed by the served runner, as Prefect's
  own "Run" button or ``prefect deployment run`` would; this process follows the run's logs until it ends.
- Nothing serves the deployment: it is registered with its schedule paused (nobody would execute the cron's runs),
  a run is created from it and executed here, in this process (Prefect's ``run_flow`` with that run, which is what
  a worker does), so the terminal shows the stages as they run.

Either way the flow run sits under ``privhar-pipeline/scheduled`` in the Prefect UI, on the project's database
(``flows/prefect_server.py``), beside the scheduled ones. The flow itself is imported where it is used: prefect
reads its settings once, at import, after ``serve`` has set this project's.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from flows.prefect_server import HOME, SERVE_PID, prefect_environment, prefect_server, serving
from flows.servers import interrupt_on_signals, stop_process_group
from flows.stage_readers import orchestrate
from tasks.core.errors import ERROR_PREFIX, PrivharError
from tasks.core.params import OrchestrateParams

DEPLOYMENT_NAME = "scheduled"
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")  # a flow run's states that end it
POLL_SECONDS = 2.0
DEPLOYMENT_DESCRIPTION = (
    "The privhar DAG from dvc.yaml; each stage a task, up-to-date stages skipped."
)


def deployment_schedule(settings: OrchestrateParams) -> Any:
    """Prefect's cron schedule of ``orchestrate.cron`` in ``orchestrate.timezone``; each checked, in one line."""
    import zoneinfo

    from prefect.schedules import Cron

    try:
        zoneinfo.ZoneInfo(settings.timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise PrivharError(
            f"params.yaml: orchestrate.timezone = {settings.timezone!r} is invalid: expected an IANA time zone "
            "such as UTC or Europe/Berlin"
        ) from None
    try:
        return Cron(settings.cron, timezone=settings.timezone)
    except ValueError:
        raise PrivharError(
            f"params.yaml: orchestrate.cron = {settings.cron!r} is invalid: expected five cron fields such as "
            "'0 3 * * *' (minute hour day month weekday)"
        ) from None


def deployment_options(
    project: str, settings: OrchestrateParams, *, paused: bool
) -> dict[str, Any]:
    """The deployment as Prefect's ``Flow.serve`` and ``Flow.to_deployment`` take it (name, cron schedule, default
    parameters, description, tags): one description for ``privhar serve`` and for ``privhar flow`` registering it."""
    return {
        "name": DEPLOYMENT_NAME,
        "schedules": [deployment_schedule(settings)],
        "parameters": {"project": project, "profile": settings.profile, "stages": settings.stages},
        "description": DEPLOYMENT_DESCRIPTION,
        "tags": ["privhar"],
        "paused": paused,
    }


def serve(project: Path, host: str | None = None, port: int | None = None) -> None:
    """Start or reuse the project's Prefect server, register the deployment, serve it; clean up on exit.

    The process ends with ``os._exit`` once everything it started is stopped: Prefect's runner
    can leave non-daemon threads behind after a shutdown (notably when its server went away
    first), and a ``privhar serve`` that lingers is exactly what ``--stop`` must not leave.
    """
    project = Path(project).resolve()
    settings = orchestrate(project)
    host, port = host or settings.host, settings.prefect_port if port is None else port
    # before anything imports prefect: it reads its settings once, at import, and without this project's API URL
    # its client would start a temporary server of its own (which os._exit below would leave running)
    os.environ.update(prefect_environment(project, host, port))
    # a bad cron or time zone stops here, before any server starts
    deployment_schedule(settings)
    _check_not_serving(project)
    server = prefect_server(project, host, port)
    pid_file = project / HOME / SERVE_PID
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    # first, so that --stop finds a serve that is still starting
    pid_file.write_text(f"{os.getpid()} {host} {port}")
    interrupt_on_signals()  # until the runner starts and installs its own SIGTERM handler
    started, status = False, 0
    try:
        started_at = time.monotonic()
        started = server.start()
        _serve_deployment(project, settings, started, time.monotonic() - started_at, host, port)
    except (KeyboardInterrupt, SystemExit):
        print("privhar: serve interrupted", file=sys.stderr)
    except Exception as error:  # noqa: BLE001 - reported in one line, then everything is stopped
        print(
            f"{ERROR_PREFIX}serve failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
            file=sys.stderr,
        )
        status = 1  # a fault, as every other command's (2 is click's usage error; issue 82)
    finally:
        if started:
            server.stop()
            print("privhar: Prefect server stopped", file=sys.stderr)
        pid_file.unlink(missing_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _check_not_serving(project: Path) -> None:
    running = serving(project)
    if running is not None:
        raise PrivharError(
            f"privhar serve is already running for this project (pid {running[0]}, Prefect server at "
            f"http://{running[1]}:{running[2]}); stop it first with 'privhar serve --stop'"
        )


def _serve_deployment(
    project: Path,
    settings: OrchestrateParams,
    started: bool,
    seconds: float,
    host: str,
    port: int,
) -> None:
    """Serve the deployment until the runner stops (Ctrl-C, SIGTERM, ``privhar serve --stop``)."""
    # Prefect's runner shuts down cleanly on SIGTERM, while SIGINT cancels it mid-shutdown and
    # can hang; so Ctrl-C is turned into SIGTERM.
    signal.signal(signal.SIGINT, lambda signum, frame: os.kill(os.getpid(), signal.SIGTERM))
    from flows.pipeline_flow import pipeline_flow

    print(
        f"privhar: Prefect server {'started' if started else 'reused'} in {seconds:.1f} s; "
        f"UI at http://{host}:{port}",
        file=sys.stderr,
    )
    print(
        f"privhar: serving {pipeline_flow.name}/{DEPLOYMENT_NAME}, cron '{settings.cron}' ({settings.timezone}), "
        f"profile {settings.profile}; Ctrl-C or 'privhar serve --stop' ends it",
        file=sys.stderr,
    )
    # served, its schedule runs; a manual `privhar flow` without a server registers it paused (run_as_deployment)
    pipeline_flow.serve(
        **deployment_options(str(project), settings, paused=False), print_starting_message=False
    )


def stop_serving(project: Path) -> list[str]:
    """End a ``privhar serve`` of this project (and a server it left); return what was stopped."""
    home = Path(project).resolve() / HOME
    stopped = []
    serve_pid = home / SERVE_PID
    running = serving(project)
    if running is not None:
        pid = running[0]
        try:
            os.kill(pid, signal.SIGTERM)
            stopped.append(f"privhar serve (pid {pid})")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (
                serve_pid.exists() or (home / "server.pid").exists()
            ):
                time.sleep(0.2)
        except ProcessLookupError:
            serve_pid.unlink(missing_ok=True)
    if stop_process_group(home / "server.pid"):
        stopped.append("Prefect server")
    return stopped


def run_as_deployment(project: Path, parameters: dict[str, Any]) -> Any:
    """One flow run of the deployment with ``parameters``; its final state."""
    if serving(project) is not None:
        return run_on_served_runner(parameters)
    from prefect import get_client
    from prefect.flow_engine import run_flow

    from flows.pipeline_flow import pipeline_flow

    settings = orchestrate(project)
    deployment = pipeline_flow.to_deployment(
        **deployment_options(parameters["project"], settings, paused=True)
    )
    deployment_id = deployment.apply()
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run_from_deployment(
            deployment_id, parameters=parameters, tags=["manual"]
        )
    return run_flow(pipeline_flow, flow_run=flow_run, parameters=parameters, return_type="state")


def run_on_served_runner(parameters: dict[str, Any]) -> Any:
    """Create the run on the served deployment and print its log lines until it reaches a final state."""
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.deployments import run_deployment

    from flows.pipeline_flow import FLOW_NAME

    flow_run = run_deployment(
        f"{FLOW_NAME}/{DEPLOYMENT_NAME}", parameters=parameters, timeout=0, tags=["manual"]
    )
    print(
        f"privhar: flow run {flow_run.name} created on the served deployment "
        f"{FLOW_NAME}/{DEPLOYMENT_NAME}; its log follows",
        file=sys.stderr,
    )
    shown = 0
    with get_client(sync_client=True) as client:
        while True:
            flow_run = client.read_flow_run(flow_run.id)
            logs = client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id])),
                sort=LogSort.TIMESTAMP_ASC,
                offset=shown,
            )
            for log in logs:
                print(log.message, flush=True)
            shown += len(logs)
            if flow_run.state is not None and flow_run.state.type.value in FINAL and not logs:
                return flow_run.state
            time.sleep(POLL_SECONDS)
