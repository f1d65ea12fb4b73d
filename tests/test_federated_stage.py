"""The train-federated stage on tiny clips: its table, models, registry tags, ledger entry and bad input."""

from __future__ import annotations

import csv
import json

import pytest
import torch
import yaml

from flows.stage_commands import stage_call
from tasks.core.errors import PrivharError
from tasks.core.params_files import load_plan
from tasks.privacy.accounting import gdp_epsilon
from tasks.privacy.budget import planned_releases
from tasks.privacy.federated_accounting import epsilon_of
from tasks.video_models.model_registry import newest_version
from tests.conftest import write_params

train_federated = stage_call("train-federated")
train = stage_call("train")


@pytest.fixture(scope="module")
def project(tiny_decoded, tmp_path_factory):
    folder = tmp_path_factory.mktemp("federated")
    params = write_params(folder)
    decoded = tiny_decoded / "data/decode"
    train(
        params_path=params,
        frames=decoded,
        out=folder / "data/pretrain/public",
        report=folder / "reports/train",
        family="public",
    )
    return folder, params, decoded


def run(project, **overrides):
    folder, params, decoded = project
    arguments = {
        "params_path": params,
        "frames": decoded,
        "init": folder / "data/pretrain/public",
        "out": folder / "data/federated",
        "report": folder / "reports/federated",
    }
    return train_federated(**{**arguments, **overrides})


def one_tuning(folder, overrides: dict, tuning: str, trainable: str):
    """params.yaml with ``overrides`` and ``tuning`` as the only tuning (the overlay merges mappings: it cannot drop one)."""
    params = write_params(folder, overrides)
    document = yaml.safe_load(params.read_text())
    document["federated"]["tunings"] = {tuning: trainable}
    for key in (
        "seeds_per_tuning",
        "reference_seeds",
        "recipe_per_tuning",
    ):  # each names only rows of tunings
        per_tuning = document["federated"].get(key) or {}
        document["federated"][key] = {name: v for name, v in per_tuning.items() if name == tuning}
    params.write_text(yaml.safe_dump(document, sort_keys=False))
    return params


def test_every_aggregation_and_tuning_is_trained_reported_and_registered(project):
    folder, params, _ = project
    every = run(project)
    # each model beside its reference without noise (issue 31: what the recipe reaches with no noise at all)
    assert [row["model"] for row in every] == [
        f"{aggregation}-{tuning}{suffix}"
        for tuning in ("full", "selective")
        for aggregation in ("fedavg", "fednova")
        for suffix in ("", "-epsinf")
    ]
    references = [row for row in every if row["model"].endswith("-epsinf")]
    assert {
        (row["epsilon"], row["noise_multiplier"], row["epsilon_person_max"]) for row in references
    } == {("inf", 0.0, float("inf"))}
    assert newest_version("fedavg-full-epsinf").tags["epsilon"] == "inf"
    rows = [row for row in every if row not in references]
    for row in rows:
        assert row["epsilon"] == pytest.approx(1.33, abs=1e-6)
        assert row["epsilon"] == pytest.approx(
            epsilon_of(row["noise_multiplier"], row["rounds"] * row["local_epochs"], 1e-4), abs=1e-6
        )
        stored = torch.load(
            folder / "data/federated" / row["model"] / "model.pt", weights_only=False
        )
        assert stored["config"]["aggregation"] == row["aggregation"]
    full, selective = rows[0], rows[2]
    assert full["bytes_ratio"] == pytest.approx(1.0, abs=0.01) and full["eq14_dt_over_d"] == 1.0
    assert selective["bytes_ratio"] < 0.2 and selective["eq14_dt_over_d"] < selective["bytes_ratio"]
    public = torch.load(folder / "data/pretrain/public/model.pt", weights_only=False)["state_dict"]
    tuned = torch.load(folder / "data/federated/fedavg-selective/model.pt", weights_only=False)[
        "state_dict"
    ]
    assert all(
        torch.equal(tuned[name], value)
        for name, value in public.items()
        if not name.startswith("blocks.4.proj")
    )
    with open(folder / "reports/federated/rounds.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 8 * 2
    metrics = json.loads((folder / "reports/federated/metrics.json").read_text())
    assert set(metrics) == {row["model"] for row in every}
    table = (folder / "reports/federated/federated.md").read_text()
    assert "ε eq. 11 (paper's approximation)" in table and "fednova-selective" in table
    version = newest_version("fednova-selective")
    assert (
        float(version.tags["epsilon"]) == pytest.approx(1.33)
        and "replace-one" in version.tags["accountant"]
    )
    assert "federated-fednova-selective" in [
        release.name for release in planned_releases(load_plan(params))
    ]
    assert version.tags["unit"] == "video" and version.tags["relation"] == "replace-one"
    assert version.tags["randomness"].startswith("secret")
    # Issue 64: one one-run audit per tuning and aggregation that trains its own models, its ε̂ on each row it
    # trained, the registered version and the model's MLflow run. The tiny clients take unequal steps, so FedNova
    # trains (and is audited) on its own here: two audits a tuning, each drawing its own secret canaries, whose ε̂ may
    # differ (with equal steps FedNova's rows take FedAvg's models and audit: FederatedRun.trains)
    audits: dict[tuple[str, str], set[float]] = {}
    for row in rows:
        audits.setdefault((row["tuning"], row["trained_as"]), set()).add(row["epsilon_audited"])
    assert {tuning for tuning, _ in audits} == {"full", "selective"}
    for found in audits.values():
        assert len(found) == 1 and 0 <= found.pop() <= 1.33
    assert all(row["audit_canaries"] == 24 for row in rows)
    registered = next(row for row in rows if row["model"] == "fednova-selective")
    assert float(version.tags["epsilon_audited"]) == registered["epsilon_audited"]
    from mlflow import MlflowClient

    model_run = MlflowClient().get_run(version.run_id)
    assert model_run.data.metrics["epsilon_audited"] == pytest.approx(
        registered["epsilon_audited"], abs=1e-4
    )
    assert "ε̂ audited (one run)" in table and "not audited" not in table
    with open(folder / "reports/federated/federated_persons.csv") as handle:
        persons = list(csv.DictReader(handle))
    # a person with m videos: μ = m · 2·sqrt(rounds·E)/σ (all m in one batch is the worst case)
    for person in [person for person in persons if not person["model"].endswith("-epsinf")]:
        sigma = next(row["noise_multiplier"] for row in rows if row["model"] == person["model"])
        expected = gdp_epsilon(int(person["units"]) * 2 * 2**0.5 / sigma, 1e-4)
        assert float(person["epsilon_person"]) == pytest.approx(expected, rel=1e-5)
    assert all(
        row["epsilon_person_max"] > 2 * row["epsilon"] for row in rows
    )  # every tiny person has 2+ videos


def test_bad_input_is_one_line_before_training(project, tmp_path):
    with pytest.raises(PrivharError, match="federated.clients = 500 is more than the"):
        run(
            project,
            params_path=write_params(tmp_path, {"federated": {"clients": 500}}),
            out=tmp_path / "out",
        )
    with pytest.raises(PrivharError, match=r"client \d of \d+ got no training video"):
        run(
            project,
            params_path=write_params(
                tmp_path, {"federated": {"clients": 9, "partition": "by_identity"}}
            ),
            out=tmp_path / "out",
        )
    with pytest.raises(PrivharError, match=r"federated.client_fraction = 1.5 is invalid"):
        run(
            project,
            params_path=write_params(tmp_path, {"federated": {"client_fraction": 1.5}}),
            out=tmp_path / "out",
        )
    with pytest.raises(PrivharError, match=r"federated.delta = 0.5 is invalid: expected δ < 1/N_k"):
        run(
            project,
            params_path=write_params(tmp_path, {"federated": {"delta": 0.5}}),
            out=tmp_path / "out",
        )
    assert not (tmp_path / "out").exists()


def test_the_stage_on_flower_gives_the_in_process_table(project, tmp_path):
    """federated.transport: flower runs the same stage as Flower apps on the simulation engine: same accuracy, ε, bytes."""
    pytest.importorskip("flwr", reason="flwr is the 'federated' extra")
    rows = {}
    for transport in ("in_process", "flower"):
        (tmp_path / transport).mkdir()
        params = one_tuning(
            tmp_path / transport,
            {
                "federated": {"aggregations": ["fednova"], "transport": transport},
                "privacy": {"randomness": "seeded"},
            },  # the same trajectory
            "selective",
            "head",
        )
        rows[transport] = run(
            project,
            params_path=params,
            out=tmp_path / transport / "data",
            report=tmp_path / transport / "reports",
        )
    local, remote = rows["in_process"], rows["flower"]
    keep = ("model", "accuracy", "epsilon", "mb_per_client_round", "noise_multiplier")
    assert [{key: row[key] for key in keep} for row in remote] == [
        {key: row[key] for key in keep} for row in local
    ]


def test_head_only_clients_train_on_standardised_features_and_the_saved_head_is_folded(project):
    """Selective (head-only) tuning: the tail's inputs are the pooled features standardised by the public model's
    statistics, as (N, C, 1, 1, 1); the tail's logits on them equal the folded full model's on the clips."""
    from tasks.core.manifest import MANIFEST_NAME, read_manifest
    from tasks.federated.inputs import Clips, split_for
    from tasks.video_models.clips import labels_of, load_clips, normalise, split_rows
    from tasks.video_models.head_features import (
        fold_standardisation,
        head_of,
        pooled_features,
        public_statistics,
        standardise,
    )

    folder, _, decoded = project
    init = folder / "data/pretrain/public"
    rows = split_rows(read_manifest(decoded / MANIFEST_NAME), "train")
    size = tuple(torch.load(init / "model.pt", weights_only=True)["config"]["input_size"])
    clips = normalise(load_clips(rows, decoded, size))
    split = split_for(
        init,
        decoded,
        Clips(clips, labels_of(rows), clips, labels_of(rows), rows, [list(range(len(rows)))]),
        "head",
        seed=3,
    )
    statistics = public_statistics(init)
    assert split.statistics is not None
    expected = standardise(pooled_features(split.model, clips), statistics)
    assert torch.allclose(split.shards[0].inputs.flatten(1), expected, atol=1e-5)
    with torch.no_grad():
        head_of(split.tail).weight.normal_()  # a trained head, as a client would send back
        tail_logits = split.tail.eval()(split.test.inputs)
        model = split.model
        model.load_state_dict(
            {
                **model.state_dict(),
                **{k: v for k, v in split.tail.state_dict().items() if "proj" in k},
            }
        )
        fold_standardisation(head_of(model), statistics)
        assert torch.allclose(model.eval()(clips), tail_logits, atol=1e-4)
    # another seed of the tuning reuses the frozen prefix's outputs: the same inputs, its own classifier
    again = split_for(
        init,
        decoded,
        Clips(clips, labels_of(rows), clips, labels_of(rows), rows, [list(range(len(rows)))]),
        "head",
        seed=4,
        inputs_of=split,
    )
    fresh = split_for(
        init,
        decoded,
        Clips(clips, labels_of(rows), clips, labels_of(rows), rows, [list(range(len(rows)))]),
        "head",
        seed=4,
    )
    assert again.shards[0].inputs is split.shards[0].inputs and torch.equal(
        again.shards[0].inputs, fresh.shards[0].inputs
    )
    assert torch.equal(head_of(again.tail).weight, head_of(fresh.tail).weight)
    assert not torch.equal(head_of(again.tail).weight, head_of(split.tail).weight)
    # full fine-tuning sees the clips themselves, unstandardised
    assert (
        split_for(
            init,
            decoded,
            Clips(clips, labels_of(rows), clips, labels_of(rows), rows, [list(range(len(rows)))]),
            "all",
            seed=3,
        ).statistics
        is None
    )


def test_a_tuning_can_take_more_seeds_and_the_plan_counts_each(project, tmp_path):
    """federated.seeds_per_tuning: the cheap selective rows get more seeds (each a release the plan and the ledger
    count); the full rows keep report.seeds. federated.reference_seeds: the ε = ∞ references of the first seeds only."""
    from tasks.privacy.budget import planned_releases
    from tasks.privacy.release_ledger import recorded

    params = write_params(
        tmp_path,
        {
            "federated": {
                "seeds_per_tuning": {"selective": 3},
                "reference_seeds": {"selective": 2},
                "aggregations": ["fedavg"],
            }
        },
    )
    models = [
        row["model"]
        for row in run(
            project, params_path=params, out=tmp_path / "out", report=tmp_path / "report"
        )
    ]
    assert models == [
        "fedavg-full",
        "fedavg-full-epsinf",
        "fedavg-selective",
        "fedavg-selective-epsinf",
        "fedavg-selective-seed1",
        "fedavg-selective-epsinf-seed1",
        "fedavg-selective-seed2",
    ]
    planned = [
        release.name
        for release in planned_releases(load_plan(params))
        if release.stage == "train-federated"
    ]
    assert planned == [
        "federated-fedavg-full",
        "federated-fedavg-selective",
        "federated-fedavg-selective-seed1",
        "federated-fedavg-selective-seed2",
    ]
    assert recorded(f"test-{tmp_path.name}")[0] == set(planned)


def _states(out, aggregations, suffix):
    return [
        torch.load(out / f"{name}-full{suffix}/model.pt", weights_only=False)["state_dict"]
        for name in aggregations
    ]


def _same(first, second) -> bool:
    return all(torch.equal(first[name], second[name]) for name in first)


def test_fednova_is_fedavgs_model_at_every_epsilon_when_every_client_takes_the_same_steps(
    project, tmp_path
):
    """FedNova's normalisation is the identity when every τ_k is equal (tasks/federated/aggregation.py): its models,
    with noise and without, are FedAvg's, trained once, marked in the rows and the table; with unequal steps each
    aggregation trains its own models and draws its own noise. One tuning (full) shows it: the normalisation depends on
    the clients' steps, not on which parameters train."""
    from tasks.core.dp_params import FederatedParams
    from tasks.core.params import BaseParams
    from tasks.core.params_files import load_section
    from tasks.federated.federation import fednova_is_fedavg
    from tasks.federated.inputs import load_federated_clips
    from tasks.video_models.public_model import public_config

    folder, params_path, decoded = project
    params = load_section(params_path, "federated", FederatedParams)
    assert fednova_is_fedavg(
        params.model_copy(update={"batch_size": 4}), [[0, 1, 2, 3], [4, 5, 6]]
    )  # one step each
    assert fednova_is_fedavg(
        params.model_copy(update={"batch_size": 2}), [[0, 1, 2, 3], [4, 5, 6]]
    )  # 2 steps each
    assert not fednova_is_fedavg(
        params.model_copy(update={"batch_size": 3}), [[0, 1, 2, 3], [4, 5, 6]]
    )  # 2 and 1

    out = tmp_path / "out"
    every = run(
        project,
        params_path=one_tuning(tmp_path, {"federated": {"batch_size": 200}}, "full", "all"),
        out=out,
        report=tmp_path / "report",
    )
    rows = {row["model"]: row for row in every}
    for suffix in ("", "-epsinf"):
        assert _same(*_states(out, ("fedavg", "fednova"), suffix))
        assert rows[f"fedavg-full{suffix}"]["accuracy"] == rows[f"fednova-full{suffix}"]["accuracy"]
    assert {row["trained_as"] for row in every} == {"fedavg"}
    assert (
        "FedNova's normalisation is the identity" in (tmp_path / "report/federated.md").read_text()
    )

    config = public_config(folder / "data/pretrain/public", decoded)
    shards = load_federated_clips(
        decoded,
        tuple(config["input_size"]),
        load_section(params_path, "base", BaseParams),
        params,
    ).shards
    unequal = params.model_copy(update={"batch_size": 1})  # τ_k = N_k
    if fednova_is_fedavg(unequal, shards):
        pytest.skip(f"the tiny clients hold equally many videos ({[len(s) for s in shards]})")
    out = tmp_path / "unequal"
    (tmp_path / "unequal-params").mkdir()
    every = run(
        project,
        params_path=one_tuning(
            tmp_path / "unequal-params", {"federated": {"batch_size": 1}}, "full", "all"
        ),
        out=out,
        report=tmp_path / "report-unequal",
    )
    assert not _same(*_states(out, ("fedavg", "fednova"), ""))  # their own noise and scales
    assert {row["aggregation"] for row in every} == {row["trained_as"] for row in every}
    assert (
        "normalisation is the identity"
        not in (tmp_path / "report-unequal/federated.md").read_text()
    )


def test_a_tunings_own_recipe_sets_its_local_epochs_and_its_sigma(project, tmp_path):
    """federated.recipe_per_tuning: the selective rows train 3 local epochs a round where full trains 1; σ is
    calibrated for each tuning's own compositions, so both spend federated.epsilon per client, and the budget plan
    prices each person with the tuning's own E (its verdicts are the stage's)."""
    from tasks.core.dp_params import FederatedParams, tuned
    from tasks.core.manifest import MANIFEST_NAME, read_manifest
    from tasks.core.params_files import load_section
    from tasks.privacy.budget import planned_releases
    from tasks.video_models.clips import split_rows

    params = write_params(
        tmp_path,
        {
            "federated": {
                "recipe_per_tuning": {"selective": {"local_epochs": 3}},
                "aggregations": ["fedavg"],
            }
        },
    )
    every = run(project, params_path=params, out=tmp_path / "out", report=tmp_path / "report")
    rows = {row["model"]: row for row in every}
    full, selective = rows["fedavg-full"], rows["fedavg-selective"]
    assert (full["local_epochs"], selective["local_epochs"]) == (1, 3)
    assert selective["noise_multiplier"] > full["noise_multiplier"]
    for row, compositions in ((full, 2), (selective, 6)):
        assert row["epsilon"] == pytest.approx(1.33, abs=1e-6)
        assert epsilon_of(row["noise_multiplier"], compositions, 1e-4) == pytest.approx(
            1.33, abs=1e-6
        )
    federated = load_section(params, "federated", FederatedParams)
    assert tuned(federated, "selective").local_epochs == 3 and tuned(federated, "full") == federated
    with open(tmp_path / "report/federated_persons.csv") as handle:
        persons = {
            (person["model"], int(person["subject"])): float(person["epsilon_person"])
            for person in csv.DictReader(handle)
        }
    plan = {release.name: release for release in planned_releases(load_plan(params))}
    train_rows = split_rows(read_manifest(project[2] / MANIFEST_NAME), "train")
    for model in ("fedavg-full", "fedavg-selective"):
        planned = plan[f"federated-{model}"].person_epsilons(train_rows)
        stage = {subject: value for (key, subject), value in persons.items() if key == model}
        assert set(stage) <= set(planned)
        assert all(stage[subject] == pytest.approx(planned[subject], rel=1e-5) for subject in stage)
    assert "selective: 3 local epoch(s) a round" in (tmp_path / "report/federated.md").read_text()
    with pytest.raises(PrivharError, match="recipe_per_tuning.*names no row of federated.tunings"):
        run(
            project,
            params_path=write_params(
                tmp_path, {"federated": {"recipe_per_tuning": {"partial": {"local_epochs": 2}}}}
            ),
            out=tmp_path / "refused",
        )
