"""Issues 20 and 33: a stage's code deps in dvc.yaml are exactly the project modules its command imports — none
missing (`dvc repro` would serve results of code that has changed since), none extra (an edit would rerun stages
that never run it). flows/code_deps.py derives them (`privhar deps --write`); these tests hold dvc.yaml to it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from flows.code_deps import differences, imported_modules, is_code, wanted_deps, write_code_deps

REPO = Path(__file__).resolve().parents[1]


STAGES = {
    name: stage.get("do", stage)
    for name, stage in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items()
}
WANTED = wanted_deps()


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_stages_code_deps_are_exactly_what_it_imports(stage):
    """Missing deps serve results of code that has changed; extra ones rerun stages for code they never run."""
    wanted = WANTED[stage]
    listed = sorted(str(dep) for dep in STAGES[stage].get("deps", []) if is_code(dep))
    assert listed == wanted, (
        f"dvc.yaml stage {stage!r}: missing {sorted(set(wanted) - set(listed))}, not imported "
        f"{sorted(set(listed) - set(wanted))} (privhar deps --write)"
    )


def test_the_check_sees_a_removed_and_an_added_dep(tmp_path):
    """The check itself: synthesize without tasks/core/seeding.py (it decides the split and actors) is caught, and so is
    synthesize listing the LDP code it never imports; --write mends both and leaves the rest of dvc.yaml alone."""
    import shutil

    for folder in ("tasks", "flows"):
        shutil.copytree(
            REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    text = (REPO / "dvc.yaml").read_text()
    assert "      - tasks/core/seeding.py\n" in text
    broken = text.replace("      - tasks/core/seeding.py\n", "      - tasks/ldp/dcaconv.py\n", 1)
    (tmp_path / "dvc.yaml").write_text(broken)
    found = differences(tmp_path)
    assert list(found) == ["synthesize"] and found["synthesize"] == (
        ["tasks/core/seeding.py"],
        ["tasks/ldp/dcaconv.py"],
    )
    assert write_code_deps(tmp_path) == ["synthesize"] and not differences(tmp_path)
    assert (tmp_path / "dvc.yaml").read_text() == text


def test_shared_helpers_never_import_a_stage():
    """tasks/core is what every stage builds on: it imports nothing from a stage (docs/architecture.md); the torchvision
    compatibility shim, imported before torchvision anywhere, is no stage."""
    for path in sorted((REPO / "tasks/core").glob("*.py")):
        name = "tasks.core." + path.stem
        outside = sorted(
            module
            for module in imported_modules(ast.parse(path.read_text()), "tasks.core")
            if not module.startswith("tasks.core") and module != "tasks.torchvision_compat"
        )
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
                found += [
                    path if item is None else path.replace("${item}", str(item)) for item in items
                ]
    return found


def test_every_cached_output_is_ignored_by_git():
    """A DVC-cached output that git tracks too lands in the repository (data/private/dp_sgd_person did, 38 MB) and
    makes `dvc commit` fail in every clone: its folder's .gitignore must name it."""
    import subprocess

    outputs = [path for path in cached_outputs() if "${" not in path]
    assert any(path.startswith("data/private/") for path in outputs)
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(outputs),
        text=True,
        capture_output=True,
        cwd=REPO,
    )
    ignored = set(checked.stdout.split())
    assert not [path for path in outputs if path not in ignored], (
        "cached by DVC but not ignored by git"
    )


def test_every_stage_command_is_named_as_its_dvc_stage():
    """`privhar stage train-private` runs dvc.yaml's train-private: one name for one stage (a command several stages
    share — train for pretrain and the copies, decode for decode-public — is named after the stage it is first)."""
    from flows.code_deps import stage_commands

    assert set(stage_commands()) <= set(STAGES), sorted(set(stage_commands()) - set(STAGES))
