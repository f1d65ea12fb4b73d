"""The model registry: privacy tags, scores, provenance, the champion alias, `privhar models`."""

import math

import pytest
from click.testing import CliRunner
from mlflow import MlflowClient
from torch import nn

from privhar.cli import main
from tasks.core.guarantee import PrivacyGuarantee
from tasks.core.tracking import stage_run
from tasks.video_models.model_registry import (
    CHECKPOINT_TAG,
    list_versions,
    model_name,
    record_scores,
    register_model,
    update_champion,
)

METHOD = "registrytest"


def register(
    epsilon: float, top1: float | None, family: str = METHOD, scored_digest: str | None = None
) -> str:
    digest = f"digest-{epsilon}-{top1}"
    with stage_run("train", {}) as run:
        version = register_model(
            nn.Linear(2, 2),
            family=family,
            key=family,
            run=run,
            config={},
            tags={
                "method": family,
                CHECKPOINT_TAG: digest,
                **PrivacyGuarantee(epsilon, 1e-5, "RDP (test)").as_tags(),
            },
        )
    if top1 is not None:
        record_scores(
            family,
            {"top1": top1, "top5": 1.0, "test_videos": 10},
            {"dvc_lock_sha256": "abc", "git_commit": "deadbeef"},
            max_epsilon=8.0,
            scored_digest=scored_digest or digest,
        )
    return version


def test_stale_metrics_never_score_a_newer_model():
    """evaluate scored version 1's file; version 2 (trained since, evaluate not rerun) keeps no score and no alias."""
    family = "registrystale"
    first = register(2.0, 0.6, family)
    second = register(2.0, 0.9, family, scored_digest="digest-2.0-0.6")
    client = MlflowClient()
    assert "top1" not in client.get_model_version(model_name(family), second).tags
    assert not client.get_model_version(model_name(family), second).description
    assert str(client.get_model_version_by_alias(model_name(family), "champion").version) == first


@pytest.fixture(scope="module")
def versions():
    return [register(4.0, 0.5), register(16.0, 0.9), register(2.0, 0.6), register(7.0, 0.55)]


def test_champion_is_best_top1_within_the_epsilon_target(versions):
    client = MlflowClient()
    champion = client.get_model_version_by_alias(model_name(METHOD), "champion")
    assert (
        str(champion.version) == versions[2]
    )  # 0.9 has epsilon 16 > 8; among the rest 0.6 is best
    assert update_champion(METHOD, math.inf) == versions[1]
    assert update_champion(METHOD, 1.0) is None  # nothing qualifies: the alias goes away
    assert "champion" not in client.get_registered_model(model_name(METHOD)).aliases
    assert update_champion(METHOD, 8.0) == versions[2]


def test_versions_carry_scores_privacy_and_provenance(versions):
    version = MlflowClient().get_model_version(model_name(METHOD), versions[0])
    assert (
        version.tags["top1"] == "0.5000"
        and version.tags["epsilon"] == "4.0"
        and version.tags["delta"] == "1e-05"
    )
    assert version.tags["accountant"] == "RDP (test)" and version.tags["git_commit"] == "deadbeef"
    assert version.description.startswith(
        "Top-1 0.5000, Top-5 1.0000 on 10 test videos; ε = 4, δ = 1e-05"
    )
    run = MlflowClient().get_run(version.run_id)
    assert run.data.metrics["top1"] == 0.5  # the runs table shows ε beside Top-1


def test_privhar_models_lists_every_version(versions):
    rows = [row for row in list_versions() if row.name == model_name(METHOD)]
    assert [row.version for row in rows] == sorted(versions, key=int, reverse=True)
    assert next(row for row in rows if row.version == versions[2]).aliases == ("champion",)
    result = CliRunner().invoke(main, ["models"])
    assert result.exit_code == 0, result.output
    line = next(
        line
        for line in result.output.splitlines()
        if line.startswith(model_name(METHOD)) and " champion " in line
    )
    assert line.split()[1:6] == [versions[2], "champion", "2", "1e-05", "-"] and "0.6000" in line
    # issue 82: a row trained over seeds shows the mean ± interval its champion was chosen by, not seed 0's Top-1
    seeded = register(3.0, None)
    record_scores(
        METHOD,
        {
            "top1": 0.10,
            "top5": 1.0,
            "test_videos": 10,
            "top1_mean": 0.62,
            "top1_ci95": 0.03,
            "seeds": 8,
        },
        {"dvc_lock_sha256": "abc", "git_commit": "deadbeef"},
        max_epsilon=8.0,
        scored_digest=f"digest-{3.0}-{None}",
    )
    result = CliRunner().invoke(main, ["models"])
    line = next(
        line
        for line in result.output.splitlines()
        if line.split()[:2]
        == [model_name(METHOD), seeded]  # the store is shared: other models have a version too
    )
    assert "0.6200 ± 0.0300" in line and "0.1000" not in line and " champion " in line


def test_guarantee_tags_round_trip():
    for guarantee in (PrivacyGuarantee(math.inf, 0.0, "none"), PrivacyGuarantee(0.5, 1e-6, "PRV")):
        assert PrivacyGuarantee.from_tags(guarantee.as_tags()) == guarantee


def test_models_without_a_store_says_so_and_creates_none(tmp_path, monkeypatch):
    """Issue 61: `privhar models` in a project that never ran created a 954 KB MLflow store to say it was empty."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = CliRunner().invoke(main, ["models"])
    assert (
        result.exit_code == 0
        and "no registered models yet (no MLflow store at sqlite:///" in result.output
    )
    assert list(tmp_path.iterdir()) == []


def test_the_commit_and_what_was_modified_are_recorded_apart(tmp_path):
    """Issue 82: after a clean clone's run every version's git_commit ended in `+dirty` (the run writes its own
    tracked reports): the commit the code came from is kept, and the modified files are named beside it."""
    import subprocess

    from tasks.register import git_commit, git_modified

    def git(*args):
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q")
    (tmp_path / "dvc.lock").write_text("a\n")
    (tmp_path / "code.py").write_text("a\n")
    git("add", ".")
    git("commit", "-qm", "one")
    assert git_commit(tmp_path) == git("rev-parse", "HEAD") and git_modified(tmp_path) == "none"
    (tmp_path / "dvc.lock").write_text("b\n")
    (tmp_path / "untracked.txt").write_text("x\n")
    assert git_commit(tmp_path) == git("rev-parse", "HEAD")
    assert git_modified(tmp_path) == "dvc.lock"
