"""Issue 33: the layers hold (docs/architecture.md) — no import circle anywhere in tasks/ or flows/ (lazy imports
inside functions count), no stage importing another stage (what two stages share lives below them), and no layer
importing one above it: tasks/core (with the renderer tasks/synthetic and the torchvision shim) <- the model, data and
people-finding stacks (tasks/video_models, tasks/video_data, tasks/people_finding: none imports another) <-
tasks/privacy (accountants, calibrations, budget, ledger) <- the stages <- flows/ <- privhar/ (the command line).

A stage is a top-level module of tasks (tasks/evaluate.py) or a package (tasks/private/). No function anywhere in the
code is longer than 60 lines (each step reads on its own) and no file longer than 500.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = {"core", "synthetic", "torchvision_compat"}  # the bottom layer
STACKS = ("video_models", "video_data", "people_finding")  # one floor above it, side by side
BELOW_STAGES = SHARED | set(STACKS) | {"privacy"}
DP_PATHS = ("privacy", "private", "federated", "dprp", "ldp")
ROOTS = ("tasks", "flows", "privhar")
LONGEST = 60  # lines from `def` to the last line of the body: signature and docstring included, decorators not
LONGEST_FILE = 500
CODE = ("tasks", "flows", "privhar", "benchmarks")


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
        found.update(name for name in names if name.split(".")[0] in ROOTS and _is_module(name))
    return found


def _is_module(name: str) -> bool:
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file()  # packages' __init__ files hold no code that imports


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for root in ROOTS:
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


def layer_of(module: str) -> int:
    """0 the shared layer, 1 the stacks, 2 tasks/privacy, 3 a stage, 4 flows/, 5 privhar/."""
    parts = module.split(".")
    if parts[0] in ("flows", "privhar"):
        return ROOTS.index(parts[0]) + 3
    if len(parts) < 2 or parts[1] in SHARED:
        return 0
    if parts[1] in STACKS:
        return 1
    return 2 if parts[1] == "privacy" else 3


def test_no_stack_imports_another():
    crossings = sorted(
        f"{source} -> {target}"
        for source, target in import_graph().edges
        if layer_of(source) == layer_of(target) == 1
        and source.split(".")[1] != target.split(".")[1]
    )
    assert not crossings, "; ".join(crossings)


def test_no_layer_imports_one_above_it():
    upward = sorted(
        f"{source} -> {target}"
        for source, target in import_graph().edges
        if layer_of(target) > layer_of(source)
    )
    assert not upward, "; ".join(upward)


@pytest.mark.parametrize(
    ("edges", "rule"),
    [
        ([("tasks.a.x", "tasks.b.y"), ("tasks.b.y", "tasks.a.x")], test_no_import_circle),
        ([("tasks.ldp.video", "tasks.assess.faces")], test_no_stage_imports_another_stage),
        ([("tasks.core.x", "tasks.privacy.budget")], test_no_layer_imports_one_above_it),
        ([("tasks.core.params", "tasks.video_data.subjects")], test_no_layer_imports_one_above_it),
        (
            [("tasks.video_data.datasets", "tasks.privacy.budget")],
            test_no_layer_imports_one_above_it,
        ),
        ([("tasks.video_data.x", "tasks.video_models.clips")], test_no_stack_imports_another),
        ([("flows.stage_tasks", "privhar.cli")], test_no_layer_imports_one_above_it),
    ],
)
def test_each_rule_fails_when_broken(monkeypatch, edges, rule):
    graph = nx.DiGraph(edges)
    monkeypatch.setattr(f"{__name__}.import_graph", lambda: graph)
    with pytest.raises(AssertionError):
        rule()


def long_functions(paths: list[Path]) -> list[str]:
    """``path:line name (lines)`` of every function or method in ``paths`` longer than LONGEST lines. The signature
    counts as one line, however long its arguments' declarations (a stage's carry its options' help:
    tasks/core/stage_options.py)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.body[0].lineno + 2
                if lines > LONGEST:
                    found.append(f"{path}:{node.lineno} {node.name} ({lines})")
    return found


def test_no_function_is_over_60_lines():
    """Every folder of the code, not only the DP paths (issue 83: on 9b9f98f, 19 functions outside them were longer,
    ``train`` 144 lines)."""
    paths = [path for root in CODE for path in sorted((REPO / root).rglob("*.py"))]
    assert {
        folder for folder in DP_PATHS if any(f"tasks/{folder}/" in str(p) for p in paths)
    } == set(DP_PATHS)
    assert not long_functions(paths), "; ".join(long_functions(paths))


def test_no_file_is_over_500_lines():
    """A file a newcomer reads whole (issue 83)."""
    long = {
        str(path.relative_to(REPO)): lines
        for root in CODE
        for path in sorted((REPO / root).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > LONGEST_FILE
    }
    assert not long, long


def test_the_length_rule_fails_on_a_long_function(tmp_path):
    short, long = tmp_path / "short.py", tmp_path / "long.py"
    short.write_text(
        "def fits(\n" + "    a: int = 1,\n" * 10 + "):\n" + "    x = 1\n" * (LONGEST - 1)
    )  # its arguments declared on ten lines
    long.write_text("class A:\n    def too_long(self):\n" + "        x = 1\n" * LONGEST)
    assert long_functions([short, long]) == [f"{long}:2 too_long ({LONGEST + 1})"]
