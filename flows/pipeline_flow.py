"""The Prefect flow: the DAG of ``dvc.yaml`` as Prefect tasks, under one MLflow parent run.

Each stage is a task submitted with ``wait_for`` its upstream stages, so stages that do not
depend on each other run at once on the flow's thread pool. A failed stage fails its task
with its one-line error; the stages after it do not start, and the flow fails naming it.
Retries come from ``orchestrate.retries`` / ``retry_delay_seconds``.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.states import State
from prefect.task_runners import ThreadPoolTaskRunner

from flows.ast_lock import serialise_ast_parse
from flows.dag import read_dag
from flows.pipeline import check_project, pipeline_session, score_models
from flows.preflight import INDEX_STAGE, check_dataset, check_params
from flows.profiles import DEFAULT, apply_profile
from flows.stage_server import stage_server
from flows.stage_tasks import StageFailed, run_stage
from tasks.core.params import OrchestrateParams, load_section

FLOW_NAME = "privhar-pipeline"


def failure_message(state: State, fallback: str) -> str:
    """The exception a failed flow or task run raised, as its one line; ``fallback`` if there is none."""
    error = state.result(raise_on_failure=False)
    return str(error) if isinstance(error, BaseException) else fallback


@flow(name=FLOW_NAME, task_runner=ThreadPoolTaskRunner(max_workers=4), log_prints=True)
def pipeline_flow(
    project: str = ".", profile: str = DEFAULT, stages: list[str] | None = None, force: bool = False
) -> dict[str, dict[str, float]]:
    """Bring ``stages`` (all if empty) of the DVC project up to date; return Top-1 etc. per method.

    Args:
        project: The DVC project folder (holding dvc.yaml and params.yaml), relative to where the worker runs.
        profile: A params profile (profiles/<name>.yaml) overlaid on params.yaml first; "default" leaves it as it is.
        stages: DVC stage names to bring up to date, each with what it depends on (train, evaluate,
            train-private@dp_sgd, ...); empty: every stage.
        force: Rerun the chosen stages even if DVC finds them up to date.
    """
    root = check_project(Path(project))
    logger = get_run_logger()
    serialise_ast_parse()  # stages and shards run on threads from here on
    # the stages DVC starts for each task fork from one warm server (its address in os.environ, for tool_environment)
    with (
        pipeline_session(root, "prefect flow", {"privhar.profile": profile}),
        stage_server(export=True),
    ):
        if apply_profile(root, profile):
            logger.info(f"profile {profile}: profiles/{profile}.yaml applied to params.yaml")
        check_params(root)  # every section, before the first stage
        settings = load_section(root / "params.yaml", "orchestrate", OrchestrateParams)
        dag = read_dag(root, stages or settings.stages)
        logger.info(
            "stages: "
            + ", ".join(f"{s.name} (after {', '.join(s.upstream) or 'nothing'})" for s in dag)
        )
        stage_task = run_stage.with_options(
            retries=settings.retries, retry_delay_seconds=settings.retry_delay_seconds
        )
        futures = {}
        whole = not (stages or settings.stages)
        for stage in dag:
            upstream = [futures[name] for name in stage.upstream if name in futures]
            futures[stage.name] = stage_task.submit(stage, force, settings, wait_for=upstream)
            if (
                whole and stage.name == INDEX_STAGE
            ):  # the params against the dataset, before the rest starts
                futures[stage.name].wait()
                if futures[stage.name].state.is_completed():
                    check_dataset(root)
        failed, not_run = [], []
        for name, future in futures.items():
            future.wait()
            state = future.state
            if state.is_failed() or state.is_crashed():
                failed.append(failure_message(state, f"{name}: {state.message}"))
            elif not state.is_completed():
                not_run.append(name)
        if failed:
            after = f"; not run: {', '.join(not_run)}" if not_run else ""
            raise StageFailed(f"{failed[0]}{after}")
        return score_models(root)
