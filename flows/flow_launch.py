"""How ``privhar flow`` (and so ``make run``) starts one run of the pipeline flow: always as a run of the deployment.

- ``privhar serve`` is up: the run is created from its deployment and executed by the served runner, as Prefect's
  own "Run" button or ``prefect deployment run`` would; this process follows the run's logs until it ends.
- Nothing serves the deployment: it is registered with its schedule paused (nobody would execute the cron's runs),
  a run is created from it and executed here, in this process (Prefect's ``run_flow`` with that run, which is what
  a worker does), so the terminal shows the stages as they run.

Either way the flow run sits under ``privhar-pipeline/scheduled`` in the Prefect UI, on the project's database
(``flows/prefect_server.py``), beside the scheduled ones.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from flows.deployment import DEPLOYMENT_NAME, deployment_options
from flows.pipeline_flow import FLOW_NAME, pipeline_flow
from flows.prefect_server import serving
from tasks.core.params import OrchestrateParams, load_section

FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
POLL_SECONDS = 2.0


def run_as_deployment(project: Path, parameters: dict[str, Any]) -> Any:
    """One flow run of the deployment with ``parameters``; its final state."""
    if serving(project) is not None:
        return run_on_served_runner(parameters)
    settings = load_section(Path(project) / "params.yaml", "orchestrate", OrchestrateParams)
    deployment = pipeline_flow.to_deployment(
        **deployment_options(parameters["project"], settings, paused=True)
    )
    deployment_id = deployment.apply()
    from prefect import get_client
    from prefect.flow_engine import run_flow

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
