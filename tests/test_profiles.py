"""Params profiles: an overlay edits params.yaml like `dvc exp run -S`, keeping its comments."""

import shutil

import pytest
import yaml

from flows.profiles import apply_profile
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
    from flows.preflight import check_params
    from tasks.core.params import ModelParams, load_decode, load_section, load_train

    apply_profile(project, name)
    check_params(project)
    params = project / "params.yaml"
    model = load_section(params, "model", ModelParams)
    if name != "smoke":  # a backbone's own clip reaches decode and train
        decode, train = load_decode(params), load_train(params)
        assert model.backbone != "privhar" and model.weights
        assert train.input_size == decode.frame_size and decode.frame_size[0] in (112, 160, 224)
