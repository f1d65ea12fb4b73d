"""The pipeline's DAG as DVC reads it from ``dvc.yaml``: never declared a second time.

The flow asks DVC for its stages and their dependency edges and runs them in that order,
so a stage added to ``dvc.yaml`` is orchestrated without touching ``flows/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tasks.core.errors import PrivharError


@dataclass(frozen=True)
class DagStage:
    """One stage: its DVC address, command, working folder and the stages it needs first."""

    name: str
    cmd: str
    wdir: Path
    upstream: tuple[str, ...]


def read_dag(project: Path, targets: Sequence[str] = ()) -> list[DagStage]:
    """The stages of ``project`` in a dependency order; only ``targets`` and what they need, if given."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(project)) as repo:
            stages = [stage for stage in repo.index.stages if stage.cmd]
            graph = repo.index.graph
            needs = {stage.addressing: sorted({dep.addressing for dep in graph.successors(stage) if dep.cmd})
                     for stage in stages}
            described = {stage.addressing: DagStage(stage.addressing, _command(stage.cmd), Path(stage.wdir),
                                                     tuple(needs[stage.addressing])) for stage in stages}
    except DvcException as error:
        raise PrivharError(f"{project}/dvc.yaml: DVC cannot read the pipeline: {error}") from None
    order = [stage.addressing for stage in stages]
    wanted = _with_ancestors(targets, described, order) if targets else set(order)
    return [described[name] for name in _dependency_order(order, described) if name in wanted]


def _command(cmd: str | list[str]) -> str:
    return cmd if isinstance(cmd, str) else " && ".join(cmd)


def _with_ancestors(targets: Sequence[str], stages: dict[str, DagStage], order: list[str]) -> set[str]:
    wanted: set[str] = set()
    pending = list(targets)
    while pending:
        name = pending.pop()
        if name not in stages:
            raise PrivharError(f"orchestrate.stages: no stage '{name}' in dvc.yaml (stages: {', '.join(order)})")
        if name not in wanted:
            wanted.add(name)
            pending.extend(stages[name].upstream)
    return wanted


def _dependency_order(order: list[str], stages: dict[str, DagStage]) -> list[str]:
    """Kahn's algorithm, ties broken by position in dvc.yaml so the order is stable."""
    done: list[str] = []
    remaining = list(order)
    while remaining:
        ready = next(name for name in remaining if all(up in done for up in stages[name].upstream))
        done.append(ready)
        remaining.remove(ready)
    return done
