"""One federated training run: each (aggregation, tuning, ε) trained round by round, its releases accounted, logged
and recorded (paper 003, Algorithm 1)."""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tasks.core.dp_params import FederatedParams, tuned
from tasks.core.dp_randomness import DpRandomness
from tasks.core.guarantee import NON_PRIVATE, PrivacyGuarantee
from tasks.core.params import BaseParams
from tasks.core.seeds import seed_folder, seed_suffix
from tasks.core.tracking import StageRun
from tasks.federated.audit import audit_federation
from tasks.federated.client import load_trainable
from tasks.federated.federation import (
    MB,
    federate,
    federated_model,
    federation_of,
    fednova_is_fedavg,
)
from tasks.federated.inputs import Clips, Split, split_for
from tasks.federated.rounds import FederationResult
from tasks.privacy.accounting import REPLACE_ONE
from tasks.privacy.federated_accounting import ACCOUNTANT, calibrate, person_epsilon
from tasks.privacy.gradient_canaries import CSV_COLUMNS as AUDIT_COLUMNS
from tasks.privacy.gradient_canaries import RunAudit, audit_columns
from tasks.video_data.subjects import videos_per_person
from tasks.video_models.head_features import fold_standardisation, head_of
from tasks.video_models.model_registry import CHECKPOINT_TAG, checkpoint_digest, register_model
from tasks.video_models.public_model import classifier_seed

LOG = logging.getLogger(__name__)


@dataclass
class _Trained:
    """What the stage collects over its models: table rows, round records, per-person ε, deferred registrations."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    persons: list[dict[str, Any]] = field(default_factory=list)
    registrations: list[Callable[[], Any]] = field(
        default_factory=list
    )  # registered once the output folder and reports are complete: a failed stage leaves no version


@dataclass
class FederatedRun:
    """One run of the stage: its params and inputs, and the models it trains into ``staging``."""

    base: BaseParams
    params: FederatedParams
    randomness: DpRandomness
    config: dict[str, Any]
    clips: Clips
    init: Path
    frames: Path
    run: StageRun
    staging: Path
    trained: _Trained = field(default_factory=_Trained)
    audits: dict[tuple[str, str], RunAudit] = field(
        default_factory=dict
    )  # (tuning, the aggregation that trains its models) -> the one-run audit of its DP models
    # set by use_recipe(tuning) at the start of each tuning: its recipe, σ per ε, and whether FedNova is FedAvg
    recipe: FederatedParams = field(init=False)
    sigmas: dict[float, float] = field(init=False)
    equal_steps: bool = field(init=False)

    def __post_init__(self) -> None:
        self.held = videos_per_person(self.clips.rows)

    def use_recipe(self, tuning: str) -> None:
        """Train ``tuning``'s models from here on: its recipe (federated.recipe_per_tuning), σ calibrated once for its
        ε and local epochs (every seed's release shares it), and whether FedNova is FedAvg under it."""
        self.recipe = tuned(self.params, tuning)
        compositions = self.recipe.rounds * self.recipe.local_epochs
        epsilon = self.params.epsilon
        self.sigmas = {epsilon: calibrate(epsilon, compositions, self.params.delta), math.inf: 0.0}
        self.equal_steps = fednova_is_fedavg(self.recipe, self.clips.shards)

    def tuning(self, tuning: str, trainable: str, seeds: int, references: int) -> None:
        """Every seed of one tuning: a split (seed 0's frozen prefix serves all), then each aggregation × ε."""
        self.use_recipe(tuning)
        first = None
        for seed in range(seeds):
            started = time.perf_counter()
            split = split_for(
                self.init,
                self.frames,
                self.clips,
                trainable,
                classifier_seed(self.base.seed, seed),
                first,
            )
            if first is None:
                self.audit(split, tuning)
            first = first or split
            # the frozen prefix (seed 0) or a fresh head
            prefix_seconds = time.perf_counter() - started
            trained: dict[
                float, tuple[FederationResult, float, str]
            ] = {}  # this seed's models by ε, with their seconds and aggregation
            for aggregation, epsilon in itertools.product(self.params.aggregations, self.sigmas):
                if not self.sigmas[epsilon] and seed >= references:
                    continue  # federated.reference_seeds: this tuning's references are done
                self.model(
                    split,
                    tuning,
                    trainable,
                    aggregation,
                    epsilon,
                    seed,
                    trained,
                    prefix_seconds,
                )

    def trains(self, aggregation: str) -> str:
        """The aggregation whose run makes ``aggregation``'s models: FedAvg's when FedNova is FedAvg (equal steps)."""
        return self.params.aggregations[0] if self.equal_steps else aggregation

    def audit(self, split: Split, tuning: str) -> None:
        """The one-run audit (:mod:`tasks.federated.audit`) of each aggregation that trains its own models at
        ``federated.epsilon``: one extra federation with gradient canaries, never saved; its ε̂ goes on every DP row,
        run and registered version of the tuning."""
        epsilon, params = self.params.epsilon, self.params
        if math.isinf(epsilon) or not params.audit_canaries:
            return
        for aggregation in dict.fromkeys(map(self.trains, params.aggregations)):
            federation = federation_of(
                self.base, self.recipe, self.sigmas[epsilon], aggregation, self.randomness
            )
            audited = audit_federation(
                split.tail,
                split.shards,
                split.test,
                federation,
                split.full_model_bytes,
                self.randomness.stream("federated", tuning, aggregation, "audit", "canaries"),
                params.audit_canaries,
                params.audit_confidence,
            )
            self.audits[(tuning, aggregation)] = audited
            LOG.info(
                "train-federated: %s-%s at ε %s per client: %s",
                aggregation,
                tuning,
                epsilon,
                audited.summary(),
            )

    def model(
        self,
        split: Split,
        tuning: str,
        trainable: str,
        aggregation: str,
        epsilon: float,
        seed: int,
        trained: dict[float, tuple[FederationResult, float, str]],
        prefix_seconds: float,
    ) -> None:
        """One model: trained (or FedAvg's when FedNova is FedAvg: every client takes the same steps), its row, its
        files."""
        sigma = self.sigmas[epsilon]
        name = federated_model(aggregation, tuning, epsilon, self.params.epsilon)
        key = name + seed_suffix(seed)
        tags = {"privhar.aggregation": aggregation, "privhar.tuning": tuning, "privhar.seed": seed}
        with self.run.model_run(key, "fit", tags) as model_run:
            result, run_seconds, trained_as = self.federate(
                split, aggregation, epsilon, seed, key, trained
            )
            if trained_as:
                model_run.set_tags({"privhar.same_model_as": trained_as})
            for record in result.history:
                _log_round(model_run, record)
            audited = self.audits.get((tuning, trained_as or aggregation)) if sigma else None
            if audited is not None:
                model_run.log_metrics(audited.metrics())
        guarantee = _guarantee(result, sigma, self.recipe, self.randomness)
        _log_mechanism(model_run, sigma, self.recipe, aggregation, trainable, guarantee)
        worst = self.person_epsilons(key, sigma, result)
        self.trained.rows.append(
            {
                **_row(
                    key,
                    tuning,
                    trainable,
                    aggregation,
                    self.recipe,
                    split,
                    result,
                    sigma,
                    run_seconds + prefix_seconds,
                ),
                "unit": guarantee.unit,
                "relation": guarantee.relation,
                "epsilon_person_max": round(worst, 6),
                **audit_columns(audited),
                "randomness": guarantee.randomness,
                "seed": seed,
                "trained_as": trained_as or aggregation,
            }
        )
        self.trained.rounds.extend({"model": key, **record} for record in result.history)
        self.save(
            split, result, name, key, seed, trainable, aggregation, epsilon, guarantee, model_run
        )

    def federate(
        self,
        split: Split,
        aggregation: str,
        epsilon: float,
        seed: int,
        key: str,
        trained: dict[float, tuple[FederationResult, float, str]],
    ) -> tuple[FederationResult, float, str | None]:
        """Algorithm 1's result, its seconds, and the aggregation that trained it when not this one. FedNova is FedAvg
        when every client takes the same steps (its scales τ_eff·p_k/‖a_k‖₁ are then FedAvg's p_k), with or without
        noise: its model at an ε is this seed's FedAvg's, the same release (its guarantee is that model's; training it
        again would only draw other noise for the same mechanism)."""
        if self.equal_steps and epsilon in trained:
            return trained[epsilon]
        sigma = self.sigmas[epsilon]
        started = time.perf_counter()
        result = federate(
            self.params.transport,
            split,
            federation_of(self.base, self.recipe, sigma, aggregation, self.randomness, seed),
            [len(shard) for shard in self.clips.shards],
            functools.partial(_print_round, key),
        )
        seconds = time.perf_counter() - started
        trained[epsilon] = (result, seconds, aggregation)
        return result, seconds, None

    def person_epsilons(self, key: str, sigma: float, result: FederationResult) -> float:
        """Each person's ε for this model (the ``federated_persons.csv`` rows); the largest."""
        epochs = max(result.participations) * self.recipe.local_epochs
        by_count = {  # a person's ε depends on their video count alone: one per count
            count: person_epsilon(sigma, epochs, count, self.params.delta) if sigma else math.inf
            for count in set(self.held.values())
        }
        by_person = {person: by_count[count] for person, count in self.held.items()}
        self.trained.persons += [
            {
                "model": key,
                "subject": person,
                "units": self.held[person],
                "epsilon_person": round(value, 6),
            }
            for person, value in by_person.items()
        ]
        return max(by_person.values())

    def save(
        self,
        split: Split,
        result: FederationResult,
        name: str,
        key: str,
        seed: int,
        trainable: str,
        aggregation: str,
        epsilon: float,
        guarantee: PrivacyGuarantee,
        model_run: Any,
    ) -> None:
        """``<name>[/seed<i>]/model.pt``; seed 0 also queued for the registry (the other seeds measure the spread)."""
        model = copy.deepcopy(split.model)  # each key keeps its own weights
        load_trainable(model, result.state)
        # the head learnt on standardised features: same logits on raw ones
        if split.statistics is not None:
            fold_standardisation(head_of(model), split.statistics)
        model.eval()
        model_config = {
            **self.config,
            "model": key,
            "method": "federated",
            "family": "federated",
            "frames": str(self.frames),
            "trainable": trainable,
            "aggregation": aggregation,
            "seed": seed,
            "target_epsilon": epsilon,
        }
        folder = seed_folder(self.staging / name, seed)
        folder.mkdir(parents=True)
        torch.save({"state_dict": model.state_dict(), "config": model_config}, folder / "model.pt")
        if seed:
            return
        self.trained.registrations.append(
            functools.partial(
                register_model,
                model,
                run=model_run,
                family="federated",
                key=key,
                config=model_config,
                artifact=key,
                tags=self.registry_tags(folder, trainable, aggregation, epsilon, guarantee),
            )
        )

    def registry_tags(
        self,
        folder: Path,
        trainable: str,
        aggregation: str,
        epsilon: float,
        guarantee: PrivacyGuarantee,
    ) -> dict[str, Any]:
        return {
            "method": "federated",
            "aggregation": aggregation,
            "trainable": trainable,
            CHECKPOINT_TAG: checkpoint_digest(folder / "model.pt"),
            **guarantee.as_tags(),
            "clients": self.params.clients,
            "rounds": self.params.rounds,
            "local_epochs": self.recipe.local_epochs,
            "epsilon_person_max": repr(self.trained.rows[-1]["epsilon_person_max"]),
            **{
                key: value
                for key, value in self.trained.rows[-1].items()
                if key in AUDIT_COLUMNS and value != ""
            },
            "noise_multiplier": self.sigmas[epsilon],
            "partition": self.params.partition,
        }


def _log_mechanism(
    run: StageRun,
    sigma: float,
    recipe: FederatedParams,
    aggregation: str,
    trainable: str,
    guarantee: PrivacyGuarantee,
) -> None:
    """The mechanism's parameters and the guarantee as the model run's params, and its δ (ε is its per-round curve)."""
    run.log_mechanism(
        {
            "noise_multiplier": sigma,
            "max_grad_norm": recipe.max_grad_norm,
            "batch_size": recipe.batch_size,
            "local_epochs": recipe.local_epochs,
            "rounds": recipe.rounds,
            "clients": recipe.clients,
            "aggregation": aggregation,
            "trainable": trainable,
        },
        guarantee,
        metrics=("delta",),
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
