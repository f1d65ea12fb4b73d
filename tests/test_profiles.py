"""Params profiles: an overlay edits params.yaml like `dvc exp run -S`, keeping its comments."""

import shutil

import pytest
import yaml

from flows.profiles import apply_profile, check_profile
from tasks.core.errors import PrivharError
from tests.conftest import REPO


@pytest.fixture
def project(tmp_path):
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    return tmp_path


def test_default_profile_leaves_params_alone(project):
    before = (project / "params.yaml").read_text()
    assert apply_profile(project, "default") is False
    assert (project / "params.yaml").read_text() == before


def test_smoke_profile_overlays_only_its_keys_and_keeps_comments(project):
    before = yaml.safe_load((project / "params.yaml").read_text())
    assert apply_profile(project, "smoke") is True
    text = (project / "params.yaml").read_text()
    after = yaml.safe_load(text)
    smoke = yaml.safe_load((REPO / "profiles" / "smoke.yaml").read_text())
    assert after["train"]["epochs"] == smoke["train"]["epochs"]
    assert after["train"]["learning_rate"] == before["train"]["learning_rate"]
    assert after["synthesize"]["actions"] == before["synthesize"]["actions"]
    assert "# 0: one worker per CPU core" in text
    assert apply_profile(project, "smoke") is False  # already applied: nothing to change


def test_unknown_profile_is_one_line(project):
    with pytest.raises(
        PrivharError,
        match=r"profile 'nope': .*profiles/nope.yaml not found \(profiles: default, hmdb51, smoke, ucf101\)",
    ):
        apply_profile(project, "nope")


@pytest.mark.parametrize("name", ["ucf101", "hmdb51", "smoke"])
def test_every_profile_gives_params_each_section_accepts(project, name):
    """A profile is checked as its run would check it: every section of the overlaid params.yaml (issue 34)."""
    from tasks.core.params import ModelParams
    from tasks.core.params_files import load_decode, load_section, load_train

    apply_profile(
        project, name
    )  # every section of the overlaid params checked (its files are placeholders)
    params = project / "params.yaml"
    model = load_section(params, "model", ModelParams)
    if name != "smoke":  # a backbone's own clip reaches decode and train
        decode, train = load_decode(params), load_train(params)
        assert model.backbone != "privhar" and model.weights
        assert train.input_size == decode.frame_size and decode.frame_size[0] in (112, 160, 224)


def test_a_profile_the_params_would_refuse_names_itself_and_leaves_params_yaml_as_it_was(project):
    """Issue 61: `privhar flow --profile typo` wrote the typo into params.yaml before checking it (every later run
    then failed on params.yaml), and re-quoted an unrelated line. Now it is checked first, in memory."""
    (project / "profiles" / "typo.yaml").write_text("model:\n  backbon: x3d_s\n")
    before = (project / "params.yaml").read_bytes()
    with pytest.raises(
        PrivharError, match=r"profiles/typo.yaml: model.backbon is not a known key of 'model'"
    ):
        apply_profile(project, "typo")
    assert (project / "params.yaml").read_bytes() == before
    (project / "profiles" / "bad.yaml").write_text("train:\n  epochs: 0\n")
    with pytest.raises(PrivharError, match=r"profiles/bad.yaml: train.epochs = 0 is invalid"):
        check_profile(project, "bad")
    assert (project / "params.yaml").read_bytes() == before


def test_an_applied_profile_changes_only_its_own_lines(project):
    """ruamel keeps params.yaml's quotes as well as its comments: `git diff params.yaml` shows the profile's keys."""
    import difflib

    before = (project / "params.yaml").read_text().splitlines()
    assert apply_profile(project, "smoke") is True
    after = (project / "params.yaml").read_text().splitlines()
    changed = [
        line[1:].split(":")[0].strip()
        for line in difflib.unified_diff(before, after, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    smoke = yaml.safe_load((project / "profiles" / "smoke.yaml").read_text())
    keys = {key for values in smoke.values() if isinstance(values, dict) for key in values}
    assert changed and set(changed) <= keys | set(smoke), sorted(set(changed) - keys - set(smoke))


def test_privhar_flow_refuses_a_missing_profile_at_once_in_one_line(project, monkeypatch):
    """Issue 61: `privhar flow --profile nonexistent` took 78 s (a temporary Prefect server, a failed flow run, an
    MLflow parent run) and printed its error three times. It is now checked before anything starts."""
    from click.testing import CliRunner

    from privhar.cli import main

    shutil.copy(REPO / "dvc.yaml", project / "dvc.yaml")
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["flow", "--profile", "nonexistent"])
    assert result.exit_code != 0 and isinstance(result.exception, PrivharError)
    assert str(result.exception).startswith("profile 'nonexistent': ")
    assert not (project / ".prefect").exists() and not (project / "mlflow.db").exists()


def test_privhar_flow_refuses_a_missing_dataset_folder_or_checkpoint_before_any_stage(
    project, monkeypatch
):
    """Issue 61: `privhar flow --profile ucf101` with its placeholder paths ran three stages before pretrain found
    the checkpoint missing. The folders and files params name are checked first, with the profile overlaid."""
    from click.testing import CliRunner

    from privhar.cli import main

    shutil.copy(REPO / "dvc.yaml", project / "dvc.yaml")
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["flow", "--profile", "ucf101"])
    assert isinstance(result.exception, PrivharError)
    assert str(result.exception).startswith("data.root = ") and "is not a folder" in str(
        result.exception
    )
    (project / "videos").mkdir()
    (project / "profiles" / "mine.yaml").write_text(
        "data:\n  source: ucf101\n  root: videos\nmodel:\n  backbone: x3d_xs\n  weights: videos\n"
    )
    result = CliRunner().invoke(main, ["flow", "--profile", "mine"])
    assert str(result.exception) == (
        "model.weights = 'videos': a folder (expected a checkpoint file, or zoo)"
    )
    assert not (project / ".prefect").exists() and not (project / "mlflow.db").exists()


def test_a_run_of_another_profile_starts_from_params_before_the_last_overlay(project):
    """Issue 82: after `privhar flow --profile smoke`, the scheduled run of profile default would have run the smoke
    settings still written into params.yaml. Each profile now overlays the params.yaml from before any profile."""
    before = (project / "params.yaml").read_text()
    assert apply_profile(project, "smoke") is True
    assert check_profile(project, "default") == yaml.safe_load(before)
    assert apply_profile(project, "default") is True
    assert (project / "params.yaml").read_text() == before
    assert apply_profile(project, "smoke") is True and apply_profile(project, "ucf101") is True
    after, base = yaml.safe_load((project / "params.yaml").read_text()), yaml.safe_load(before)
    smoke, ucf101 = (
        yaml.safe_load((REPO / "profiles" / f"{n}.yaml").read_text()) for n in ("smoke", "ucf101")
    )
    only_smoke = [
        (section, key)
        for section, keys in smoke.items()
        for key in keys
        if key not in ucf101.get(section, {}) and keys[key] != base[section][key]
    ]
    assert only_smoke and all(
        after[s][k] == base[s][k] for s, k in only_smoke
    )  # none of smoke's left
    # params.yaml edited by hand after an overlay is its own base: default keeps the edit
    (project / "params.yaml").write_text((project / "params.yaml").read_text() + "# mine\n")
    assert apply_profile(project, "default") is False


def test_orchestrate_is_read_once_a_process_and_again_after_a_profile_rewrites_params(tmp_path):
    """The command, the deployment, the server and the flow share one reading of the orchestrate section (issue 83);
    a profile the flow applies rewrites params.yaml, and the flow then reads the new values."""
    from flows.stage_readers import orchestrate
    from tests.conftest import write_params

    write_params(tmp_path, {"orchestrate": {"prefect_port": 4301}})
    first = orchestrate(tmp_path)
    assert orchestrate(tmp_path) is first and first.prefect_port == 4301
    write_params(tmp_path, {"orchestrate": {"prefect_port": 4302, "retries": 2}})
    assert orchestrate(tmp_path).prefect_port == 4302
