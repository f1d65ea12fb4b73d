"""Each stage's code, as DVC sees it: one fingerprint file per ``privhar stage`` command, the SHA-256 of every project
file that command imports.

A stage's command is ``privhar stage <name>``; its entry in flows/stage_commands.py (``COMMANDS``) imports the stage's
module and names the reader of its params (flows/stage_readers.py), and from there every ``import`` of a ``tasks`` module — at any depth, lazy imports inside functions included — is
followed (package ``__init__`` files and flows/ decide no result and are left out). Listing those files as deps in dvc.yaml
by hand went stale both ways (issue 33: 28 deps of modules no longer imported, so an edit to the LDP code reran every
training stage); listed there by a generator, they were 1 200 of dvc.lock's 1 400 paths, and DVC re-reads and rewrites
dvc.lock (ruamel round-trip) after every stage it runs: 1.3 s of each stage's fixed cost (issue 31). So the ``code``
stage (``always_changed``, like ``scan``) writes ``data/code/<command>.sha256`` (``sha256sum`` format) from the import
closure as it is at run time, and each stage depends on its command's file alone: it reruns exactly when a file it
runs has changed, and an import added or removed needs no edit to dvc.yaml. ``privhar deps`` checks that every stage
names its command's file and no code file by hand; ``privhar deps --write`` mends dvc.yaml (ruamel round-trip, as DVC
itself edits it).
"""

from __future__ import annotations

import ast
import hashlib
import io
from pathlib import Path
from typing import Any

from tasks.core.errors import PrivharError

REPO = Path(__file__).resolve().parents[1]
CODE_ROOT = "tasks"
CODE_STAGE = (
    "code"  # the stage that writes the fingerprints: always run, it depends on no fingerprint
)
FINGERPRINTS = "data/code"  # its output folder, relative to the project


def fingerprint_dep(command: str) -> str:
    """The dvc.yaml dep of every stage that runs ``privhar stage <command>``."""
    return f"{FINGERPRINTS}/{command}.sha256"


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


def closure(
    start: set[str], root: Path = REPO, parsed: dict[str, set[str]] | None = None
) -> set[Path]:
    """Every project file reached by following imports from ``start`` (package __init__ files left out), relative;
    ``parsed`` keeps each module's imports for the next call (one parse per file for all the commands)."""
    parsed = {} if parsed is None else parsed
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
        if name not in parsed:
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            parsed[name] = imported_modules(ast.parse(path.read_text()), package, root)
        todo.extend(parsed[name] - seen)
    files = {module_file(name, root) for name in seen}
    return {
        path.relative_to(root) for path in files if path is not None and path.name != "__init__.py"
    }


def _stage_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """``privhar stage <name>`` -> its click command function, for the commands flows/stage_commands.py declares with
    ``@stage.command`` (``code``); the stages' commands are :data:`COMMANDS` entries (:func:`_command_table`)."""
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


def _command_table(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """:data:`flows.stage_commands.COMMANDS` as written: name -> (the function that imports its stage, its reader)."""
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "COMMANDS":
            assert isinstance(node.value, ast.Dict)
            table = {}
            for key, entry in zip(node.value.keys, node.value.values, strict=True):
                reader = next((k.value.id for k in entry.keywords if k.arg == "reader"), "sections")
                table[key.value] = (entry.args[0].id, reader)
            return table
    raise PrivharError("flows/stage_commands.py: no COMMANDS table")


def _called(
    function: ast.FunctionDef, helpers: dict[str, ast.FunctionDef]
) -> list[ast.FunctionDef]:
    """``function`` and the module's functions it calls by name (a reader's ``section``, ``plan_for``), transitively."""
    reached = {function.name: function}
    todo = [function]
    while todo:
        for node in ast.walk(todo.pop()):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                helper = helpers.get(node.func.id)
                if helper is not None and helper.name not in reached:
                    reached[helper.name] = helper
                    todo.append(helper)
    return list(reached.values())


def stage_commands(root: Path = REPO) -> dict[str, set[str]]:
    """``privhar stage <name>`` -> the tasks modules it runs: what its entry's function imports (its stage's module) and
    what its reader imports, itself or through the functions it calls (flows/stage_commands.py and
    flows/stage_readers.py, read, not imported)."""
    tree = ast.parse((root / "flows/stage_commands.py").read_text())
    readers = ast.parse((root / "flows/stage_readers.py").read_text())
    helpers = {
        node.name: node for node in [*tree.body, *readers.body] if isinstance(node, ast.FunctionDef)
    }

    def imports(function: ast.FunctionDef) -> set[str]:
        return set().union(
            *(imported_modules(called, root=root) for called in _called(function, helpers))
        )

    found = {name: imports(function) for name, function in _stage_functions(tree).items()}
    for name, (stage, reader) in _command_table(tree).items():
        found[name] = imports(helpers[stage]) | imports(helpers[reader])
    return found


def stage_command(cmd: str) -> str:
    """The ``privhar stage`` sub-command of a dvc.yaml ``cmd``."""
    words = " ".join(str(cmd).split()).split()
    if words[:2] != ["privhar", "stage"] or len(words) < 3:
        raise PrivharError(f"{cmd!r} is not a privhar stage command")
    return words[2]


def is_code(dep: Any) -> bool:
    """A dep that stands for code: a project source file (listed by hand) or a command's fingerprint."""
    return any(
        str(dep) == root or str(dep).startswith(f"{root}/") for root in (CODE_ROOT, FINGERPRINTS)
    )


def fingerprints(root: Path = REPO) -> dict[str, str]:
    """``privhar stage <command>`` -> its fingerprint: ``<sha256>  <file>`` per file of its import closure, sorted."""
    parsed: dict[str, set[str]] = {}
    digests: dict[str, str] = {}

    def line(path: str) -> str:
        if path not in digests:
            digests[path] = hashlib.sha256((root / path).read_bytes()).hexdigest()
        return f"{digests[path]}  {path}\n"

    return {
        command: "".join(
            line(path) for path in sorted(str(path) for path in closure(modules, root, parsed))
        )
        for command, modules in stage_commands(root).items()
        if command != CODE_STAGE
    }


def write_fingerprints(out: Path, root: Path = REPO) -> int:
    """The ``code`` stage: every command's fingerprint into ``out`` (replaced whole); return how many. ``root``: where
    the code is, by default the files this privhar runs (paths relative to it)."""
    from tasks.core.storage import atomic_directory

    found = fingerprints(root)
    with atomic_directory(out) as staging:
        for command, text in found.items():
            (staging / f"{command}.sha256").write_text(text)
    return len(found)


def dvc_stages(root: Path = REPO) -> Any:
    """dvc.yaml's ``stages`` mapping (ruamel round-trip: comments kept for a rewrite)."""
    from ruamel.yaml import YAML

    return YAML().load((root / "dvc.yaml").read_text())["stages"]


def wanted_deps(root: Path = REPO, stages: Any = None) -> dict[str, list[str]]:
    """dvc.yaml stage -> its code deps: its command's fingerprint (none for the ``code`` stage itself); ``stages``:
    dvc.yaml's, already read."""
    commands = stage_commands(root)
    wanted = {}
    for name, stage in (dvc_stages(root) if stages is None else stages).items():
        command = stage_command(stage.get("do", stage)["cmd"])
        if command not in commands:
            raise PrivharError(
                f"dvc.yaml stage {name}: no `privhar stage {command}` in flows/stage_commands.py"
            )
        wanted[name] = [] if command == CODE_STAGE else [fingerprint_dep(command)]
    return wanted


def differences(root: Path = REPO) -> dict[str, tuple[list[str], list[str]]]:
    """dvc.yaml stage -> (code deps missing, code deps extra: a source file listed by hand, another command's
    fingerprint), for the stages whose code deps differ."""
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
    """Rewrite each stage's code deps in ``root``/dvc.yaml to its command's fingerprint; return the stages changed."""
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
        if fresh:
            body["deps"] = fresh
        else:
            body.pop("deps", None)
        changed.append(name)
    if changed:
        buffer = io.StringIO()
        yaml.dump(document, buffer)
        path.write_text(buffer.getvalue())
    return changed
