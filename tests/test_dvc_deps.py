"""Issue 20: every project module a stage's command imports is one of the stage's DVC deps, so `dvc repro` cannot
serve results computed by code that has changed since.

The imports are derived from the code, not listed by hand: each `privhar stage <name>` command in flows/cli.py
imports its stage function; from there every `import` of a `tasks` module (at any depth, lazy imports inside
functions included) is followed. flows/ (the command line and orchestration) and package `__init__` files decide
no result and are not required.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def module_file(name: str) -> Path | None:
    """The file of dotted module ``name`` under the repository (a module, or a package's __init__), or None."""
    path = REPO.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def imported_modules(tree: ast.AST, package: str = "") -> set[str]:
    """Dotted names of the project modules ``tree`` imports anywhere (``from a.b import c`` may import ``a.b.c``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] == "tasks" and module_file(name) is not None}


def closure(start: set[str]) -> set[Path]:
    """Every project file reached by following imports from ``start`` (package __init__ files left out)."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name)
        assert path is not None
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        todo.extend(imported_modules(ast.parse(path.read_text()), package) - seen)
    files = {module_file(name) for name in seen}
    return {path.relative_to(REPO) for path in files if path is not None and path.name != "__init__.py"}


def stage_commands() -> dict[str, set[str]]:
    """``privhar stage <name>`` -> the tasks modules its click command imports."""
    tree = ast.parse((REPO / "flows/cli.py").read_text())
    commands = {}
    for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        for decorator in function.decorator_list:
            if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                    and isinstance(decorator.func.value, ast.Name) and decorator.func.value.id == "stage"
                    and decorator.func.attr == "command"):
                commands[decorator.args[0].value] = imported_modules(function)
    return commands


def dvc_stages() -> dict[str, tuple[str, list[str]]]:
    """dvc.yaml stage -> (its privhar stage command, its deps); a foreach stage by its ``do`` template."""
    stages = {}
    for name, stage in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items():
        body = stage.get("do", stage)
        words = " ".join(body["cmd"].split()).split()
        assert words[:2] == ["privhar", "stage"], f"{name}: {body['cmd']!r} is not a privhar stage command"
        stages[name] = (words[2], [str(dep) for dep in body.get("deps", [])])
    return stages


def uncovered(files: set[Path], deps: list[str]) -> list[str]:
    """The files no dep names, itself or through a folder holding it."""
    roots = [Path(dep) for dep in deps]
    return sorted(str(path) for path in files if not any(path == root or root in path.parents for root in roots))


STAGES = dvc_stages()


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_imported_project_module_is_a_dep(stage):
    command, deps = STAGES[stage]
    commands = stage_commands()
    assert command in commands, f"{stage}: no `privhar stage {command}` in flows/cli.py"
    missing = uncovered(closure(commands[command]), deps)
    assert not missing, f"dvc.yaml stage {stage!r} imports {missing} but does not list them in its deps"


def test_the_check_fails_when_a_dep_is_removed():
    """The check itself: train without tasks/core/seeding.py (it decides the initialisation) is caught."""
    command, deps = STAGES["train"]
    files = closure(stage_commands()[command])
    assert Path("tasks/core/seeding.py") in files and Path("tasks/train.py") in files
    assert uncovered(files, [dep for dep in deps if dep != "tasks/core/seeding.py"]) == ["tasks/core/seeding.py"]


def test_shared_helpers_never_import_a_stage():
    """tasks/core is what every stage builds on: it imports nothing from a stage (DEVELOPERS.md); the torchvision
    compatibility shim, imported before torchvision anywhere, is no stage."""
    for path in sorted((REPO / "tasks/core").glob("*.py")):
        name = "tasks.core." + path.stem
        outside = sorted(module for module in imported_modules(ast.parse(path.read_text()), "tasks.core")
                         if not module.startswith("tasks.core") and module != "tasks.torchvision_compat")
        assert not outside, f"{name} imports {outside}"


def cached_outputs() -> list[str]:
    """Every output DVC caches (``cache: false`` ones are git's), foreach stages expanded over their params list."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    found = []
    for stage in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].values():
        body = stage.get("do", stage)
        items = [None]
        if "foreach" in stage:
            section, key = stage["foreach"].strip("${}").split(".")
            items = params[section][key]
        for out in body.get("outs", []):
            path, options = (out, {}) if isinstance(out, str) else next(iter(out.items()))
            if (options or {}).get("cache", True):
                found += [path if item is None else path.replace("${item}", str(item)) for item in items]
    return found


def test_every_cached_output_is_ignored_by_git():
    """A DVC-cached output that git tracks too lands in the repository (data/private/dp_sgd_person did, 38 MB) and
    makes `dvc commit` fail in every clone: its folder's .gitignore must name it."""
    import subprocess

    outputs = [path for path in cached_outputs() if "${" not in path]
    assert any(path.startswith("data/private/") for path in outputs)
    checked = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], input="\n".join(outputs), text=True,
                             capture_output=True, cwd=REPO)
    ignored = set(checked.stdout.split())
    assert not [path for path in outputs if path not in ignored], "cached by DVC but not ignored by git"
