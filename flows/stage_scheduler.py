"""Start each stage task once the stages it needs have completed, so ``orchestrate.stage_workers`` of them run at once.

A task submitted with ``wait_for`` holds one of the task runner's threads while it waits: with two workers, a stage
waiting on the one that runs would leave the second core idle. Here a stage is submitted only when it can start, the
first ready one in the DAG's order first; a stage after a failed one is never submitted (it did not run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prefect.futures import PrefectFuture, as_completed

from flows.dag import DagStage


def completed(future: PrefectFuture) -> bool:
    """The task ended in a completed state (ran, or was skipped as up to date)."""
    return future.state.is_completed()


def run_when_ready(
    dag: Sequence[DagStage],
    submit: Callable[[DagStage], PrefectFuture],
    futures: dict[str, PrefectFuture],
    on_done: Callable[[DagStage, PrefectFuture], None] = lambda stage, future: None,
    gate: str | None = None,
) -> None:
    """Submit every stage of ``dag`` once its upstream stages completed, each future into ``futures`` (``submit``
    may read it for the upstream futures).

    ``on_done`` runs in this thread as each stage completes (an error it raises ends the run); the stages after
    ``gate`` in the DAG's order start only once ``gate`` has ended (and ``on_done`` has returned for it) or cannot run.
    """
    names = {stage.name for stage in dag}
    order = [stage.name for stage in dag]
    held_from = order.index(gate) + 1 if gate in names else len(order)
    running: dict[PrefectFuture, DagStage] = {}
    finished: set[str] = set()
    blocked: set[str] = set()  # failed, or after one that failed: never submitted
    waiting = list(dag)
    while waiting or running:
        for stage in list(waiting):
            if order.index(stage.name) >= held_from:
                break
            needed = [name for name in stage.upstream if name in names]
            if any(name in blocked for name in needed):
                blocked.add(stage.name)
                waiting.remove(stage)
                if stage.name == gate:  # it will not run: nothing to wait for
                    held_from = len(order)
            elif all(name in finished for name in needed):
                futures[stage.name] = submit(stage)
                running[futures[stage.name]] = stage
                waiting.remove(stage)
        if not running:
            break
        future = next(as_completed(list(running)))
        stage = running.pop(future)
        future.wait()
        if completed(future):
            finished.add(stage.name)
            on_done(stage, future)
        else:
            blocked.add(stage.name)  # and what needs it; the stages that do not still run
        if stage.name == gate:
            held_from = len(order)


def stage_outcomes(dag: Sequence[DagStage], futures: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Once every submitted stage has ended: the failed stages, and the stages that never ran (not submitted, or not
    completed)."""
    failed, not_run = [], []
    for stage in dag:
        future = futures.get(stage.name)
        if future is None:
            not_run.append(stage.name)
            continue
        future.wait()
        state = future.state
        if state.is_failed() or state.is_crashed():
            failed.append(stage.name)
        elif not state.is_completed():
            not_run.append(stage.name)
    return failed, not_run
