"""The pipeline's DAG as DVC reads it from ``dvc.yaml``: never declared a second time.

The flow asks DVC for its stages and their dependency edges and runs them in that order,
so a stage added to ``dvc.yaml`` is orchestrated without touching ``flows/``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tasks.core.errors import PrivharError

SCORING_STAGE = "evaluate"  # the stage that scores every model


def runs_scoring(stage_names: Iterable[str]) -> bool:
    """True when a run of these stages scores the models: a run without the scoring stage has no scores to show."""
    return SCORING_STAGE in set(stage_names)


@dataclass(frozen=True)
class DagStage:
    """One stage: its DVC address, command, working folder and the stages it needs first."""

    name: str
    cmd: str
    wdir: Path
    upstream: tuple[str, ...]


def read_dag(
    project: Path, targets: Sequence[str] = (), named_by: str = "orchestrate.stages"
) -> list[DagStage]:
    """The stages of ``project`` in a dependency order; only ``targets`` (given by ``named_by``) and what they need, if
    given. A damaged dvc.yaml or dvc.lock, or a target dvc.yaml lacks, is one line.

    DVC's own graph (networkx; an edge goes from a stage to a stage it depends on): ``nx.descendants`` gives what a
    target needs, a lexicographic topological sort of the reversed graph the order (ties by position in dvc.yaml).
    """
    import networkx as nx
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(project)) as repo:
            stages = [stage for stage in repo.index.stages if stage.cmd]
            graph = nx.DiGraph(repo.index.graph.subgraph(stages))
            names = {stage: stage.addressing for stage in stages}
            described = {
                stage.addressing: DagStage(
                    stage.addressing,
                    _command(stage.cmd),
                    Path(stage.wdir),
                    tuple(sorted(names[dep] for dep in graph.successors(stage))),
                )
                for stage in stages
            }
    except DvcException as error:
        raise PrivharError(f"{project}: DVC cannot read the pipeline: {error}") from None
    graph = nx.relabel_nodes(graph, names)
    position = {name: index for index, name in enumerate(names.values())}
    wanted = set(position)
    if targets:
        # a foreach group by its name (``anonymize``: every ``anonymize@…``), as ``dvc repro`` takes it
        chosen = [
            [name for name in position if name == target or name.split("@")[0] == target]
            for target in targets
        ]
        unknown = [target for target, names in zip(targets, chosen, strict=True) if not names]
        if unknown:
            raise PrivharError(
                f"{named_by}: no stage '{unknown[0]}' in dvc.yaml (stages: {', '.join(position)})"
            )
        named = {name for names in chosen for name in names}
        wanted = named.union(*(nx.descendants(graph, name) for name in named))
    order = nx.lexicographical_topological_sort(graph.reverse(copy=False), key=position.__getitem__)
    return [described[name] for name in order if name in wanted]


def _command(cmd: str | list[str]) -> str:
    return cmd if isinstance(cmd, str) else " && ".join(cmd)
