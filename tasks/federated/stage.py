"""Stage ``train-federated``: FedDP-STECAR (paper 003) — every aggregation × tuning at one ε per client.

    public model ─┐
    raw clips ────┴─▶ shards (federated.partition) ─▶ for tuning in federated.tunings, aggregation in federated.aggregations:
                                                        T rounds of Algorithm 1 (rounds.run_rounds)
                                                        └─▶ data/federated/<aggregation>-<tuning>/model.pt
                                                            (seed i ≥ 1 of the tuning's seeds: …/seed<i>/model.pt)
                                                        └─▶ reports/federated/{federated.md, federated.csv, rounds.csv,
                                                                               accuracy_by_round.png, metrics.json}

σ is calibrated so that a client taking part in every round spends exactly ``federated.epsilon``
(:mod:`tasks.privacy.federated_accounting`: shuffled batches, replace-one); the table gives each run's
largest per-client ε, the paper's eq. 11 value beside it, the measured bytes per client per round
against a full-model update, and eq. 14's d_t/d. Each round's accuracy, loss, ε and bytes go to
MLflow (metric ``<key>.<name>``, step = round); each final model to the registry as ``privhar-federated``.
"""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tasks.core.device import resolve_device
from tasks.core.errors import PrivharError
from tasks.core.head_features import fold_standardisation, head_of
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import (
    BaseParams,
    FederatedParams,
    PrivacyParams,
    ReportParams,
    federated_reference_seeds,
    federated_seeds,
    load_section,
)
from tasks.core.privacy import NON_PRIVATE, PrivacyGuarantee, check_delta
from tasks.core.public_model import classifier_seed, public_config
from tasks.core.randomness import DpRandomness
from tasks.core.registry import CHECKPOINT_TAG, checkpoint_digest, register_model
from tasks.core.seeding import derive_seed
from tasks.core.seeds import seed_folder, seed_keys, seed_suffix
from tasks.core.storage import atomic_directory, atomic_write_bytes
from tasks.core.subjects import videos_per_person
from tasks.core.tables import csv_bytes
from tasks.core.tracking import StageRun, stage_run, stage_work
from tasks.federated.client import LocalRecipe, load_trainable
from tasks.federated.inputs import Split, load_federated_clips, split_for
from tasks.federated.rounds import Federation, FederationResult, in_process, run_rounds
from tasks.federated.table import federated_table
from tasks.privacy.accounting import REPLACE_ONE
from tasks.privacy.budget import check_budget, check_unprotected, federated_release, record_made
from tasks.privacy.federated_accounting import ACCOUNTANT, calibrate, person_epsilon

LOG = logging.getLogger(__name__)

MB = 1e6


def federation_of(
    base: BaseParams,
    params: FederatedParams,
    noise_multiplier: float,
    aggregation: str,
    randomness: DpRandomness,
    seed: int = 0,
) -> Federation:
    recipe = LocalRecipe(
        params.local_epochs,
        params.batch_size,
        params.learning_rate,
        params.momentum,
        params.max_grad_norm,
        noise_multiplier,
        params.grad_sample_mode,
        device=str(resolve_device(base.device)),
    )
    return Federation(
        params.clients,
        params.rounds,
        params.client_fraction,
        aggregation,
        params.delta,
        derive_seed(base.seed, "federated", *seed_keys(seed)),
        recipe,
        secure=randomness.private,
    )


def federated_model(aggregation: str, tuning: str, epsilon: float, private_epsilon: float) -> str:
    """A federated model's key: ``fedavg-selective`` at ``federated.epsilon``, ``fedavg-selective-epsinf`` for its
    reference without noise (when ``federated.epsilon`` itself is finite).

    >>> federated_model("fedavg", "full", 1.33, 1.33), federated_model("fedavg", "full", math.inf, 1.33)
    ('fedavg-full', 'fedavg-full-epsinf')
    """
    reference = math.isinf(epsilon) and math.isfinite(private_epsilon)
    return f"{aggregation}-{tuning}" + ("-epsinf" if reference else "")


def fednova_is_fedavg(params: FederatedParams, shards: list[list[int]]) -> bool:
    """True when every client takes the same local steps τ_k = E·⌈N_k / B⌉: FedNova's normalisation is then the identity
    (tasks/federated/aggregation.py), so without noise its model is FedAvg's and is trained once (here: one step each)."""
    return (
        len({math.ceil(len(shard) / min(params.batch_size, len(shard))) for shard in shards}) == 1
    )


def check_inputs(params: FederatedParams, shards: list[list[int]]) -> None:
    smallest = min(len(shard) for shard in shards)
    counted = f"the smallest client holds {smallest} videos"
    check_delta("federated.delta", params.delta, smallest, "N_k", counted)
    for name in params.tunings:
        if not name.replace("_", "").isalnum():
            raise PrivharError(
                f"federated.tunings: name {name!r} is invalid: expected letters, digits and '_'"
            )


@stage_work
def train_federated(
    *,
    params_path: Path,
    frames: Path,
    init: Path,
    out: Path,
    report: Path,
    budget: Path | None = None,
) -> list[dict[str, Any]]:
    """Run the stage; return the table rows. ``budget``: the budget stage's plan for it (default: planned here)."""
    base = load_section(params_path, "base", BaseParams)
    params = load_section(params_path, "federated", FederatedParams)
    randomness = DpRandomness(
        load_section(params_path, "privacy", PrivacyParams).randomness, base.seed
    )
    config = public_config(init, frames)
    clips = load_federated_clips(frames, tuple(config["input_size"]), base, params)
    check_inputs(params, clips.shards)
    report_params = load_section(params_path, "report", ReportParams)
    seeds = {tuning: federated_seeds(params, report_params, tuning) for tuning in params.tunings}
    references = {
        tuning: federated_reference_seeds(params, report_params, tuning)
        for tuning in params.tunings
    }
    every_row = read_manifest(frames / MANIFEST_NAME)
    for tuning in params.tunings:
        for aggregation in params.aggregations:
            for seed in range(seeds[tuning]):  # every seed is a release of the clients' videos
                # every row, both splits: the earlier Video-DPRP releases hold the person's test videos too
                check_budget(
                    params_path,
                    federated_release(aggregation, tuning) + seed_suffix(seed),
                    every_row,
                    budget,
                )
    if math.isfinite(
        params.epsilon
    ):  # the ε = ∞ reference rows: the same recipe without noise, no DP guarantee
        check_unprotected(
            params_path, "the federated reference models at ε = ∞ (the same recipe without noise)"
        )
    compositions = params.rounds * params.local_epochs
    sigmas = {params.epsilon: calibrate(params.epsilon, compositions, params.delta), math.inf: 0.0}
    torch.use_deterministic_algorithms(True)
    equal_steps = fednova_is_fedavg(params, clips.shards)
    held = videos_per_person(clips.rows)
    rows, rounds, persons = [], [], []
    registrations = []  # registered once the output folder and reports are complete: a failed stage leaves no version
    with stage_run("train-federated", {"base": base, "federated": params}) as run:
        run.log_dataset(frames, "train", "training")
        with atomic_directory(out) as staging:
            for tuning, trainable in params.tunings.items():
                first = None  # seed 0's split: its frozen prefix's outputs serve every seed of the tuning
                for seed in range(seeds[tuning]):
                    same_without_noise: dict[
                        float, tuple[FederationResult, float, str]
                    ] = {}  # this seed's ε = ∞ run
                    started = time.perf_counter()
                    split = split_for(
                        init, frames, clips, trainable, classifier_seed(base.seed, seed), first
                    )
                    first = first or split
                    prefix_seconds = (
                        time.perf_counter() - started
                    )  # the frozen prefix (seed 0) or a fresh head: part of each run's cost
                    for aggregation, epsilon in itertools.product(params.aggregations, sigmas):
                        sigma = sigmas[epsilon]
                        if not sigma and seed >= references[tuning]:
                            continue  # federated.reference_seeds: this tuning's references are done
                        name = federated_model(aggregation, tuning, epsilon, params.epsilon)
                        key = name + seed_suffix(seed)
                        federation = federation_of(
                            base, params, sigma, aggregation, randomness, seed
                        )
                        started = time.perf_counter()
                        shared = (
                            same_without_noise.get(epsilon) if not sigma and equal_steps else None
                        )
                        with run.model_run(
                            key,
                            {
                                "privhar.aggregation": aggregation,
                                "privhar.tuning": tuning,
                                "privhar.seed": seed,
                            },
                        ) as model_run:
                            if shared is None:
                                result = _federate(
                                    params.transport,
                                    split,
                                    federation,
                                    [len(shard) for shard in clips.shards],
                                    functools.partial(_print_round, key),
                                )
                                run_seconds = time.perf_counter() - started
                                same_without_noise[epsilon] = (result, run_seconds, aggregation)
                            else:  # FedNova is FedAvg when every client takes the same steps: trained once
                                result, run_seconds, trained_as = shared
                                model_run.set_tags({"privhar.same_model_as": trained_as})
                            for record in result.history:
                                _log_round(model_run, record)
                        seconds = run_seconds + prefix_seconds
                        guarantee = _guarantee(result, sigma, params, randomness)
                        epochs = max(result.participations) * params.local_epochs
                        by_count = {  # a person's ε depends on their video count alone: one per count
                            count: person_epsilon(sigma, epochs, count, params.delta)
                            if sigma
                            else math.inf
                            for count in set(held.values())
                        }
                        by_person = {person: by_count[count] for person, count in held.items()}
                        persons += [
                            {
                                "model": key,
                                "subject": person,
                                "units": held[person],
                                "epsilon_person": round(value, 6),
                            }
                            for person, value in by_person.items()
                        ]
                        rows.append(
                            {
                                **_row(
                                    key,
                                    tuning,
                                    trainable,
                                    aggregation,
                                    params,
                                    split,
                                    result,
                                    sigma,
                                    seconds,
                                ),
                                "unit": guarantee.unit,
                                "relation": guarantee.relation,
                                "epsilon_person_max": round(max(by_person.values()), 6),
                                "randomness": guarantee.randomness,
                                "seed": seed,
                            }
                        )
                        rounds.extend({"model": key, **record} for record in result.history)
                        model = copy.deepcopy(
                            split.model
                        )  # registered after the loop: each key keeps its own weights
                        load_trainable(model, result.state)
                        if (
                            split.statistics is not None
                        ):  # the head learnt on standardised features: the same logits on raw ones
                            fold_standardisation(head_of(model), split.statistics)
                        model.eval()
                        model_config = {
                            **config,
                            "model": key,
                            "method": "federated",
                            "family": "federated",
                            "frames": str(frames),
                            "trainable": trainable,
                            "aggregation": aggregation,
                            "seed": seed,
                            "target_epsilon": epsilon,
                        }
                        folder = seed_folder(staging / name, seed)
                        folder.mkdir(parents=True)
                        torch.save(
                            {"state_dict": model.state_dict(), "config": model_config},
                            folder / "model.pt",
                        )
                        if seed:  # the registered model is seed 0; the other seeds measure the spread of the row
                            continue
                        registrations.append(
                            functools.partial(
                                register_model,
                                model,
                                run=model_run,
                                family="federated",
                                key=key,
                                config=model_config,
                                artifact=key,
                                tags={
                                    "method": "federated",
                                    "aggregation": aggregation,
                                    "trainable": trainable,
                                    CHECKPOINT_TAG: checkpoint_digest(folder / "model.pt"),
                                    **guarantee.as_tags(),
                                    "clients": params.clients,
                                    "rounds": params.rounds,
                                    "epsilon_person_max": repr(rows[-1]["epsilon_person_max"]),
                                    "noise_multiplier": sigma,
                                    "partition": params.partition,
                                },
                            )
                        )
        federated_table(rows, rounds, report, params)
        atomic_write_bytes(report / "federated_persons.csv", csv_bytes(persons))
        for register in registrations:
            register()
        if math.isfinite(
            params.epsilon
        ):  # the models are complete: each is a release made, in the budget's ledger
            record_made(
                params_path,
                [
                    federated_release(aggregation, tuning) + seed_suffix(seed)
                    for tuning in params.tunings
                    for aggregation in params.aggregations
                    for seed in range(seeds[tuning])
                ],
                every_row,
                budget,
            )
    return rows


def _federate(
    transport: str,
    split: Split,
    federation: Federation,
    counts: list[int],
    on_round: Callable[[dict[str, Any]], None],
) -> FederationResult:
    """Algorithm 1 in this process, or as Flower apps on Flower's simulation engine (``federated.transport``)."""
    if transport == "flower":
        from tasks.federated.flower_app import simulate

        return simulate(
            split.tail,
            split.shards,
            split.test,
            federation,
            counts,
            split.full_model_bytes,
            on_round,
        )
    return run_rounds(
        split.tail,
        federation,
        counts,
        in_process(split.tail, split.shards, federation.recipe),
        split.test,
        split.full_model_bytes,
        on_round,
    )


def _log_round(run: StageRun, record: dict[str, Any]) -> None:
    """One round to the model's MLflow run (step = round), from this thread: MLflow's active run is per thread."""
    run.log_metrics(
        {
            name: record[name]
            for name in (
                "accuracy",
                "test_loss",
                "train_loss",
                "epsilon",
                "bytes_per_client",
                "bytes_ratio",
                "seconds",
            )
            if math.isfinite(record[name])
        },
        step=record["round"],
    )


def _print_round(key: str, record: dict[str, Any]) -> None:
    LOG.info(
        f"train-federated: {key}: round {record['round']}: Top-1 {100 * record['accuracy']:.1f} %, "
        f"train loss {record['train_loss']:.3f}, ε {record['epsilon']:.3g} per video, "
        f"{record['bytes_per_client'] / MB:.3f} MB per client ({record['seconds']:.1f} s)"
    )


def _guarantee(
    result: FederationResult, sigma: float, params: FederatedParams, randomness: DpRandomness
) -> PrivacyGuarantee:
    if sigma == 0:
        return NON_PRIVATE
    return PrivacyGuarantee(
        max(result.epsilons),
        params.delta,
        f"{ACCOUNTANT}; sigma={sigma:.6g}, C={params.max_grad_norm}, B={params.batch_size}, "
        f"E={params.local_epochs}, rounds taken part in={max(result.participations)}",
        unit="video",
        relation=REPLACE_ONE,
        randomness=randomness.label,
    )


def _row(
    key: str,
    tuning: str,
    trainable: str,
    aggregation: str,
    params: FederatedParams,
    split: Split,
    result: FederationResult,
    sigma: float,
    seconds: float,
) -> dict[str, Any]:
    last = result.history[-1]
    return {
        "model": key,
        "tuning": tuning,
        "trainable": trainable,
        "aggregation": aggregation,
        "clients": params.clients,
        "rounds": params.rounds,
        "local_epochs": params.local_epochs,
        "accuracy": round(100 * last["accuracy"], 2),
        "runtime_s": round(seconds, 2),
        "mb_per_client_round": round(
            sum(r["bytes_per_client"] for r in result.history) / len(result.history) / MB, 6
        ),
        "full_model_mb": round(split.full_model_bytes / MB, 6),
        "bytes_ratio": round(
            sum(r["bytes_ratio"] for r in result.history) / len(result.history), 6
        ),
        "eq14_dt_over_d": round(split.trainable / split.total, 6),
        "trainable_parameters": split.trainable,
        "parameters": split.total,
        "epsilon": round(max(result.epsilons), 6) if sigma else "inf",
        "paper_eq11_epsilon": round(last["paper_eq11_epsilon"], 6) if sigma else "inf",
        "delta": params.delta,
        "noise_multiplier": round(sigma, 6),
        "max_grad_norm": params.max_grad_norm,
        "accountant": ACCOUNTANT,
    }
