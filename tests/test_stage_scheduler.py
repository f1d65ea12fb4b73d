"""The flow's scheduler (flows/stage_scheduler.py): a stage starts once what it needs has completed, independent ones
overlap, a failure stops only what depends on it, and the index gate holds the stages after it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from flows.dag import DagStage
from flows.stage_scheduler import run_when_ready, stage_outcomes


class StageFuture:
    """What the scheduler reads of a Prefect future, over a thread pool's future."""

    def __init__(self, future: Future) -> None:
        self.future = future

    @property
    def _final_state(self):
        return self.state if self.future.done() else None

    @property
    def state(self):
        ok = self.future.done() and self.future.exception() is None
        return SimpleNamespace(
            is_completed=lambda: ok, is_failed=lambda: not ok, is_crashed=lambda: False
        )

    def add_done_callback(self, callback) -> None:
        self.future.add_done_callback(lambda _: callback(self))

    def wait(self) -> None:
        self.future.exception()


def dag_of(**upstream: str) -> list[DagStage]:
    return [DagStage(name, "", Path("."), tuple(needs.split())) for name, needs in upstream.items()]


class Recorder:
    """Runs each stage for a moment on ``workers`` threads, noting when it started and ended."""

    def __init__(self, workers: int, failing: tuple[str, ...] = ()) -> None:
        self.pool = ThreadPoolExecutor(workers)
        self.failing = failing
        self.spans: dict[str, tuple[float, float]] = {}
        self.lock = threading.Lock()

    def submit(self, stage: DagStage) -> StageFuture:
        def work() -> None:
            started = time.monotonic()
            time.sleep(
                0.3
            )  # long beside a thread's start on a loaded machine: a and b must overlap
            with self.lock:
                self.spans[stage.name] = (started, time.monotonic())
            if stage.name in self.failing:
                raise RuntimeError(stage.name)

        return StageFuture(self.pool.submit(work))

    def overlap(self, first: str, second: str) -> bool:
        (a0, a1), (b0, b1) = self.spans[first], self.spans[second]
        return a0 < b1 and b0 < a1


def test_independent_stages_overlap_and_each_waits_for_what_it_needs():
    dag = dag_of(a="", b="", c="a", d="a b", e="c d")
    recorder, futures = Recorder(2), {}
    run_when_ready(dag, recorder.submit, futures)
    assert set(futures) == set("abcde") and recorder.overlap("a", "b")
    for stage in dag:
        for needed in stage.upstream:
            assert recorder.spans[needed][1] <= recorder.spans[stage.name][0]
    assert stage_outcomes(dag, futures) == ([], [])


def test_a_failure_stops_what_needs_it_and_nothing_else():
    dag = dag_of(a="", b="a", c="b", d="a", e="")
    recorder, futures = Recorder(2, failing=("b",)), {}
    run_when_ready(dag, recorder.submit, futures)
    assert set(futures) == {"a", "b", "d", "e"}  # c never started
    assert stage_outcomes(dag, futures) == (["b"], ["c"])


@pytest.mark.parametrize("failing", [(), ("scan",)])
def test_the_gate_holds_the_stages_after_it_until_it_ends_or_cannot_run(failing):
    dag = dag_of(scan="", index="scan", other="", after="index")
    recorder, futures, checked = Recorder(2, failing), {}, []
    run_when_ready(
        dag, recorder.submit, futures, lambda stage, _: checked.append(stage.name), gate="index"
    )
    if failing:  # the index cannot run: the independent stage after it still does
        assert set(futures) == {"scan", "other"} and "index" not in checked
    else:
        assert recorder.spans["index"][1] <= recorder.spans["other"][0]
        assert checked[:2] == ["scan", "index"] and sorted(checked[2:]) == ["after", "other"]
