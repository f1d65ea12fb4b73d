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

import numpy as np
import torch
from torch import nn

from tasks.core import stage_options as arg
from tasks.core.dp_randomness import DpRandomness
from tasks.core.errors import PrivharError
from tasks.core.guarantee import NON_PRIVATE, PrivacyGuarantee, check_delta
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import MANIFEST_NAME, quarantined, read_manifest, resolve_path
from tasks.core.model_registry import CHECKPOINT_TAG, checkpoint_digest, register_model
from tasks.core.params import (
    BaseParams,
    PrivacyParams,
    PrivateParams,
    ReportParams,
    private_seeds,
)
from tasks.core.private_catalogue import CATALOGUE, PRIVATE_METHODS
from tasks.core.seeds import seed_folder, seed_keys, seed_suffix
from tasks.core.storage import atomic_directory, atomic_write_bytes
from tasks.core.tables import csv_bytes
from tasks.core.tracking import StageRun, stage_run, stage_work
from tasks.privacy.accounting import relation_of
from tasks.privacy.budget import BudgetPlan, check_budget, check_unprotected, record_made
from tasks.privacy.gradient_canaries import RunAudit, audit_columns
from tasks.private.accounting import SgdPrivacy
from tasks.private.audit import audit_training
from tasks.private.methods import (
    Outcome,
    PrivateData,
    Recipe,
    noise_for,
    train_dp_sgd,
    train_grouped,
)
from tasks.private.opacus_loop import StepCallback
from tasks.private.tokens import public_pixels, token_views
from tasks.video_data.subjects import privacy_units
from tasks.video_models.clips import (
    augment,
    labels_of,
    load_clips,
    normalise,
    split_rows,
    untouched_by,
)
from tasks.video_models.device import resolve_device
from tasks.video_models.head_features import (
    fold_standardisation,
    head_of,
    pooled_features,
    public_statistics,
    standardise,
)
from tasks.video_models.models import head_name
from tasks.video_models.public_model import classifier_seed, public_model
from tasks.video_models.selective import (
    require_sample_independence,
    select_trainable,
    trainable_count,
)

LOG = logging.getLogger(__name__)


def recipe_of(params: PrivateParams, method: str) -> Recipe:
    return Recipe(
        epochs=params.epochs,
        batch_size=params.batch_size,
        physical_batch_size=params.physical_batch_size,
        learning_rate=params.learning_rate,
        momentum=params.momentum,
        max_grad_norm=params.max_grad_norm,
        delta=params.delta,
        accountant=params.accountant,
        grad_sample_mode=params.grad_sample_mode,
        relation=relation_of(method),
        nproc=params.nproc,
        public_size=params.public_size.get(CATALOGUE[method].unit_under(params.unit)),
        public_max_grad_norm=params.public_max_grad_norm,
    )


def public_masks(rows: list[dict[str, Any]], masks: Path, size: tuple[int, int]) -> torch.Tensor:
    """(N, T, h, w) 0/1 public pixels of ``rows`` at the model's input size, from the anonymize output ``masks``.

    The clips are resized bilinearly (:func:`tasks.video_models.clips.resize`), so a model-input pixel mixes every source pixel
    under the filter's support: it is public only when all of them are avatar (the mask eroded by the support; edge
    pixels partly covered by the avatar are private). A nearest-neighbour resize of the mask put 15 % of the public
    pixels on a mix with real ones. Tested: changing every non-avatar source pixel leaves the public view bit for bit.
    """
    by_id = {row["video_id"]: row for row in read_manifest(masks / MANIFEST_NAME)}
    held = quarantined(masks)
    out = []
    for row in rows:
        stored = by_id.get(row["video_id"], {}).get("mask")
        if row["video_id"] in held:  # no avatar was released for it: nothing of it is public
            out.append(torch.zeros(int(row["n_frames"]), *size))
            continue
        if not stored:
            raise PrivharError(
                f"{masks / MANIFEST_NAME}: video {row['video_id']} has no public mask; maskdp needs the "
                "avatar copy's masks (anonymize@avatar)"
            )
        with np.load(resolve_path(stored, masks)) as arrays:
            mask = torch.from_numpy(arrays["public"]).float()
        out.append(untouched_by(mask < 0.5, size).float())
    return torch.stack(out)


def method_views(
    method: str,
    clips: torch.Tensor,
    labels: torch.Tensor,
    params: PrivateParams,
    generator: torch.Generator,
    masks: torch.Tensor | None,
) -> PrivateData:
    """The inputs one method trains on, from uint8 clips (N, 3, T, h, w)."""
    views_of = CATALOGUE[method].views
    if views_of == "multiclip":
        views = torch.stack(
            [normalise(augment(clips, generator)) for _ in range(params.clips_per_video)], dim=1
        )
        return PrivateData(views, labels)
    if views_of == "tokens":
        assert masks is not None
        public = public_pixels(masks, tuple(params.token), params.public_threshold)
        private_view, public_view = token_views(normalise(clips), public)
        if params.maskdp_private_input == "whole_clip":
            private_view = normalise(clips)
        pixels = public.flatten(1)
        return PrivateData(
            private_view.unsqueeze(1),
            labels,
            public=public_view,
            has_private=~pixels.all(1),
            has_public=pixels.any(1),
        )
    return PrivateData(normalise(clips).unsqueeze(1), labels)


def as_features(
    model: nn.Module, data: PrivateData, statistics: dict[str, torch.Tensor] | None = None
) -> PrivateData:
    """The same data seen by the head alone (``trainable: head``): pooled features of every view, standardised by the
    public ``statistics`` when the public model holds them (the head is folded back after training)."""
    count, clips = data.units.shape[:2]

    def features(inputs: torch.Tensor) -> torch.Tensor:
        pooled = pooled_features(model, inputs)
        return pooled if statistics is None else standardise(pooled, statistics)

    units = features(data.units.flatten(0, 1)).view(count, clips, -1)
    public = features(data.public) if data.public is not None else None
    return PrivateData(
        units,
        data.labels,
        public=public,
        has_private=data.has_private,
        has_public=data.has_public,
        owners=data.owners,
    )  # person units: each person's videos stay one sampled, clipped unit


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


CURVE_POINTS = (
    4  # ε is drawn at this many epochs: each point is one accountant call (Opacus PRV: 0.55 s here)
)


def curve_epochs(epochs: int, points: int = CURVE_POINTS) -> list[int]:
    """The epochs after which a model's ε curve is computed: ``points`` of them, evenly spaced, the last epoch
    included. Every epoch's ε cost 16 accountant calls per model at 16 epochs, 30 s of the first DP-SGD stage.

    >>> curve_epochs(16), curve_epochs(2), curve_epochs(6)
    ([4, 8, 12, 16], [1, 2], [2, 3, 5, 6])
    """
    return sorted({math.ceil(epochs * point / points) for point in range(1, points + 1)})


def epsilon_by_epoch(privacy: SgdPrivacy, epochs: int) -> dict[int, float]:
    """{epoch: ε spent after it} at :func:`curve_epochs`, by the model's own accountant."""
    per_epoch = privacy.steps // epochs
    return {
        epoch: SgdPrivacy(
            privacy.noise_multiplier,
            privacy.sample_rate,
            per_epoch * epoch,
            privacy.delta,
            privacy.accountant,
            privacy.relation,
        ).epsilon()
        for epoch in curve_epochs(epochs)
    }


def _check_inputs(params: PrivateParams, unit: str, count: int, model: nn.Module) -> None:
    counted = f"N = {count} training {unit}s; δ ≥ 1/N allows releasing one {unit} outright"
    check_delta("private.delta", params.delta, count, "N", counted)
    require_sample_independence(model)  # before any clip is loaded


def training_inputs(method: str, frames: Path, avatar: Path | None) -> tuple[Path, Path | None]:
    """The clips a method learns from and the folder of its public masks (None: no MaskDP).

    The catalogue entry says which: ``dp_sgd`` and ``multiclip`` learn from the raw clips; ``dp_sgd_avatar`` from the
    avatar copy (paper 001 Table 2's "anonymized, DP" row); ``maskdp`` from the avatar copy with its masks (paper 001's
    setting); ``maskdp_real`` from the raw clips with the avatar copy's masks.
    """
    entry = CATALOGUE[method]
    if entry.learns_from == "raw" and not entry.masked:
        return frames, None
    if avatar is None:
        raise PrivharError(
            f"train-private: method {method} needs --avatar (the avatar copy and its public masks)"
        )
    return (avatar if entry.learns_from == "avatar" else frames), (avatar if entry.masked else None)


@dataclass
class PreparedInputs:
    """The stage's inputs, once for every ε and seed: the views (or head features), the public model and the units."""

    frames: Path
    every_row: list[dict[str, Any]]
    seeds: dict[float, int]  # ε → training seeds
    unit: str
    units_per_person: dict[str, int]
    pretrained: nn.Module
    config: dict[str, Any]
    recipe: Recipe
    device: torch.device
    data: PrivateData
    head_only: bool  # only the head trains: on the frozen backbone's features
    statistics: Any  # their public standardisation (None: none saved, or not head_only)
    no_public_view: bool


def _training_views(
    method: str,
    rows: list[dict[str, Any]],
    frames: Path,
    masks: Path | None,
    size: tuple[int, int],
    params: PrivateParams,
    seed: int,
) -> tuple[PrivateData, bool]:
    """The method's views of the training clips, and whether no video has a public token (said in the log)."""
    generator = torch.Generator().manual_seed(derive_seed(seed, "private", method, "views"))
    views = public_masks(rows, masks, size) if masks else None
    data = method_views(
        method, load_clips(rows, frames, size), labels_of(rows), params, generator, views
    )
    no_public_view = data.has_public is not None and not bool(data.has_public.any())
    # real footage whose avatars the detectors never drew: said, and trained as what it is
    if no_public_view:
        LOG.warning(
            "train-private: %s found no public token in any of the %d training videos (private.public_threshold = "
            "%s, token %s; the avatar copy's clips without an avatar are counted in results.md): MaskDP is DP-SGD "
            "on the private tokens here",
            method,
            len(rows),
            params.public_threshold,
            params.token,
        )
    return data, no_public_view


def prepare_inputs(
    base: BaseParams,
    params: PrivateParams,
    seeds_from: ReportParams,
    privacy: PrivacyParams,
    budget: BudgetPlan,
    method: str,
    frames: Path,
    init: Path,
    avatar: Path | None,
) -> PreparedInputs:
    """Read and check the inputs, check privacy.max_epsilon for every release before any work, build the views."""
    frames, masks = training_inputs(method, frames, avatar)
    every_row = read_manifest(frames / MANIFEST_NAME)  # the budget counts both splits
    rows = split_rows(every_row, "train")
    seeds = {eps: private_seeds(params, seeds_from, eps) for eps in [*params.epsilons, math.inf]}
    unit = CATALOGUE[method].unit_under(params.unit)
    pretrained, config = public_model(init, frames, classifier_seed(base.seed, 0))
    owners, count, units_per_person = privacy_units(rows, unit)
    _check_inputs(params, unit, count, pretrained)
    for epsilon in params.epsilons:  # every seed is a release
        for seed in range(seeds[epsilon]):
            name = f"{method}-eps{epsilon}{seed_suffix(seed)}"
            check_budget(privacy, name, every_row, budget)
    check_unprotected(privacy, f"the reference {method}-epsinf (the same recipe without noise)")
    size = tuple(config["input_size"])
    device = resolve_device(base.device)
    torch.use_deterministic_algorithms(device.type == "cpu")
    data, no_public_view = _training_views(method, rows, frames, masks, size, params, base.seed)
    data.owners = owners  # None: every video is its own unit
    trainable_names = select_trainable(pretrained, params.trainable)
    head_only = all(name.startswith(head_name(pretrained) + ".") for name in trainable_names)
    pretrained.to(device)
    data = data.to(device)  # per-sample gradients and clipping run there in float32 (no autocast)
    statistics = public_statistics(init) if head_only else None
    if head_only:
        data = as_features(pretrained, data, statistics)
    return PreparedInputs(
        frames,
        every_row,
        seeds,
        unit,
        units_per_person,
        pretrained,
        config,
        recipe_of(params, method),
        device,
        data,
        head_only,
        statistics,
        no_public_view,
    )


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
        head = head_of(inputs.pretrained)  # read only: the audit trains a widened copy of it
        train = functools.partial(
            _audit_run,
            self.method,
            recipe=inputs.recipe,
            epsilon=epsilon,
            randomness=self.randomness,
        )
        stream = self.randomness.stream("private", self.method, epsilon, "audit", "canaries")
        audited = audit_training(
            train,
            head,
            inputs.data,
            inputs.recipe,
            stream,
            params.audit_canaries,
            params.audit_confidence,
        )
        self.audits[epsilon] = audited
        model_run.log_metrics(audited.metrics())
        LOG.info("train-private: %s at ε %s: %s", self.method, epsilon, audited.summary())

    def seed(self, model_run: Any, name: str, epsilon: float, seed: int) -> None:
        """One model: a fresh classifier (seed 0: the public model's), trained, its rows, files and log line."""
        inputs, key = self.inputs, name + seed_suffix(seed)
        model = copy.deepcopy(inputs.pretrained) if seed == 0 else self.fresh_classifier(seed)
        select_trainable(model, self.params.trainable)
        module = head_of(model) if inputs.head_only else model
        with model_run.seed_run(seed) as seed_run:  # the run's times are the seed's training
            outcome = train_one(
                self.method, module, inputs.data, inputs.recipe, epsilon, self.randomness, seed
            )
            _log(seed_run, outcome, inputs.recipe, epsilon)
        # the head learnt on standardised features: same logits on raw ones
        if inputs.statistics is not None:
            fold_standardisation(head_of(model), inputs.statistics)
        guarantee = self.guarantee(epsilon, outcome)
        if seed == 0:  # one run holds every seed of this ε: the mechanism is the same for each
            _log_mechanism(model_run, outcome, inputs.recipe, inputs.seeds[epsilon], guarantee)
        by_person = _person_epsilons(guarantee, outcome.privacy, inputs.units_per_person)
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
        record = _record(
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
        return _guarantee(self.method, outcome.privacy, self.inputs.unit, self.randomness.label)

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


def _guarantee(method: str, privacy: SgdPrivacy, unit: str, randomness: str) -> PrivacyGuarantee:
    entry = CATALOGUE[method]
    # ε holds for the background tokens only; the real person is public
    if entry.masked and entry.learns_from == "raw":
        spent = privacy.guarantee(f"{unit} (masked adjacency)", randomness)
        return PrivacyGuarantee(
            spent.epsilon,
            spent.delta,
            spent.accountant + "; the real person is NOT protected",
            spent.unit,
            spent.relation,
            randomness,
        )
    return privacy.guarantee(
        f"{unit} (masked adjacency, labels public)" if entry.masked else unit, randomness
    )


def _person_epsilons(
    guarantee: PrivacyGuarantee, privacy: SgdPrivacy, units_per_person: dict[int, int]
) -> dict[int, float]:
    """Each person's ε: group privacy over the units holding them (1 unit: the model's own ε)."""
    if not math.isfinite(guarantee.epsilon):
        return {person: math.inf for person in units_per_person}
    if guarantee.epsilon == 0:
        return {person: 0.0 for person in units_per_person}
    groups = {
        units: (guarantee.epsilon if units == 1 else privacy.group_epsilon(units))
        for units in set(units_per_person.values())
    }
    return {person: round(groups[units], 6) for person, units in units_per_person.items()}


def _record(
    method: str,
    key: str,
    target: float,
    guarantee: PrivacyGuarantee,
    outcome: Outcome,
    trainable: int,
    recipe: Recipe,
    epsilon_person_max: float,
) -> dict[str, Any]:
    paper = (
        outcome.privacy.paper_epsilon()
        if CATALOGUE[method].masked and math.isfinite(guarantee.epsilon)
        else None
    )
    return {
        "model": key,
        "method": method,
        "target_epsilon": target,
        "epsilon": round(guarantee.epsilon, 6),
        "delta": guarantee.delta,
        "unit": guarantee.unit,
        "relation": guarantee.relation,
        "epsilon_person_max": epsilon_person_max,
        "paper_epsilon": "" if paper is None else round(paper, 6),
        "randomness": guarantee.randomness,
        "noise_multiplier": round(outcome.privacy.noise_multiplier, 6),
        "sample_rate": round(outcome.privacy.sample_rate, 6),
        "steps": outcome.privacy.steps,
        "max_grad_norm": recipe.max_grad_norm,
        "accountant": guarantee.accountant,
        "trainable_parameters": trainable,
        "final_loss": round(outcome.history[-1]["loss"], 6),
    }


def _log_mechanism(
    run: StageRun, outcome: Outcome, recipe: Recipe, seeds: int, guarantee: PrivacyGuarantee
) -> None:
    """The DP-SGD parameters and the guarantee as the model run's params (its ε and δ are its curves already)."""
    run.log_mechanism(
        {
            "noise_multiplier": outcome.privacy.noise_multiplier,
            "sample_rate": outcome.privacy.sample_rate,
            "steps": outcome.privacy.steps,
            "max_grad_norm": recipe.max_grad_norm,
            "seeds": seeds,
        },
        guarantee,
    )


def _log(run: StageRun, outcome: Outcome, recipe: Recipe, target: float) -> None:
    """One model's run: its loss after each epoch, the ε spent at :func:`curve_epochs`, and the DP-SGD parameters."""
    finite = not math.isinf(target)
    spent = (
        epsilon_by_epoch(outcome.privacy, recipe.epochs)
        if finite and outcome.privacy.noise_multiplier > 0
        else {}
    )
    history = [
        (
            record["epoch"],
            {
                "loss": record["loss"],
                **({"epsilon": spent[record["epoch"]]} if record["epoch"] in spent else {}),
            },
        )
        for record in outcome.history
    ]
    if finite:
        history.append(
            (
                None,
                {
                    "noise_multiplier": outcome.privacy.noise_multiplier,
                    "sample_rate": outcome.privacy.sample_rate,
                    "steps": outcome.privacy.steps,
                    "max_grad_norm": recipe.max_grad_norm,
                    "delta": recipe.delta,
                },
            )
        )
    run.log_history(history)
