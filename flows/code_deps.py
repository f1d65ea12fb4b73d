"""dvc.yaml's code deps, generated: each stage depends on exactly the project files its command imports.

A stage's command is ``privhar stage <name>``; its click function in flows/stage_commands.py imports the stage's module, and
from there every ``import`` of a ``tasks`` module — at any depth, lazy imports inside functions included — is
followed (package ``__init__`` files and flows/ decide no result and are left out). Listing by hand went stale both
ways (issue 33: 28 deps of modules no longer imported, so an edit to the LDP code reran every training stage);
``privhar deps`` says which stages differ and ``privhar deps --write`` rewrites their ``tasks/`` deps, keeping every
other dep (data, reports) and the rest of dvc.yaml as it is (ruamel round-trip, as DVC itself edits it).
"""

from __future__ import annotations

import ast
import io
from pathlib import Path
from typing import Any

from tasks.core.errors import PrivharError

REPO = Path(__file__).resolve().parents[1]
CODE_ROOT = "tasks"


def module_file(name: str, root: Path = REPO) -> Path | None:
    """The file of dotted module ``name`` under ``root`` (a module, or a package's __init__), or None."""
    path = root.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def imported_modules(tree: ast.AST, package: str = "", root: Path = REPO) -> set[str]:
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
    return {
        name
        for name in found
        if name.split(".")[0] == CODE_ROOT and module_file(name, root) is not None
    }


def closure(start: set[str], root: Path = REPO) -> set[Path]:
    """Every project file reached by following imports from ``start`` (package __init__ files left out), relative."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name, root)
        if path is None:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        todo.extend(imported_modules(ast.parse(path.read_text()), package, root) - seen)
    files = {module_file(name, root) for name in seen}
    return {
        path.relative_to(root) for path in files if path is not None and path.name != "__init__.py"
    }


def stage_command_functions(root: Path = REPO) -> dict[str, ast.FunctionDef]:
    """``privhar stage <name>`` -> its click function's syntax tree (flows/stage_commands.py, read, not imported)."""
    tree = ast.parse((root / "flows/stage_commands.py").read_text())
    found = {}
    for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        for decorator in function.decorator_list:
            if (
                isinstance(decorator, ast.Call)
                and isinstance(decorator.func, ast.Attribute)
                and isinstance(decorator.func.value, ast.Name)
                and decorator.func.value.id == "stage"
                and decorator.func.attr == "command"
            ):
                found[decorator.args[0].value] = function
    return found


def stage_commands(root: Path = REPO) -> dict[str, set[str]]:
    """``privhar stage <name>`` -> the tasks modules its click function imports."""
    return {
        name: imported_modules(function, root=root)
        for name, function in stage_command_functions(root).items()
    }


def stage_command(cmd: str) -> str:
    """The ``privhar stage`` sub-command of a dvc.yaml ``cmd``."""
    words = " ".join(str(cmd).split()).split()
    if words[:2] != ["privhar", "stage"] or len(words) < 3:
        raise PrivharError(f"{cmd!r} is not a privhar stage command")
    return words[2]


def is_code(dep: Any) -> bool:
    return str(dep) == CODE_ROOT or str(dep).startswith(f"{CODE_ROOT}/")


def dvc_stages(root: Path = REPO) -> Any:
    """dvc.yaml's ``stages`` mapping (ruamel round-trip: comments kept for a rewrite)."""
    from ruamel.yaml import YAML

    return YAML().load((root / "dvc.yaml").read_text())["stages"]


def wanted_deps(root: Path = REPO, stages: Any = None) -> dict[str, list[str]]:
    """dvc.yaml stage -> the code files its command imports, sorted (``stages``: dvc.yaml's, already read)."""
    commands = stage_commands(root)
    files: dict[
        str, list[str]
    ] = {}  # per command: several stages run one (train, decode, synthesize)
    wanted = {}
    for name, stage in (dvc_stages(root) if stages is None else stages).items():
        command = stage_command(stage.get("do", stage)["cmd"])
        if command not in commands:
            raise PrivharError(
                f"dvc.yaml stage {name}: no `privhar stage {command}` in flows/stage_commands.py"
            )
        if command not in files:
            files[command] = sorted(str(path) for path in closure(commands[command], root))
        wanted[name] = files[command]
    return wanted


def differences(root: Path = REPO) -> dict[str, tuple[list[str], list[str]]]:
    """dvc.yaml stage -> (code deps missing, code deps extra), for the stages whose code deps differ."""
    stages = dvc_stages(root)
    wanted = wanted_deps(root, stages)
    found = {}
    for name, stage in stages.items():
        listed = {str(dep) for dep in stage.get("do", stage).get("deps", []) if is_code(dep)}
        missing, extra = sorted(set(wanted[name]) - listed), sorted(listed - set(wanted[name]))
        if missing or extra:
            found[name] = (missing, extra)
    return found


def write_code_deps(root: Path = REPO) -> list[str]:
    """Rewrite each stage's code deps in ``root``/dvc.yaml to its import closure; return the stages changed."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedSeq

    yaml = YAML()
    yaml.width = 4096  # keep each line as it is
    yaml.indent(mapping=2, sequence=4, offset=2)
    path = root / "dvc.yaml"
    document = yaml.load(path.read_text())
    wanted, changed = wanted_deps(root, document["stages"]), []
    for name, stage in document["stages"].items():
        body = stage.get("do", stage)
        deps = body.get("deps", CommentedSeq())
        if sorted(str(dep) for dep in deps if is_code(dep)) == wanted[name]:
            continue
        kept = [index for index, dep in enumerate(deps) if not is_code(dep)]
        fresh = CommentedSeq([deps[index] for index in kept] + wanted[name])
        for position, index in enumerate(kept):  # a data dep keeps its end-of-line comment
            if index in deps.ca.items:
                fresh.ca.items[position] = deps.ca.items[index]
        body["deps"] = fresh
        changed.append(name)
    if changed:
        buffer = io.StringIO()
        yaml.dump(document, buffer)
        path.write_text(buffer.getvalue())
    return changed
