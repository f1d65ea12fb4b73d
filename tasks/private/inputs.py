"""What a private training method learns from: the copy (raw or anonymized), the public masks of MaskDP, the
views each method trains on (clips, multi-clip groups, tokens, frozen features), read and checked once before any
release."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tasks.core.dp_params import PrivacyParams, PrivateParams
from tasks.core.errors import PrivharError
from tasks.core.guarantee import check_delta
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import MANIFEST_NAME, quarantined, read_manifest, resolve_path
from tasks.core.params import BaseParams, ReportParams
from tasks.core.private_catalogue import CATALOGUE
from tasks.core.seeds import private_seeds, seed_suffix
from tasks.privacy.accounting import relation_of
from tasks.privacy.budget import BudgetPlan, check_budget, check_unprotected
from tasks.private.methods import PrivateData, Recipe
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
    pooled_features,
    public_statistics,
    standardise,
    with_subspace,
)
from tasks.video_models.models import head_name
from tasks.video_models.public_model import classifier_seed, public_model
from tasks.video_models.selective import require_sample_independence, select_trainable

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
    if statistics is not None:  # the head trains in the public subspace (none: every feature)
        statistics = with_subspace(statistics, params.public_subspace, init / "model.pt")
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
