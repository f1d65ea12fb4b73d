"""The train-private stage on tiny clips: every method, its ε, its models and registry tags, its bad input."""

from __future__ import annotations

import csv
import functools
import json
import logging
import math
import shutil

import dp_accounting
import numpy as np
import pyarrow as pa
import pytest
import torch

from flows.stage_commands import stage_call
from tasks.core.dp_params import PrivateParams
from tasks.core.errors import PrivharError
from tasks.core.params_files import load_plan, load_section
from tasks.private.gradients import per_unit_gradients
from tasks.video_models.head_features import head_of, pooled_features
from tasks.video_models.model_registry import newest_version
from tasks.video_models.models import create_video_classifier
from tasks.video_models.selective import select_trainable
from tests.conftest import check_budget_at, write_params

anonymize = stage_call("anonymize")
train = stage_call("train")
train_private = stage_call("train-private")

PRIVATE = {
    "epsilons": [2.0],
    "epochs": 2,
    "batch_size": 4,
    "physical_batch_size": 3,
    "clips_per_video": 2,
    "token": [2, 8, 8],
    "learning_rate": 0.5,
}
# q = 1/⌈n/B⌉ of a public n: every unit in every step, the audit's canaries too (the split's own count would grow by them)
FULL_BATCH = {"batch_size": 100, "public_size": {"video": 100, "person": 100}}


@pytest.fixture(scope="module")
def project(tiny_decoded, tmp_path_factory):
    folder = tmp_path_factory.mktemp("private")
    params = write_params(folder, {"private": PRIVATE, "anonymize": {"methods": ["avatar"]}})
    decoded = tiny_decoded / "data/decode"
    train(
        params_path=params,
        frames=decoded,
        out=folder / "data/pretrain/public",
        report=folder / "reports/train",
        family="public",
    )
    anonymize(
        params_path=params, frames=decoded, method="avatar", out=folder / "data/anonymize/avatar"
    )
    return folder, params, decoded


def run(project, method, **overrides):
    folder, params, decoded = project
    arguments = {
        "params_path": params,
        "method": method,
        "frames": decoded,
        "init": folder / "data/pretrain/public",
        "out": folder / f"data/private/{method}",
        "report": folder / "reports/private",
        "avatar": folder / "data/anonymize/avatar",
    }
    return train_private(**{**arguments, **overrides})


def run_with(project, method, folder, **private):
    """``method`` trained with ``private`` over :data:`PRIVATE` (params, outputs and report under ``folder``): its
    rows."""
    params = write_params(
        folder, {"private": {**PRIVATE, **private}, "anonymize": {"methods": ["avatar"]}}
    )
    return run(project, method, params_path=params, out=folder / "out", report=folder / "report")


@pytest.fixture(scope="module")
def trained(project):
    """A method's rows, trained into the project once, by whichever test asks first: under xdist a module's tests
    may go to either worker, so no test may count on another having trained a method (a CI run of 2026-11-29 found
    no dp_sgd model for the head-tuning test)."""
    return functools.cache(lambda method: run(project, method))


@pytest.mark.parametrize(
    "method", ["dp_sgd", "dp_sgd_avatar", "multiclip", "maskdp", "maskdp_real"]
)
def test_every_method_trains_each_epsilon_and_infinity(project, trained, method):
    folder = project[0]
    rows = trained(method)
    assert [row["target_epsilon"] for row in rows] == [2.0, math.inf]
    private, plain = rows
    assert (
        1.98 <= private["epsilon"] <= 2.0
        and private["noise_multiplier"] > 0
        and plain["epsilon"] == math.inf
    )
    # Issue 17: every printed ε under the relation the method has, checked against dp-accounting's PLD
    relation = "replace-one" if method.startswith("maskdp") else "add/remove"
    assert private["relation"] == relation and private["unit"].startswith("video")
    neighbours = (
        dp_accounting.NeighboringRelation.REPLACE_ONE
        if relation == "replace-one"
        else dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    accountant = dp_accounting.pld.PLDAccountant(neighbours)
    accountant.compose(
        dp_accounting.PoissonSampledDpEvent(
            private["sample_rate"], dp_accounting.GaussianDpEvent(private["noise_multiplier"])
        ),
        private["steps"],
    )
    pld = accountant.get_epsilon(private["delta"])
    assert pld - 1e-6 <= private["epsilon"] <= pld * 1.01 + 1e-3, (
        private["epsilon"],
        pld,
    )  # never below PLD
    if method.startswith(
        "maskdp"
    ):  # Theorem 1's add/remove RDP number, kept beside and labelled the paper's
        assert float(private["paper_epsilon"]) < private["epsilon"]
    with open(folder / f"reports/private/{method}_persons.csv") as handle:
        persons = [row for row in csv.DictReader(handle) if row["model"] == f"{method}-eps2.0"]
    assert persons and all(float(row["epsilon_person"]) >= private["epsilon"] for row in persons)
    assert max(float(row["epsilon_person"]) for row in persons) == pytest.approx(
        private["epsilon_person_max"]
    )
    learnt_from = "anonymize/avatar" if method in ("maskdp", "dp_sgd_avatar") else "decode"
    for key in (f"{method}-eps2.0", f"{method}-epsinf"):
        checkpoint = torch.load(folder / f"data/private/{method}/{key}/model.pt", weights_only=True)
        assert checkpoint["config"]["method"] == method and checkpoint["config"]["frames"].endswith(
            learnt_from
        )
    with open(folder / f"reports/private/{method}.csv") as handle:
        assert [line["model"] for line in csv.DictReader(handle)] == [
            f"{method}-eps2.0",
            f"{method}-epsinf",
        ]
    tags = newest_version(f"{method}-eps2.0").tags
    assert (
        abs(float(tags["epsilon"]) - private["epsilon"]) < 1e-5
        and "sigma=" in tags["accountant"]
        and tags["trainable"] == "head"
    )
    assert (
        tags["relation"] == relation
        and tags["randomness"].startswith("secret")
        and float(tags["epsilon_person_max"]) > 0
    )
    if method == "maskdp_real":
        assert "NOT protected" in tags["accountant"]
    # Issue 64: the ε's one-run audit, beside it in the CSV, on the registered version and the ε's MLflow run
    assert 0 <= private["epsilon_audited"] <= private["epsilon"] and plain["epsilon_audited"] == ""
    assert (
        private["audit_canaries"] == 1000
        and 0 <= private["audit_correct"] <= private["audit_guesses"] <= 1000
    )
    assert private["epsilon_audited_fdp"] == ""  # q < 1 here: the f-DP bound does not apply
    assert float(tags["epsilon_audited"]) == private["epsilon_audited"]
    # one MLflow run per model, nested under the stage's: its own loss and ε curves, the registered model logged there
    from mlflow import MlflowClient

    client = MlflowClient()
    model_run = client.get_run(newest_version(f"{method}-eps2.0").run_id)
    assert (
        model_run.data.tags["privhar.model"] == f"{method}-eps2.0"
        and model_run.info.run_name == f"fit {method} ε=2"
    )
    stage = client.get_run(model_run.data.tags["mlflow.parentRunId"])
    assert stage.data.tags["privhar.stage"] == f"train-private@{method}"
    assert model_run.data.metrics["epsilon_audited"] == pytest.approx(
        private["epsilon_audited"], abs=1e-4
    )
    spent = [point.value for point in client.get_metric_history(model_run.info.run_id, "epsilon")]
    assert (
        len(spent) == 2
        and spent == sorted(spent)
        and spent[-1] == pytest.approx(private["epsilon"], rel=1e-3)
    )


def test_the_public_model_holds_its_training_clips_feature_statistics(project):
    """The pretrain stage saves the public clips' pooled-feature mean and std, principal and class-mean directions; the
    private heads train on them."""
    from tasks.core.manifest import MANIFEST_NAME, read_manifest
    from tasks.video_models.checkpoints import load_checkpoint
    from tasks.video_models.clips import labels_of, load_clips, normalise, split_rows
    from tasks.video_models.head_features import (
        feature_statistics,
        standardise,
        stored_statistics,
    )

    folder, _, decoded = project
    path = folder / "data/pretrain/public/model.pt"
    statistics = stored_statistics(torch.load(path, weights_only=True))
    model, config = load_checkpoint(str(path))
    rows = split_rows(read_manifest(decoded / MANIFEST_NAME), "train")
    expected_features = pooled_features(
        model, normalise(load_clips(rows, decoded, tuple(config["input_size"])))
    )
    expected = feature_statistics(expected_features, labels_of(rows))
    assert statistics is not None and all(
        torch.allclose(statistics[key], expected[key], atol=1e-4) for key in ("mean", "std")
    )
    # the principal directions (signs and near-ties are the SVD's to choose): orthonormal, by decreasing variance
    directions = statistics["directions"]
    assert torch.allclose(directions @ directions.T, torch.eye(len(directions)), atol=1e-4)
    spread = (standardise(expected_features, expected) @ directions.T).var(0)
    assert bool((spread[1:] <= spread[:-1] * (1 + 1e-3) + 1e-5).all())
    # the class means' span (its projector: the SVD picks the signs)
    stored, fresh = statistics["class_directions"], expected["class_directions"]
    assert stored.shape == fresh.shape and torch.allclose(
        stored.T @ stored, fresh.T @ fresh, atol=1e-3
    )


def test_only_the_head_changes_under_head_tuning(project, trained):
    folder = project[0]
    trained("dp_sgd")
    public = torch.load(folder / "data/pretrain/public/model.pt", weights_only=True)["state_dict"]
    tuned = torch.load(folder / "data/private/dp_sgd/dp_sgd-eps2.0/model.pt", weights_only=True)[
        "state_dict"
    ]
    changed = {name for name in public if not torch.equal(public[name], tuned[name])}
    assert changed == {"blocks.4.proj.weight", "blocks.4.proj.bias"}


def test_features_give_the_head_the_gradients_of_the_whole_model():
    torch.manual_seed(0)
    model = create_video_classifier(num_classes=3, width=4, dropout=0.0)
    select_trainable(model, "head")
    clips, labels = torch.randn(5, 1, 3, 4, 32, 40), torch.tensor([0, 1, 2, 1, 0])
    whole = per_unit_gradients(model.eval(), clips, labels)[0]
    features = pooled_features(model, clips[:, 0]).unsqueeze(1)
    head = per_unit_gradients(head_of(model), features, labels)[0]
    assert torch.allclose(whole["blocks.4.proj.weight"], head["weight"], atol=1e-5)
    assert torch.allclose(whole["blocks.4.proj.bias"], head["bias"], atol=1e-5)


def test_bad_input_is_one_line_before_training(project, tmp_path, caplog):
    folder, params, decoded = project
    with pytest.raises(PrivharError, match=r"private.delta = 0.5 is invalid: expected δ < 1/N"):
        run(
            project,
            "dp_sgd",
            params_path=write_params(tmp_path, {"private": {**PRIVATE, "delta": 0.5}}),
        )
    with pytest.raises(PrivharError, match="needs --avatar"):
        run(project, "maskdp", avatar=None)
    with pytest.raises(PrivharError, match="has no public mask"):
        run(project, "maskdp_real", avatar=decoded)
    empty = shutil.copytree(folder / "data/anonymize/avatar", tmp_path / "empty")
    for stored in empty.glob("masks/*.npz"):
        with np.load(stored) as arrays:
            np.savez_compressed(stored, public=np.zeros_like(arrays["public"]))
    with caplog.at_level(
        logging.WARNING, logger="tasks.private.stage"
    ):  # real footage with no avatar drawn: said, and trained
        trained = run(
            project,
            "maskdp",
            avatar=empty,
            out=tmp_path / "no-public",
            report=tmp_path / "no-public-report",
        )
    assert (
        trained
        and "found no public token in any of the" in caplog.text
        and "MaskDP is DP-SGD on the private tokens" in caplog.text
    )
    with pytest.raises(PrivharError, match="no public model"):
        run(project, "dp_sgd", init=tmp_path)
    with pytest.raises(PrivharError, match=r"private.epsilons.*greater than 0|epsilons"):
        run(
            project,
            "dp_sgd",
            params_path=write_params(tmp_path, {"private": {**PRIVATE, "epsilons": [0.0]}}),
        )
    assert not (tmp_path / "out").exists()


def test_maskdp_public_view_holds_only_avatar_pixels_on_the_anonymize_masks(project):
    """Issue 17: at the default threshold 0.5 a half-avatar token was public whole; now only its avatar pixels are."""
    from tasks.core.manifest import read_manifest
    from tasks.private.inputs import public_masks
    from tasks.private.tokens import public_pixels, public_token_map
    from tasks.video_models.clips import load_clips, split_rows

    folder = project[0]
    avatar = folder / "data/anonymize/avatar"
    rows = split_rows(read_manifest(avatar / "manifest.parquet"), "train")
    masks = public_masks(rows, avatar, (32, 40))
    tokens = public_token_map(masks, (2, 8, 8), 0.5)
    assert (tokens & (masks < 0.5)).any()  # the token-level view would have leaked real pixels here
    public = public_pixels(masks, (2, 8, 8), 0.5)
    assert (
        public.any() and not (public & (masks < 0.5)).any()
    )  # 0 non-avatar pixels in the public view
    from tasks.private.tokens import token_views

    clips = load_clips(rows, avatar, (32, 40)).float()
    private_view, public_view = token_views(clips, public)
    assert torch.equal(private_view + public_view, clips)
    assert (public_view * (masks < 0.5).unsqueeze(1)).abs().sum() == 0


@pytest.mark.parametrize("size", [(24, 30), (28, 35), (48, 60)])
def test_maskdp_public_view_at_the_models_input_does_not_move_when_any_non_avatar_pixel_changes(
    project, tmp_path, size
):
    """Issue 30: the clips reach the model resized bilinearly (down, by a non-integer factor, and up), so the public view is
    computed at that size: a copy of the avatar clips with every non-avatar source pixel changed gives the same public
    view bit for bit, through the stage's own loading and views. The nearest-neighbour mask it replaced is shown to move."""
    from tasks.core.manifest import read_manifest, resolve_path
    from tasks.core.storage import load_frames, save_frames
    from tasks.private.inputs import method_views, public_masks
    from tasks.video_models.clips import load_clips, split_rows

    avatar = project[0] / "data/anonymize/avatar"
    changed = shutil.copytree(avatar, tmp_path / "changed")
    rows = split_rows(read_manifest(avatar / "manifest.parquet"), "train")
    for row in rows:
        with np.load(resolve_path(row["mask"], avatar)) as arrays:
            outside = arrays["public"] < 0.5
        frames = load_frames(resolve_path(row["path"], changed))
        frames[outside] = (
            frames[outside].astype(np.int64) + 97
        ) % 256  # every real pixel, every channel
        save_frames(resolve_path(row["path"], changed), frames)
    params = load_section(project[1], "private", PrivateParams)
    masks = public_masks(rows, avatar, size)
    labels = torch.zeros(len(rows), dtype=torch.long)

    def public_view(folder, public) -> torch.Tensor:
        return method_views(
            "maskdp", load_clips(rows, folder, size), labels, params, torch.Generator(), public
        ).public

    before, after = public_view(avatar, masks), public_view(changed, masks)
    assert bool(masks.any()) and bool(before.ne(0).any())  # something is public: the test can fail
    assert torch.equal(before, after)
    nearest = torch.stack(
        [
            torch.nn.functional.interpolate(
                torch.from_numpy(np.load(resolve_path(row["mask"], avatar))["public"])
                .float()
                .unsqueeze(1),
                size=size,
                mode="nearest",
            ).squeeze(1)
            for row in rows
        ]
    )
    assert not torch.equal(public_view(avatar, nearest), public_view(changed, nearest))


@pytest.fixture(scope="module")
def brighter_avatar_copy(project, tmp_path_factory):
    """The avatar copy made again by the anonymize stage from the decoded clips with every pixel +40 grey levels
    (mod 256): the same people, skeletons and avatars; only the real content differs."""
    from tasks.core.manifest import read_manifest, resolve_path
    from tasks.core.storage import load_frames, save_frames

    folder, params, decoded = project
    copy = tmp_path_factory.mktemp("brighter")
    shutil.copytree(decoded, copy / "decode")
    for row in read_manifest(decoded / "manifest.parquet"):
        path = resolve_path(row["path"], copy / "decode")
        save_frames(path, ((load_frames(path).astype(np.int64) + 40) % 256).astype(np.uint8))
    anonymize(params_path=params, frames=copy / "decode", method="avatar", out=copy / "avatar")
    return folder / "data/anonymize/avatar", copy / "avatar"


@pytest.mark.parametrize("size", [(32, 40), (24, 30)])
def test_maskdp_public_view_does_not_move_when_the_real_clip_behind_the_avatar_changes(
    project, brighter_avatar_copy, size
):
    """Issue 58: the avatar copy made twice by the anonymize stage, from the decoded clips and from the same clips +40
    grey levels, gives the same public view at the model's input bit for bit, through the stage's own loading, masks,
    resize (the tiny set's own size, and 0.75, the default params' non-integer factor) and views. With the old
    mask (every pixel an avatar touched) the anti-aliased edges blended the real background in and the view moved."""
    from tasks.core.manifest import read_manifest
    from tasks.private.inputs import method_views, public_masks
    from tasks.video_models.clips import load_clips, split_rows

    avatar, brighter = brighter_avatar_copy
    rows = split_rows(read_manifest(avatar / "manifest.parquet"), "train")
    params = load_section(project[1], "private", PrivateParams)
    labels = torch.zeros(len(rows), dtype=torch.long)

    def public_view(folder):
        masks = public_masks(rows, folder, size)
        clips = load_clips(rows, folder, size)
        return method_views("maskdp", clips, labels, params, torch.Generator(), masks).public

    before, after = public_view(avatar), public_view(brighter)
    assert bool(before.ne(0).any())  # something is public: the test can fail
    assert torch.equal(before, after)


def test_a_clip_the_avatar_copy_held_back_has_nothing_public(project, tmp_path):
    """maskdp_real takes raw clips with the avatar copy's masks: a quarantined clip has no avatar, so no public pixel."""
    import shutil

    from tasks.core.manifest import read_manifest, write_manifest, write_table
    from tasks.private.inputs import public_masks

    copy = tmp_path / "avatar"
    shutil.copytree(project[0] / "data/anonymize/avatar", copy)
    released = read_manifest(copy / "manifest.parquet")
    held = released[0]
    write_manifest(released[1:], copy / "manifest.parquet")
    write_table([{"video_id": held["video_id"]}], copy / "quarantine.parquet")
    masks = public_masks(released, copy, (32, 40))
    assert not masks[0].any() and masks[1:].any()
    write_table([], copy / "quarantine.parquet", schema=pa.schema([("video_id", pa.string())]))
    with pytest.raises(PrivharError, match=rf"video {held['video_id']} has no public mask"):
        public_masks(released, copy, (32, 40))


def test_person_units_clip_each_person_once_and_claim_epsilon_per_person(project, tmp_path):
    """private.unit: person — Poisson sampling of persons, a person's videos summed and clipped as one unit."""
    private = run_with(project, "multiclip", tmp_path, unit="person", batch_size=2)[0]
    assert private["unit"] == "person" and 1.98 <= private["epsilon"] <= 2.0
    with open(tmp_path / "report/multiclip_persons.csv") as handle:
        persons = [row for row in csv.DictReader(handle) if row["model"] == "multiclip-eps2.0"]
    # a person held by one unit (their own) has the model's ε; one also in another's video pays group privacy over 2
    assert any(
        row["units"] == "1" and float(row["epsilon_person"]) == pytest.approx(private["epsilon"])
        for row in persons
    )
    assert all(float(row["epsilon_person"]) >= private["epsilon"] - 1e-9 for row in persons)
    video = run(project, "multiclip", out=tmp_path / "video", report=tmp_path / "video-report")[0]
    assert (
        video["epsilon_person_max"] > private["epsilon_person_max"]
    )  # video units: group privacy over every video


def test_at_full_batch_the_f_dp_bound_is_beside_the_other_in_the_csv_registry_and_run(
    project, tmp_path
):
    """Issue 86: q = 1 (every unit in every step, the shipped recipe): the run's audit also reads the guesses as f-DP;
    the bound is in the CSV, on the registered version and on the ε's MLflow run, and below the ε."""
    from mlflow import MlflowClient

    private = run_with(project, "dp_sgd_person", tmp_path, **FULL_BATCH)[0]
    assert private["sample_rate"] == 1.0
    assert 0 <= private["epsilon_audited_fdp"] <= private["epsilon"]
    assert private["audit_fdp_guesses"] == 200 and 0 <= private["audit_fdp_correct"] <= 200
    version = newest_version("dp_sgd_person-eps2.0")
    assert float(version.tags["epsilon_audited_fdp"]) == private["epsilon_audited_fdp"]
    metrics = MlflowClient().get_run(version.run_id).data.metrics
    assert metrics["epsilon_audited_fdp"] == pytest.approx(private["epsilon_audited_fdp"], abs=1e-4)


def test_person_level_method_samples_people_under_video_units_and_the_plan_agrees(
    project, tmp_path
):
    """dp_sgd_person is person-level whatever private.unit says; the budget plan charges each person what it claims."""
    from tasks.core.manifest import read_manifest
    from tasks.privacy.budget import planned_releases

    _, _, decoded = project
    private = run_with(project, "dp_sgd_person", tmp_path, unit="video", batch_size=2)[0]
    assert (
        private["unit"] == "person"
        and private["relation"] == "add/remove"
        and 1.98 <= private["epsilon"] <= 2.0
    )
    rows = read_manifest(decoded / "manifest.parquet")
    train_rows = [row for row in rows if row["split"] == "train"]
    people = len({int(row["identities"][0]) for row in train_rows})
    assert private["sample_rate"] == pytest.approx(
        1 / math.ceil(people / 2)
    )  # q from people, not from videos
    with open(tmp_path / "report/dp_sgd_person_persons.csv") as handle:
        claimed = {
            int(row["subject"]): float(row["epsilon_person"])
            for row in csv.DictReader(handle)
            if row["model"] == "dp_sgd_person-eps2.0"
        }
    plan = {
        release.name: release for release in planned_releases(load_plan(tmp_path / "params.yaml"))
    }["dp_sgd_person-eps2.0"]
    planned = plan.person_epsilons(train_rows)
    assert planned.keys() == claimed.keys()
    assert all(planned[person] == pytest.approx(claimed[person], rel=0.02) for person in claimed)


def test_each_seed_is_a_fresh_model_and_a_dp_release_of_its_own(project, tmp_path):
    """Issue 19: report.seeds trains every ε again from other seeds; each is a release the budget counts."""
    from tasks.privacy.budget import planned_releases
    from tasks.report.ledger import private_releases

    folder, _, decoded = project
    params = write_params(
        tmp_path, {"private": PRIVATE, "anonymize": {"methods": ["avatar"]}, "report": {"seeds": 2}}
    )
    rows = run(
        project,
        "dp_sgd",
        params_path=params,
        out=tmp_path / "out/dp_sgd",
        report=tmp_path / "report",
    )
    assert [(row["model"], row["seed"]) for row in rows] == [
        ("dp_sgd-eps2.0", 0),
        ("dp_sgd-eps2.0-seed1", 1),
        ("dp_sgd-epsinf", 0),
        ("dp_sgd-epsinf-seed1", 1),
    ]
    assert 1.98 <= rows[1]["epsilon"] <= 2.0
    first, second = (
        torch.load(tmp_path / "out/dp_sgd/dp_sgd-eps2.0" / name / "model.pt", weights_only=True)[
            "state_dict"
        ]
        for name in (".", "seed1")
    )
    assert not torch.equal(
        first["blocks.4.proj.weight"], second["blocks.4.proj.weight"]
    )  # a fresh head, fresh noise
    assert newest_version("dp_sgd-eps2.0-seed1") is None  # seed 0 is the registered model
    names = [release.name for release in private_releases(tmp_path / "report", ["dp_sgd"])]
    assert names == ["dp_sgd-eps2.0", "dp_sgd-eps2.0-seed1", "dp_sgd-epsinf", "dp_sgd-epsinf-seed1"]
    assert "maskdp-eps2.0-seed1" in [
        planned.name for planned in planned_releases(load_plan(params))
    ]
    # a cap that seed 0 fits under and seed 1 does not: the stage refuses before any work
    from tasks.core.manifest import read_manifest

    manifest = read_manifest(decoded / "manifest.parquet")
    spent: dict[int, float] = {}
    for planned in planned_releases(load_plan(params)):
        requested = planned.person_epsilons([r for r in manifest if r["split"] in planned.splits])
        if planned.name == "dp_sgd-eps2.0-seed1":
            break
        for person, value in requested.items():
            spent[person] = spent.get(person, 0.0) + value
    most = max(spent, key=spent.get)
    (tmp_path / "capped").mkdir()
    capped = write_params(
        tmp_path / "capped",
        {
            "private": PRIVATE,
            "anonymize": {"methods": ["avatar"]},
            "report": {"seeds": 2},
            "privacy": {"max_epsilon": spent[most] + requested[most] / 2},
        },
    )
    check_budget_at(capped, "dp_sgd-eps2.0", manifest)
    with pytest.raises(PrivharError, match="before dp_sgd-eps2.0-seed1"):
        run(
            project,
            "dp_sgd",
            params_path=capped,
            out=tmp_path / "refused",
            report=tmp_path / "refused-report",
        )
    assert not (tmp_path / "refused").exists()


def test_an_epsilon_can_take_more_seeds_than_the_others_and_the_plan_and_ledger_agree(
    project, tmp_path
):
    """private.seeds_at_epsilon: the rows the DP noise spreads most get more seeds; the stage trains exactly the releases
    the budget plans, enters each in the ledger (as one run), and the model run of the ε holds every seed's curves."""
    from mlflow import MlflowClient

    from tasks.privacy.budget import planned_releases
    from tasks.privacy.release_ledger import recorded
    from tasks.video_models.model_registry import newest_version

    private = {**PRIVATE, "epsilons": [1.0, 2.0], "seeds": 1, "seeds_at_epsilon": {1.0: 3}}
    params = write_params(
        tmp_path,
        {
            "private": private,
            "anonymize": {"methods": ["avatar"]},
            "privacy": {"budget": f"seeds-{tmp_path.name}"},
        },
    )
    rows = run(
        project, "dp_sgd", params_path=params, out=tmp_path / "out", report=tmp_path / "report"
    )
    trained = [row["model"] for row in rows]
    assert trained == [
        "dp_sgd-eps1.0",
        "dp_sgd-eps1.0-seed1",
        "dp_sgd-eps1.0-seed2",
        "dp_sgd-eps2.0",
        "dp_sgd-epsinf",
    ]
    planned = [
        release.name
        for release in planned_releases(load_plan(params))
        if release.stage == "train-private-dp_sgd"
    ]
    assert planned == [name for name in trained if "inf" not in name]
    assert recorded(f"seeds-{tmp_path.name}")[0] == set(planned)
    client = (
        MlflowClient()
    )  # seed 2's curve: the same key, in its run nested under the model's (issue 60)
    (seed2,) = client.search_runs(
        [client.get_run(newest_version("dp_sgd-eps1.0").run_id).info.experiment_id],
        f"tags.mlflow.parentRunId = '{newest_version('dp_sgd-eps1.0').run_id}' and tags.`privhar.seed` = '2'",
    )
    history = client.get_metric_history(seed2.info.run_id, "loss")
    assert [point.step for point in history] == [1, 2]


def test_bench_maskdp_views_scores_every_variant_on_both_protocols(project, tmp_path):
    from benchmarks.maskdp_views import run_bench

    folder, params, decoded = project
    out = tmp_path / "maskdp_views.json"
    record = run_bench(
        params, decoded, folder / "data/anonymize/avatar", folder / "data/pretrain/public", 2, out
    )
    assert json.loads(out.read_text(encoding="utf-8")) == record
    assert set(record["top1"]) == {
        "maskdp",
        "maskdp_views_unclipped",
        "private_view_only",
        "maskdp_whole_clip",
        "dp_sgd_avatar",
        "avatar_unclipped",
    }
    for scores in record["top1"].values():
        assert set(scores) == {"P1", "P2"}
        assert all(
            0 <= score["mean"] <= 100 and score["half_width"] >= 0 for score in scores.values()
        )


def test_the_audit_seeds_bench_repeats_each_release_audit_with_both_bounds(project, tmp_path):
    """``privhar bench audit-seeds`` on the stage's own inputs: each ε audited per audit seed, both bounds, sound."""
    import json

    from benchmarks.audit_seeds import run_bench

    folder, _, decoded = project
    params = write_params(
        tmp_path,
        {
            "private": {**PRIVATE, **FULL_BATCH, "methods": ["dp_sgd_person"]},
            "anonymize": {"methods": ["avatar"]},
        },
    )
    out = tmp_path / "audit_seeds.json"
    init, avatar = folder / "data/pretrain/public", folder / "data/anonymize/avatar"
    run_bench(params, decoded, avatar, init, 2, out)
    record = json.loads(out.read_text())
    row = record["methods"]["dp_sgd_person"]["2.0"]
    assert record["audit_runs"] == 2 and row["sound"] and 1.98 <= row["epsilon_claimed"] <= 2.0
    assert (
        row["fdp"]["max"] <= row["epsilon_claimed"]
        and row["steinke"]["min"] <= row["steinke"]["max"]
    )
