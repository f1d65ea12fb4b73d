"""Issue 33: the layers hold — no import circle anywhere in tasks/ or flows/ (lazy imports inside functions count),
and no stage imports another stage: what two stages share lives below them (tasks/core, the renderer tasks/synthetic).

A stage is a top-level module of tasks (tasks/train.py) or a package (tasks/private/); tasks/core, tasks/synthetic
and the torchvision shim are below every stage; flows/ is above them all and may import any of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[1]
BELOW_STAGES = {"core", "synthetic", "torchvision_compat"}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def project_imports(path: Path) -> set[str]:
    """The project modules ``path`` imports, at any depth (``from a import b`` counts ``a.b`` where it is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        found.update(
            name for name in names if name.split(".")[0] in ("tasks", "flows") and _is_module(name)
        )
    return found


def _is_module(name: str) -> bool:
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file()  # packages' __init__ files hold no code that imports


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for root in ("tasks", "flows"):
        for path in sorted((REPO / root).rglob("*.py")):
            graph.add_node(module_name(path))
            graph.add_edges_from(
                (module_name(path), target)
                for target in project_imports(path)
                if target != module_name(path)
            )
    return graph


def stage_of(module: str) -> str | None:
    """The stage a tasks module belongs to (``tasks.private.methods`` -> ``private``), None below the stages."""
    parts = module.split(".")
    return None if parts[0] != "tasks" or len(parts) < 2 or parts[1] in BELOW_STAGES else parts[1]


def test_no_import_circle():
    cycles = sorted(nx.simple_cycles(import_graph()), key=len)
    assert not cycles, "import circles: " + "; ".join(
        " -> ".join([*cycle, cycle[0]]) for cycle in cycles[:5]
    )


def test_no_stage_imports_another_stage():
    crossings = sorted(
        f"{source} -> {target}"
        for source, target in import_graph().edges
        if stage_of(source) and stage_of(target) and stage_of(source) != stage_of(target)
    )
    assert not crossings, (
        "stage -> stage imports (move what they share below the stages): " + "; ".join(crossings)
    )


def test_nothing_below_the_stages_imports_upward():
    upward = sorted(
        f"{source} -> {target}"
        for source, target in import_graph().edges
        if source.startswith("tasks.")
        and stage_of(source) is None
        and (stage_of(target) or target.startswith("flows."))
    )
    assert not upward, "; ".join(upward)


@pytest.mark.parametrize(
    ("edges", "rule"),
    [
        ([("tasks.a.x", "tasks.b.y"), ("tasks.b.y", "tasks.a.x")], test_no_import_circle),
        ([("tasks.ldp.video", "tasks.assess.faces")], test_no_stage_imports_another_stage),
        ([("tasks.core.x", "tasks.train")], test_nothing_below_the_stages_imports_upward),
    ],
)
def test_each_rule_fails_when_broken(monkeypatch, edges, rule):
    graph = nx.DiGraph(edges)
    monkeypatch.setattr(f"{__name__}.import_graph", lambda: graph)
    with pytest.raises(AssertionError):
        rule()
