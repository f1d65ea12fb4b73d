"""The Prefect flow: the DAG of ``dvc.yaml`` as Prefect tasks, under one MLflow parent run.

Each stage is a task submitted in the DAG's order with ``wait_for`` its upstream stages (so the Prefect UI draws the
DAG): a stage whose upstream failed never runs (Prefect leaves it ``NotReady``). ``orchestrate.stage_workers`` tasks
run at once (1 by default), each stage with its share of the cores (two on two cores: one thread each; two of the
train stage's trainings ran 1.2-1.3x faster so than one after the other, but a whole run slower: docs/operations.md);
a task waiting for its upstream holds its worker meanwhile. A failed stage fails its task with its one-line error,
and the flow fails naming it and the stages not run.
Retries come from ``orchestrate.retries`` / ``retry_delay_seconds``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.states import State
from prefect.task_runners import ThreadPoolTaskRunner

from flows.dag import DagStage, read_dag, runs_scoring
from flows.pipeline import check_project, end_running_dvc, pipeline_session, score_models
from flows.preflight import INDEX_STAGE, check_dataset, check_params
from flows.profiles import DEFAULT, apply_profile
from flows.stage_readers import orchestrate
from flows.stage_tasks import STAGE_WALLS, StageFailed, run_stage, stop_shards
from flows.stage_times import log_stage_times, previous_walls, progress_line
from tasks.core.environ import exported
from tasks.core.parallel import STAGE_CORES_ENV, core_share
from tasks.core.params import OrchestrateParams

FLOW_NAME = "privhar-pipeline"


def failure_message(state: State, fallback: str) -> str:
    """The exception a failed flow or task run raised, as its one line; ``fallback`` if there is none (or it ran in
    another process, the served runner, and only its state's message came back)."""
    try:
        error = state.result(raise_on_failure=False)
    except Exception:  # noqa: BLE001 - Prefect's MissingResult: a result kept by another process
        return state.message or fallback
    return str(error) if isinstance(error, BaseException) else fallback


def wait(future: Any) -> State:
    """The final state of a stage task (or ``NotReady``: its upstream did not complete).

    Waited for in half-second steps: Python runs a signal's handler in the main thread only once that thread runs
    again, and a lock wait without a timeout is not always woken by it (a Ctrl-C stopped the run only once the
    stage it waited for had ended)."""
    while not future.wrapped_future.done():
        future.wait(timeout=0.5)
    future.wait()
    return future.state


def stage_outcomes(dag: list[DagStage], futures: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Once every stage has ended: the failed stages, and the stages that did not run."""
    states = {stage.name: wait(futures[stage.name]) for stage in dag}
    failed = [name for name, state in states.items() if state.is_failed() or state.is_crashed()]
    not_run = [
        name for name, state in states.items() if name not in failed and not state.is_completed()
    ]
    return failed, not_run


class DagRun:
    """The stage tasks of one flow run: submitted in the DAG's order with ``wait_for`` their upstream stages, each
    logging its progress line as it ends."""

    def __init__(
        self, dag: list[DagStage], settings: OrchestrateParams, force: bool, previous: Any
    ) -> None:
        self.dag, self.settings, self.force, self.previous = dag, settings, force, previous
        self.order = [stage.name for stage in dag]
        self.task = run_stage.with_options(
            retries=settings.retries, retry_delay_seconds=settings.retry_delay_seconds
        )
        self.futures: dict[str, Any] = {}
        self.finished: set[str] = set()
        self.stopped: dict[str, str] = {}
        self.runner: Any = None
        self.logger = get_run_logger()

    def report(self, name: str, done: Any) -> None:
        self.finished.add(name)
        try:
            done.wait(0)  # the task's final state, from its thread's result
            if not done.state.is_completed():
                self.stopped[name] = done.state.name
        except Exception:  # noqa: BLE001 - cancelled before it ran (Ctrl-C): it has no state to read
            self.stopped[name] = "Cancelled"
        self.logger.info(
            progress_line(
                name, STAGE_WALLS.get(name), self.order, self.finished, self.previous, self.stopped
            )
        )

    def submit(self, stage: DagStage) -> None:
        upstream = [self.futures[name] for name in stage.upstream if name in self.futures]
        future = self.runner.submit(
            self.task,
            {"stage": stage, "force": self.force, "settings": self.settings},
            wait_for=upstream,
        )
        future.add_done_callback(lambda done: self.report(stage.name, done))
        self.futures[stage.name] = future

    def run(self, root: Path, whole: bool) -> tuple[list[str], list[str]]:
        """Every stage until each has ended: the failed stages, and the stages that did not run. Where the whole DAG
        runs, the index first: the params are checked against the dataset before the rest starts."""
        gate = self.order.index(INDEX_STAGE) + 1 if whole and INDEX_STAGE in self.order else 0
        # each stage's share of the cores (its torch threads, its worker pools): two at once on two cores, one each
        with (
            exported(STAGE_CORES_ENV, str(core_share(self.settings.stage_workers))),
            ThreadPoolTaskRunner(max_workers=self.settings.stage_workers) as self.runner,
        ):
            try:
                for stage in self.dag[:gate]:
                    self.submit(stage)
                if gate and wait(self.futures[INDEX_STAGE]).is_completed():
                    check_dataset(root)
                for stage in self.dag[gate:]:
                    self.submit(stage)
                return stage_outcomes(self.dag, self.futures)
            # Ctrl-C, SIGTERM (Prefect's TerminationSignal), the dataset refused: the stages at work end now (the
            # runner cancels the queued ones), since their threads only wait on them
            except BaseException:
                stop_shards()
                end_running_dvc()
                raise


def log_walls(parent: Any, started: float) -> None:
    """Where the time went, a record per line (the console keeps a record's first line only)."""
    table = log_stage_times(parent, dict(STAGE_WALLS), time.monotonic() - started, "Prefect flow")
    logger = get_run_logger()
    logger.info("where the time went (wall seconds per stage task, DVC's included):")
    for line in table.splitlines():
        logger.info(line)


@flow(name=FLOW_NAME, log_prints=True)
def pipeline_flow(
    project: str = ".", profile: str = DEFAULT, stages: list[str] | None = None, force: bool = False
) -> dict[str, dict[str, float]]:
    """Bring ``stages`` (all if empty) of the DVC project up to date; return Top-1 etc. per method (nothing when the
    chosen stages do not include ``evaluate``: no model was scored).

    Args:
        project: The DVC project folder (holding dvc.yaml and params.yaml), relative to where the worker runs.
        profile: A params profile (profiles/<name>.yaml) overlaid on params.yaml first; "default" is params.yaml without one.
        stages: DVC stage names to bring up to date, each with what it depends on (train, evaluate,
            train-private@dp_sgd, ...); empty: every stage.
        force: Rerun the chosen stages even if DVC finds them up to date.
    """
    root = check_project(Path(project))
    targets = list(stages or [])
    with pipeline_session(
        root,
        "prefect flow",
        {"privhar.profile": profile, "privhar.targets": " ".join(targets) or "all"},
        name=" ".join(["pipeline", *targets]),
    ) as parent:
        started = time.monotonic()
        STAGE_WALLS.clear()
        stop_shards(False)
        if apply_profile(root, profile):
            get_run_logger().info(
                f"profile {profile}: profiles/{profile}.yaml applied to params.yaml"
            )
        check_params(root)  # every section, before the first stage
        settings = orchestrate(root)
        dag = read_dag(root, stages or settings.stages)
        get_run_logger().info(
            "stages: "
            + ", ".join(f"{s.name} (after {', '.join(s.upstream) or 'nothing'})" for s in dag)
        )
        run = DagRun(dag, settings, force, previous_walls(parent))
        failed_stages, not_run = run.run(root, whole=not (stages or settings.stages))
        if STAGE_WALLS:  # a stage ran
            log_walls(parent, started)
        if failed_stages:
            first = run.futures[failed_stages[0]].state
            after = f"; not run: {', '.join(not_run)}" if not_run else ""
            raise StageFailed(
                f"{failure_message(first, f'{failed_stages[0]}: {first.message}')}{after}"
            )
        return score_models(root) if runs_scoring(run.futures) else {}
