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
Each tuning's DP models are audited once (:mod:`tasks.federated.audit`: one extra federation with gradient
canaries, never saved); ε̂ goes on their rows, MLflow runs and registry tags.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Annotated, Any

import torch

from tasks.core import stage_options as arg
from tasks.core.dp_params import FederatedParams, PrivacyParams
from tasks.core.dp_randomness import DpRandomness
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import BaseParams, ReportParams
from tasks.core.seeds import federated_reference_seeds, federated_seeds, seed_suffix
from tasks.core.storage import atomic_directory, atomic_write_bytes
from tasks.core.tables import csv_bytes
from tasks.core.tracking import stage_run, stage_work
from tasks.federated.federation import check_inputs
from tasks.federated.inputs import load_federated_clips
from tasks.federated.run import FederatedRun
from tasks.federated.table import federated_table
from tasks.privacy.budget import (
    BudgetPlan,
    check_budget,
    check_unprotected,
    federated_release,
    record_made,
)
from tasks.video_models.public_model import public_config

LOG = logging.getLogger(__name__)


def _check_releases(
    privacy: PrivacyParams,
    params: FederatedParams,
    seeds: dict[str, int],
    every_row: list[dict[str, Any]],
    budget: BudgetPlan,
) -> None:
    """privacy.max_epsilon: every seed of every DP row is a release of the clients' videos (both splits: the earlier
    Video-DPRP releases hold a person's test videos too); the ε = ∞ references carry no guarantee."""
    for tuning in params.tunings:
        for aggregation in params.aggregations:
            for seed in range(seeds[tuning]):
                name = federated_release(aggregation, tuning) + seed_suffix(seed)
                check_budget(privacy, name, every_row, budget)
    if math.isfinite(params.epsilon):
        check_unprotected(
            privacy, "the federated reference models at ε = ∞ (the same recipe without noise)"
        )


@stage_work
def train_federated(
    *,
    base: BaseParams,
    params: FederatedParams,
    seeds_from: ReportParams,
    privacy: PrivacyParams,
    budget: BudgetPlan,
    frames: arg.RawFrames,
    init: arg.PublicModel,
    out: Annotated[
        Path, arg.folder("Where to write one <aggregation>-<tuning>/model.pt per run.", "output")
    ],
    report: Annotated[
        Path,
        arg.folder(
            "Where to write federated.md / .csv, rounds.csv, accuracy_by_round.png and metrics.json.",
            "output",
        ),
    ],
) -> list[dict[str, Any]]:
    """Run the stage; return the table rows. ``seeds_from``: the report section (report.seeds); ``budget``: the plan
    every DP row's seeds are checked against."""
    config = public_config(init, frames)
    clips = load_federated_clips(frames, tuple(config["input_size"]), base, params)
    check_inputs(params, clips.shards)
    seeds = {tuning: federated_seeds(params, seeds_from, tuning) for tuning in params.tunings}
    every_row = read_manifest(frames / MANIFEST_NAME)
    _check_releases(privacy, params, seeds, every_row, budget)
    torch.use_deterministic_algorithms(True)
    with stage_run("train-federated", {"base": base, "federated": params}) as run:
        run.log_dataset(frames, "train", "training")
        with atomic_directory(out) as staging:
            job = FederatedRun(
                base,
                params,
                DpRandomness(privacy.randomness, base.seed),
                config,
                clips,
                init,
                frames,
                run,
                staging,
            )
            for tuning, trainable in params.tunings.items():
                references = federated_reference_seeds(params, seeds_from, tuning)
                job.tuning(tuning, trainable, seeds[tuning], references)
        trained = job.trained
        federated_table(trained.rows, trained.rounds, report, params)
        atomic_write_bytes(report / "federated_persons.csv", csv_bytes(trained.persons))
        for register in trained.registrations:
            register()
        # the models are complete: each is a release made. FedNova's are entered even where they are FedAvg's models
        # (equal local steps): the ledger then counts that model twice, an upper bound on what was released
        if math.isfinite(params.epsilon):
            made = [
                federated_release(aggregation, tuning) + seed_suffix(seed)
                for tuning in params.tunings
                for aggregation in params.aggregations
                for seed in range(seeds[tuning])
            ]
            record_made(privacy, made, every_row, budget)
    return trained.rows
