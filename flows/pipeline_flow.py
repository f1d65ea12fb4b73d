"""The Prefect flow: the DAG of ``dvc.yaml`` as Prefect tasks, under one MLflow parent run.

Each stage is a task submitted once its upstream stages have completed (:mod:`flows.stage_scheduler`; ``wait_for``
them, so the Prefect UI draws the DAG), so stages that do not depend on each other run at once:
``orchestrate.stage_workers`` of them (1 by default), each with its share of the cores (two on two cores: one thread
each; two of the train stage's trainings ran 1.2-1.3x faster so than one after the other, but a whole run slower:
docs/operations.md). A failed stage fails its task
with its one-line error; the stages after it do not start, and the flow fails naming it.
Retries come from ``orchestrate.retries`` / ``retry_delay_seconds``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.states import State
from prefect.task_runners import ThreadPoolTaskRunner

from flows.ast_lock import serialise_ast_parse
from flows.dag import DagStage, read_dag, runs_scoring
from flows.pipeline import check_project, pipeline_session, score_models
from flows.preflight import INDEX_STAGE, check_dataset, check_params
from flows.profiles import DEFAULT, apply_profile
from flows.stage_scheduler import run_when_ready, stage_outcomes
from flows.stage_tasks import STAGE_WALLS, StageFailed, run_stage
from flows.stage_times import log_stage_times
from tasks.core.environ import exported
from tasks.core.parallel import STAGE_CORES_ENV, core_share
from tasks.core.params import OrchestrateParams, load_section

FLOW_NAME = "privhar-pipeline"


def failure_message(state: State, fallback: str) -> str:
    """The exception a failed flow or task run raised, as its one line; ``fallback`` if there is none (or it ran in
    another process, the served runner, and only its state's message came back)."""
    try:
        error = state.result(raise_on_failure=False)
    except Exception:  # noqa: BLE001 - Prefect's MissingResult: a result kept by another process
        return state.message or fallback
    return str(error) if isinstance(error, BaseException) else fallback


@flow(name=FLOW_NAME, log_prints=True)
def pipeline_flow(
    project: str = ".", profile: str = DEFAULT, stages: list[str] | None = None, force: bool = False
) -> dict[str, dict[str, float]]:
    """Bring ``stages`` (all if empty) of the DVC project up to date; return Top-1 etc. per method (nothing when the
    chosen stages do not include ``evaluate``: no model was scored).

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
    targets = list(stages or [])
    with pipeline_session(
        root,
        "prefect flow",
        {"privhar.profile": profile, "privhar.targets": " ".join(targets) or "all"},
        name=" ".join(["pipeline", *targets]),
    ) as parent:
        started = time.monotonic()
        STAGE_WALLS.clear()
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
        whole = not (stages or settings.stages)

        def submit(stage: DagStage) -> Any:
            upstream = [futures[name] for name in stage.upstream if name in futures]
            return runner.submit(
                stage_task,
                {"stage": stage, "force": force, "settings": settings},
                wait_for=upstream,
            )

        def checked(stage: DagStage, future: Any) -> None:
            if (
                whole and stage.name == INDEX_STAGE
            ):  # the params against the dataset, before the rest starts
                check_dataset(root)

        # each stage's share of the cores (its torch threads, its worker pools): two at once on two cores, one each
        with (
            exported(STAGE_CORES_ENV, str(core_share(settings.stage_workers))),
            ThreadPoolTaskRunner(max_workers=settings.stage_workers) as runner,
        ):
            futures: dict[str, Any] = {}
            run_when_ready(dag, submit, futures, checked, gate=INDEX_STAGE if whole else None)
            failed_stages, not_run = stage_outcomes(dag, futures)
        failed = [
            failure_message(futures[name].state, f"{name}: {futures[name].state.message}")
            for name in failed_stages
        ]
        if STAGE_WALLS:  # a stage ran
            table = log_stage_times(
                parent, dict(STAGE_WALLS), time.monotonic() - started, "Prefect flow"
            )
            logger.info("where the time went (wall seconds per stage task, DVC's included):")
            for line in (
                table.splitlines()
            ):  # a record per line: the console keeps a record's first line only
                logger.info(line)
        if failed:
            after = f"; not run: {', '.join(not_run)}" if not_run else ""
            raise StageFailed(f"{failed[0]}{after}")
        return score_models(root) if runs_scoring(futures) else {}
