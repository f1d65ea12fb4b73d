"""Stage ``train-private@<method>``: fine-tune the public model privately, once per ε in ``private.epsilons``.

    public model (pretrain): backbone ─┐
    <frames> or <avatar> train split ──┼─▶ views per method ─▶ [frozen part: pooled features] ─▶ for ε: DP training
    <avatar> masks (MaskDP)  ──────────┘                                                              └─▶ out/<method>-eps<ε>/model.pt

Methods (``private.methods``, one entry each in :mod:`tasks.core.private_catalogue`): ``dp_sgd`` (Opacus) on the
raw clips, ``dp_sgd_person`` (the raw clips, the person as the unit), ``dp_sgd_avatar`` (Opacus) on the avatar copy,
``multiclip`` (K augmented views per video — the embedded videos last 2 s, so
the K clips are K random flips/shifts of it, drawn once), ``maskdp`` (the avatar copy, paper
001's setting) and ``maskdp_real`` (raw clips with the avatar masks: the real person sits in the
*public* tokens, so this row is not private for them — paper 001 Table 2's domain-gap row,
labelled so). The classifier starts fresh (the public model's belongs to the public label set),
so every private model learns its decision from private data under its guarantee. ε = ∞ is
trained too, with the same recipe, clipping kept and no noise: the column each table compares
against.

Units and semantics (``private.unit``): ``video`` — DP-SGD and multi-clip: add/remove of one video;
MaskDP: masked adjacency of Definition 2, one video's private tokens replaced (replace-one), labels
not protected. ``person`` — each sampled person's videos are clipped as one unit: ε per person
directly. Either way each model's per-person ε is also written (``<method>_persons.csv``): in
``video`` mode by group privacy over the person's videos, computed exactly from the composed
mechanism (:func:`tasks.privacy.accounting.group_epsilon`), not m·ε. ε comes from
:mod:`tasks.private.accounting` with the run's σ, q, steps; DP randomness (Poisson samples, noise)
comes from :class:`tasks.core.dp_randomness.DpRandomness` — secret unless ``privacy.randomness: seeded``.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import torch
from torch import nn

from tasks.core import stage_options as arg
from tasks.core.dp_params import PrivacyParams, PrivateParams
from tasks.core.dp_randomness import DpRandomness, DpStream
from tasks.core.errors import PrivharError
from tasks.core.guarantee import NON_PRIVATE, PrivacyGuarantee
from tasks.core.params import BaseParams, ReportParams
from tasks.core.private_catalogue import CATALOGUE, PRIVATE_METHODS
from tasks.core.seeds import seed_folder, seed_keys, seed_suffix
from tasks.core.storage import atomic_directory, atomic_write_bytes
from tasks.core.tables import csv_bytes
from tasks.core.tracking import StageRun, stage_run, stage_work
from tasks.privacy.accounting import relation_of
from tasks.privacy.budget import BudgetPlan, record_made
from tasks.privacy.gradient_canaries import RunAudit, audit_columns
from tasks.private.audit import audit_training
from tasks.private.inputs import PreparedInputs, prepare_inputs
from tasks.private.methods import (
    Outcome,
    PrivateData,
    Recipe,
    noise_for,
    train_dp_sgd,
    train_grouped,
)
from tasks.private.opacus_loop import StepCallback
from tasks.private.records import (
    claimed_guarantee,
    log_mechanism,
    log_release,
    person_epsilons,
    training_record,
)
from tasks.video_models.head_features import fold_standardisation, head_of, training_head
from tasks.video_models.model_registry import CHECKPOINT_TAG, checkpoint_digest, register_model
from tasks.video_models.public_model import classifier_seed, public_model
from tasks.video_models.selective import select_trainable, trainable_count

LOG = logging.getLogger(__name__)


def train_one(
    method: str,
    module: nn.Module,
    data: PrivateData,
    recipe: Recipe,
    epsilon: float,
    randomness: DpRandomness,
    seed: int = 0,
    on_step: StepCallback | None = None,
    purpose: tuple[str, ...] = (),
) -> Outcome:
    """One model at one ε and training seed; its Poisson samples, noise and (MaskDP) public batches from ``randomness``
    (``purpose`` keeps an audit run's streams apart from the releases'); ``on_step`` sees every iterate."""
    key = (method, epsilon, *seed_keys(seed), *purpose)
    stream = randomness.stream("private", *key, "noise")
    public_stream = randomness.stream("private", *key, "public-batches")
    if math.isinf(epsilon):  # the ε = ∞ column: the same recipe, clipping kept, no noise
        return train_grouped(module, data, recipe, 0.0, stream, public_stream, on_step)
    sigma = noise_for(epsilon, data, recipe)  # once per release, for whichever loop trains it
    if CATALOGUE[method].views == "clip" and data.owners is None:  # Opacus, one clip a video
        return train_dp_sgd(
            module,
            data,
            recipe,
            sigma,
            stream,
            randomness.stream("private", *key, "batches"),
            on_step,
        )
    return train_grouped(module, data, recipe, sigma, stream, public_stream, on_step)


@dataclass
class _Trained:
    """What the stage collects: report rows, per-person ε, deferred registrations (after the outputs are complete)."""

    results: list[dict[str, Any]] = field(default_factory=list)
    persons: list[dict[str, Any]] = field(default_factory=list)
    registrations: list[Callable[[], Any]] = field(default_factory=list)


@dataclass
class _PrivateRun:
    """One run of the stage: every seed of every ε of one method, into ``staging``."""

    method: str
    base: BaseParams
    params: PrivateParams
    randomness: DpRandomness
    init: Path
    inputs: PreparedInputs
    staging: Path
    trained: _Trained = field(default_factory=_Trained)
    audits: dict[float, RunAudit] = field(default_factory=dict)

    def epsilon(self, run: StageRun, epsilon: float) -> None:
        """Every seed at ``epsilon`` under one MLflow run: seed 0's curves in it, seed i's in a run nested under it;
        the ε's audit first, so that every seed's row and the registered version carry its ε̂."""
        name = f"{self.method}-eps{epsilon}"
        seeds = self.inputs.seeds[epsilon]
        tags = {"privhar.method": self.method, "privhar.seeds": seeds}
        with run.model_run(name, "fit", tags) as model_run:
            self.audit(model_run, epsilon)
            for seed in range(seeds):
                self.seed(model_run, name, epsilon, seed)

    def audit(self, model_run: StageRun, epsilon: float) -> None:
        """The one-run audit at ``epsilon`` (:mod:`tasks.private.audit`): an extra run of the release's trainer with
        ``private.audit_canaries`` gradient canaries, never saved; its ε̂ logged on the ε's MLflow run."""
        inputs, params = self.inputs, self.params
        if math.isinf(epsilon) or not params.audit_canaries:
            return
        # the canaries are input columns of the head: a trained backbone would mix them
        if not inputs.head_only:
            LOG.warning(
                "train-private: %s at ε %s not audited: the audit's canaries need private.trainable: head",
                self.method,
                epsilon,
            )
            return
        stream = self.randomness.stream("private", self.method, epsilon, "audit", "canaries")
        audited = audit_release(self.method, inputs, params, epsilon, self.randomness, stream)
        self.audits[epsilon] = audited
        model_run.log_metrics(audited.metrics())
        LOG.info("train-private: %s at ε %s: %s", self.method, epsilon, audited.summary())

    def seed(self, model_run: Any, name: str, epsilon: float, seed: int) -> None:
        """One model: a fresh classifier (seed 0: the public model's), trained, its rows, files and log line."""
        inputs, key = self.inputs, name + seed_suffix(seed)
        model = copy.deepcopy(inputs.pretrained) if seed == 0 else self.fresh_classifier(seed)
        select_trainable(model, self.params.trainable)
        module = training_head(head_of(model), inputs.statistics) if inputs.head_only else model
        with model_run.seed_run(seed) as seed_run:  # the run's times are the seed's training
            outcome = train_one(
                self.method, module, inputs.data, inputs.recipe, epsilon, self.randomness, seed
            )
            log_release(seed_run, outcome, inputs.recipe, epsilon)
        # the head learnt on standardised features: same logits on raw ones
        if inputs.statistics is not None:
            fold_standardisation(head_of(model), inputs.statistics, module)
        guarantee = self.guarantee(epsilon, outcome)
        if seed == 0:  # one run holds every seed of this ε: the mechanism is the same for each
            log_mechanism(model_run, outcome, inputs.recipe, inputs.seeds[epsilon], guarantee)
        by_person = person_epsilons(guarantee, outcome.privacy, inputs.units_per_person)
        self.trained.persons += [
            {
                "model": key,
                "subject": person,
                "units": inputs.units_per_person[person],
                "epsilon_person": value,
            }
            for person, value in by_person.items()
        ]
        worst = max(by_person.values(), default=math.inf)
        record = training_record(
            self.method,
            key,
            epsilon,
            guarantee,
            outcome,
            trainable_count(model),
            inputs.recipe,
            worst,
        )
        self.trained.results.append(
            {**record, **audit_columns(self.audits.get(epsilon)), "seed": seed}
        )
        self.save(model, model_run, name, key, epsilon, seed, guarantee, outcome)
        LOG.info(
            "train-private: %s: ε %.4g per %s (target %s), %.4g per person at most, σ %.4g, loss %.4f; "
            "randomness %s",
            key,
            guarantee.epsilon,
            inputs.unit,
            epsilon,
            worst,
            outcome.privacy.noise_multiplier,
            outcome.history[-1]["loss"],
            self.randomness.label,
        )

    def fresh_classifier(self, seed: int) -> nn.Module:
        """The public model with a fresh classifier of training seed ``seed`` (seed 0's is the pretrained one)."""
        seeded = classifier_seed(self.base.seed, seed)
        return copy.deepcopy(
            public_model(self.init, self.inputs.frames, seeded)[0].to(self.inputs.device)
        )

    def guarantee(self, epsilon: float, outcome: Outcome) -> PrivacyGuarantee:
        """∞: none; MaskDP with no private token anywhere: nothing private used (ε = 0); else the accountant's."""
        data = self.inputs.data
        if math.isinf(epsilon):
            return NON_PRIVATE
        if data.has_private is not None and not bool(data.has_private.any()):
            return PrivacyGuarantee(
                0.0,
                0.0,
                "MaskDP: no private token in any video, nothing private is used",
                self.inputs.unit,
                relation_of(self.method),
                self.randomness.label,
            )
        return claimed_guarantee(
            self.method, outcome.privacy, self.inputs.unit, self.randomness.label
        )

    def save(
        self,
        model: nn.Module,
        model_run: Any,
        name: str,
        key: str,
        epsilon: float,
        seed: int,
        guarantee: PrivacyGuarantee,
        outcome: Outcome,
    ) -> None:
        """``<name>[/seed<i>]/model.pt`` from the CPU (it loads anywhere); seed 0 queued for the registry."""
        model.eval().cpu()
        model_config = {
            **self.inputs.config,
            "model": key,
            "method": self.method,
            "family": self.method,
            "frames": str(self.inputs.frames),
            "target_epsilon": epsilon,
            "trainable": self.params.trainable,
            "seed": seed,
        }
        folder = seed_folder(self.staging / name, seed)
        folder.mkdir(parents=True)
        torch.save({"state_dict": model.state_dict(), "config": model_config}, folder / "model.pt")
        if seed:  # the registered model is seed 0; the other seeds measure the spread of the row
            return
        tags = {
            "method": self.method,
            **guarantee.as_tags(),
            "semantics": CATALOGUE[self.method].semantics,
            CHECKPOINT_TAG: checkpoint_digest(folder / "model.pt"),
            "epsilon_person_max": repr(self.trained.results[-1]["epsilon_person_max"]),
            **{
                key: value
                for key, value in audit_columns(self.audits.get(epsilon)).items()
                if value != ""
            },
            "trainable": self.params.trainable,
            "trainable_parameters": trainable_count(model),
            "noise_multiplier": outcome.privacy.noise_multiplier,
            "max_grad_norm": self.inputs.recipe.max_grad_norm,
            "sample_rate": outcome.privacy.sample_rate,
            "steps": outcome.privacy.steps,
        }
        self.trained.registrations.append(
            functools.partial(
                register_model,
                model,
                run=model_run,
                family=self.method,
                key=key,
                config=model_config,
                artifact=key.replace(".", "_"),
                tags=tags,
            )
        )


@stage_work
def train_private(
    *,
    base: BaseParams,
    params: PrivateParams,
    seeds_from: ReportParams,
    privacy: PrivacyParams,
    budget: BudgetPlan,
    method: Annotated[str, arg.value("One of private.methods.", choices=PRIVATE_METHODS)],
    frames: arg.RawFrames,
    init: arg.PublicModel,
    out: Annotated[
        Path, arg.folder("Where to write one <method>-eps<ε>/model.pt per ε.", "output")
    ],
    report: Annotated[
        Path,
        arg.folder(
            "Where to write <method>.csv (ε, δ, σ, q, steps, C, accountant per model).", "output"
        ),
    ],
    avatar: Annotated[
        Path | None,
        arg.folder(
            "The avatar copy (anonymize@avatar): maskdp learns from it, both MaskDP methods use its public masks.",
            "input",
        ),
    ] = None,
) -> list[dict[str, Any]]:
    """Run the stage: one model per ε of ``private.epsilons`` (and ∞) and training seed (``private.seeds_at_epsilon``,
    else ``private.seeds``, else ``report.seeds``); return the report rows.

    Seed i ≥ 1 of ``<method>-eps<ε>`` is ``<method>-eps<ε>/seed<i>/model.pt`` (key ``<method>-eps<ε>-seed<i>``):
    a fresh classifier and fresh DP randomness; the frozen backbone's features and the method's views are shared.
    Each seed of a finite ε is its own DP release of the training set (the budget and the ledger count it).

    ``frames`` are the raw clips, ``avatar`` the avatar copy (for the MaskDP methods); ``seeds_from`` the report section
    (report.seeds); ``budget`` the plan every finite ε's seeds are checked against.
    """
    if method not in params.methods:
        raise PrivharError(
            f"train-private: method {method!r} is not one of private.methods = {params.methods}"
        )
    inputs = prepare_inputs(base, params, seeds_from, privacy, budget, method, frames, init, avatar)
    with stage_run(f"train-private@{method}", {"base": base, "private": params}) as run:
        run.log_dataset(inputs.frames, "train", "training")
        public_view = {"privhar.public_view": "none"} if inputs.no_public_view else {}
        run.set_tags({"privhar.device": str(inputs.device), **public_view})
        with atomic_directory(out) as staging:
            job = _PrivateRun(
                method,
                base,
                params,
                DpRandomness(privacy.randomness, base.seed),
                init,
                inputs,
                staging,
            )
            for epsilon in [*params.epsilons, math.inf]:
                job.epsilon(run, epsilon)
        results = job.trained.results
        atomic_write_bytes(report / f"{method}.csv", csv_bytes(results))
        atomic_write_bytes(report / f"{method}_persons.csv", csv_bytes(job.trained.persons))
        for register in job.trained.registrations:
            register()
        # the models are complete: each finite ε's seed is a release made, in the budget's ledger
        made = [result["model"] for result in results if math.isfinite(result["target_epsilon"])]
        record_made(privacy, made, inputs.every_row, budget)
    return results


def audit_release(
    method: str,
    inputs: PreparedInputs,
    params: PrivateParams,
    epsilon: float,
    randomness: DpRandomness,
    canaries: DpStream,
) -> RunAudit:
    """One audit run of ``method``'s release at ``epsilon`` as the stage makes it: its trainer on its own streams, on a
    widened copy of the head (read only), with ``params.audit_canaries`` canaries drawn from ``canaries``."""
    train = functools.partial(
        _audit_run, method, recipe=inputs.recipe, epsilon=epsilon, randomness=randomness
    )
    return audit_training(
        train,
        training_head(head_of(inputs.pretrained), inputs.statistics),
        inputs.data,
        inputs.recipe,
        canaries,
        params.audit_canaries,
        params.audit_confidence,
    )


def _audit_run(
    method: str,
    module: nn.Module,
    data: PrivateData,
    on_step: StepCallback,
    *,
    recipe: Recipe,
    epsilon: float,
    randomness: DpRandomness,
) -> Outcome:
    """The audit's run: the release's trainer at ``epsilon``, on DP streams of its own."""
    return train_one(method, module, data, recipe, epsilon, randomness, 0, on_step, ("audit",))
