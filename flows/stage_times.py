"""Where a run's time goes: each stage's wall time as ``dvc repro`` ran it, printed and logged to the parent run.

The wall time of a stage is from DVC's ``Running stage 'name':`` line to the next stage's (or the end):
the command's own work, its Python start (torch, MLflow imports), and DVC's hashing and caching of its
outputs. The stages' MLflow runs measure the work alone (``stage_seconds``); the difference is the fixed
cost per stage that issue 21 asks to find.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from tasks.core.tables import markdown_of

RUNNING = re.compile(r"^Running stage '([^']+)':")


@dataclass
class StageClock:
    """Marks the time each stage starts in DVC's output; ``walls`` gives each stage's seconds."""

    clock: Callable[[], float] = time.monotonic
    marks: list[tuple[str, float]] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    def watch(self, lines: Iterable[str]) -> Iterator[str]:
        """Pass ``lines`` through, marking each stage start."""
        self.started = self.clock()
        for line in lines:
            found = RUNNING.match(line)
            if found:
                self.marks.append((found.group(1), self.clock()))
            yield line
        self.ended = self.clock()

    def walls(self) -> dict[str, float]:
        """``{stage: seconds}`` in the order DVC ran them.

        >>> ticks = iter([0.0, 1.0, 4.0, 10.0])
        >>> clock = StageClock(clock=lambda: next(ticks))
        >>> list(clock.watch(["Running stage 'scan':", "Running stage 'train':", "done"]))[-1]
        'done'
        >>> clock.walls()
        {'scan': 3.0, 'train': 6.0}
        """
        ends = [moment for _, moment in self.marks[1:]] + [self.ended]
        return {name: end - start for (name, start), end in zip(self.marks, ends)}


def summary(walls: dict[str, float], total: float, work: float, works: dict[str, float] | None = None) -> str:
    """A Markdown table of the stages that ran, slowest first: wall seconds, the stage's own work (its MLflow run's
    ``stage_seconds``, where a run of that name exists) and the fixed cost between them; then the run's totals.

    >>> table = summary({"scan": 3.0, "train": 10.0}, 14.0, 7.5, {"train": 7.5}).splitlines()
    >>> [" ".join(line.replace("|", " ").split()) for line in table[2:5]]
    ['train 10.0 7.5 2.5', 'scan 3.0 — —', 'all stages (wall) 13.0 7.5 5.5']
    """
    works = works or {}

    def row(name: str, seconds: float) -> list[str]:
        mine = works.get(name)
        return [name, f"{seconds:.1f}", "—" if mine is None else f"{mine:.1f}", "—" if mine is None else f"{seconds - mine:.1f}"]

    lines = [row(name, seconds) for name, seconds in sorted(walls.items(), key=lambda item: -item[1])]
    spent = sum(walls.values())
    lines += [["all stages (wall)", f"{spent:.1f}", f"{work:.1f}", f"{spent - work:.1f}"],
              ["the run (dvc repro)", f"{total:.1f}", "", ""]]
    return markdown_of(["stage", "wall (s)", "work (s)", "fixed cost (s)"], lines)


def log_stage_times(parent_run_id: str, walls: dict[str, float], total: float) -> str:
    """Log each stage's wall time (``wall_seconds.<stage>``) and the table to the parent run; return the table."""
    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient()
    experiment = client.get_run(parent_run_id).info.experiment_id
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent_run_id}'", max_results=5000)
    works = {run.info.run_name: run.data.metrics["stage_seconds"] for run in children if "stage_seconds" in run.data.metrics}
    work = sum(works.values())
    mlflow.log_metrics({f"wall_seconds.{name.replace('@', '.')}": seconds for name, seconds in walls.items()})
    mlflow.log_metrics({"pipeline_wall_seconds": total, "stages_work_seconds": work})
    table = summary(walls, total, work, works)
    mlflow.log_text(table + "\n", "stage_times.md")
    return table
