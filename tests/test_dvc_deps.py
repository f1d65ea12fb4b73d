"""Issues 20, 31 and 33: a stage reruns exactly when a project module its command imports has changed — not for a
module it never runs (an edit would rerun stages for nothing), never missing one (`dvc repro` would serve results of
code that has changed since). flows/code_deps.py derives each command's import closure; the `code` stage writes its
fingerprint, data/code/<command>.sha256, and each stage depends on its command's file alone (`privhar deps --write`);
these tests hold dvc.yaml and the fingerprints to it.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from flows.code_deps import (
    closure,
    differences,
    fingerprints,
    imported_modules,
    is_code,
    stage_commands,
    wanted_deps,
    write_code_deps,
    write_fingerprints,
)

REPO = Path(__file__).resolve().parents[1]


STAGES = {
    name: stage.get("do", stage)
    for name, stage in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items()
}
WANTED = wanted_deps()


def copy_code(root: Path) -> None:
    for folder in ("tasks", "flows"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_stages_code_dep_is_its_commands_fingerprint(stage):
    """A source file listed by hand goes stale; the fingerprint of the command the stage runs does not."""
    listed = sorted(str(dep) for dep in STAGES[stage].get("deps", []) if is_code(dep))
    assert listed == WANTED[stage], (
        f"dvc.yaml stage {stage!r}: code deps {listed}, expected {WANTED[stage]} (privhar deps --write)"
    )
    command = STAGES[stage]["cmd"].split()[2]
    assert listed == ([] if command == "code" else [f"data/code/{command}.sha256"])


def test_the_check_sees_a_source_file_listed_by_hand(tmp_path):
    """synthesize listing the LDP code it never imports instead of its fingerprint is caught; --write mends it and
    leaves the rest of dvc.yaml alone."""
    copy_code(tmp_path)
    text = (REPO / "dvc.yaml").read_text()
    assert "      - data/code/synthesize.sha256\n" in text
    broken = text.replace(
        "      - data/code/synthesize.sha256\n", "      - tasks/ldp/dcaconv.py\n", 1
    )
    (tmp_path / "dvc.yaml").write_text(broken)
    found = differences(tmp_path)
    assert list(found) == ["synthesize"] and found["synthesize"] == (
        ["data/code/synthesize.sha256"],
        ["tasks/ldp/dcaconv.py"],
    )
    assert write_code_deps(tmp_path) == ["synthesize"] and not differences(tmp_path)
    assert (tmp_path / "dvc.yaml").read_text() == text


def test_a_fingerprint_is_sha256sum_of_the_commands_import_closure(tmp_path):
    """One file per stage command, in `sha256sum` format: the files it names are its import closure, and
    `sha256sum --check` (coreutils, not privhar) agrees with every digest."""
    written = write_fingerprints(tmp_path / "code", REPO)
    files = sorted(path.stem for path in (tmp_path / "code").glob("*.sha256"))
    assert written == len(files) and files == sorted(set(stage_commands()) - {"code"})
    synthesize = (tmp_path / "code/synthesize.sha256").read_text()
    named = [line.split("  ", 1)[1] for line in synthesize.splitlines()]
    assert named == sorted(str(path) for path in closure(stage_commands()["synthesize"]))
    assert "tasks/core/item_randomness.py" in named and "tasks/ldp/dcaconv.py" not in named
    for path in (tmp_path / "code").glob("*.sha256"):
        checked = subprocess.run(
            ["sha256sum", "--check", "--strict", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_an_edit_changes_the_fingerprints_of_the_commands_that_run_it_only(tmp_path):
    """An edit to the LDP code changes ldp's fingerprint (its stage reruns) and no training stage's."""
    copy_code(tmp_path)
    before = fingerprints(tmp_path)
    with (tmp_path / "tasks/ldp/dcaconv.py").open("a") as handle:
        handle.write("\n# an edit\n")
    after = fingerprints(tmp_path)
    changed = sorted(command for command in before if before[command] != after[command])
    assert "ldp" in changed and not {"train", "synthesize", "evaluate"} & set(changed)
    assert all("tasks/ldp/dcaconv.py" in before[command] for command in changed)


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
