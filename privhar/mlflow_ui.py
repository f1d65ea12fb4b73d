"""``privhar ui``: the MLflow UI over the project's store, on loopback, with nothing left behind.

MLflow 3's server starts job-execution workers unless told not to; they would outlive the
UI, so they are disabled, and the UI runs one worker in its own process group that is
ended as a whole on exit.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from flows.servers import LocalServer, interrupt_on_signals, stop_process_group
from tasks.core.tracking import configure, tracking_uri

HOME = ".mlflow-ui"


def mlflow_ui(project: Path, host: str, port: int) -> LocalServer:
    project = Path(project).resolve()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = (
        str(Path(sys.executable).parent / "mlflow"),
        "server",
        "--backend-store-uri",
        tracking_uri(project),
        "--default-artifact-root",
        (project / "mlartifacts").as_uri(),
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    )
    home = project / HOME
    return LocalServer(
        "MLflow UI",
        command,
        env,
        f"http://{host}:{port}/health",
        home / f"ui-{port}.pid",
        home / f"ui-{port}.log",
        host,
        port,
    )


def experiment_url(base: str, experiment: str) -> str:
    """The experiment's runs in MLflow's model-training view. MLflow 3.17's UI opens every experiment in its GenAI
    view ("0 traces") unless the address, or the browser's earlier choice of its GenAI / Model training switch,
    asks for ``workflowType=machine_learning``: the experiment's ``mlflow.experimentKind`` tag does not decide it."""
    return f"{base}/#/experiments/{experiment}/runs?workflowType=machine_learning"


def stop_uis(project: Path, port: int | None = None) -> list[int]:
    """Stop the project's MLflow UI on ``port`` (every one if None); return the ports stopped."""
    home = Path(project).resolve() / HOME
    files = [home / f"ui-{port}.pid"] if port else sorted(home.glob("ui-*.pid"))
    return [int(file.stem.removeprefix("ui-")) for file in files if stop_process_group(file)]


def run_ui(project: Path, host: str, port: int) -> None:
    """Start the UI (or find it up), print its address, wait for Ctrl-C or SIGTERM, stop it."""
    interrupt_on_signals()
    server = mlflow_ui(project, host, port)
    started_at = time.monotonic()
    started = server.start()
    runs = experiment_url(f"http://{host}:{port}", configure(Path(project).resolve()))
    store = tracking_uri(Path(project).resolve())
    if not started:  # issue 82: it said "Ctrl-C ends it" and returned at once
        print(
            f"privhar: MLflow UI already up at {runs} (store {store}), started by another privhar command of this "
            f"project (pid {server.pid_file.read_text().strip()}, log {server.log_file}); "
            f"'privhar ui stop --port {port}' ends it",
            file=sys.stderr,
        )
        return
    print(
        f"privhar: MLflow UI started in {time.monotonic() - started_at:.1f} s at {runs} (store {store}); "
        "Ctrl-C ends it",
        file=sys.stderr,
    )
    try:
        while server.is_up():
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print("privhar: MLflow UI stopped", file=sys.stderr)
