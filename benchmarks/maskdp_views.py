"""``privhar bench maskdp-views``: where MaskDP's ε = ∞ row stands against models of the same inputs.

MaskDP (paper 001, Algorithm 1 lines 5-11) never trains on a whole clip: its clipped gradient sees the private-token
view and its noise-free gradient the avatar-only public view (:mod:`tasks.private.tokens`), while both test
protocols show whole clips (raw for P1, the avatar copy for P2). So its ε = ∞ row is compared here with the head
trained without noise on:

- ``maskdp``: the two views, each clipped to C (the stage's ε = ∞ reference);
- ``maskdp_views_unclipped``: the same two views with no clipping at all — the non-private model that trains the same
  parameters on the same inputs;
- ``private_view_only``: the private-token view alone, clipped;
- ``maskdp_whole_clip``: ``private.maskdp_private_input: whole_clip`` (the clipped gradient sees the whole clip);
- ``dp_sgd_avatar`` and ``avatar_unclipped``: the avatar copy's whole clips, clipped (dp_sgd_avatar's ε = ∞ row) and not.

Head only, on the public model's frozen, standardised features, ``seeds`` heads each (seed 0 the public model's
head), the stage's recipe, seeded randomness: nothing here is a release (no noise, no model kept).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tasks.core.dp_params import PrivateParams
from tasks.core.dp_randomness import DpRandomness
from tasks.core.intervals import interval
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import BaseParams
from tasks.core.params_files import load_plan, load_section
from tasks.core.storage import atomic_write_bytes
from tasks.privacy.budget import derived_plan
from tasks.private.inputs import PreparedInputs, prepare_inputs
from tasks.private.methods import PrivateData, Recipe, train_grouped
from tasks.video_models.clips import labels_of, load_clips, normalise, split_rows
from tasks.video_models.head_features import (
    head_of,
    pooled_features,
    standardise,
    training_head,
)
from tasks.video_models.public_model import classifier_seed, public_model

LOG = logging.getLogger(__name__)
UNCLIPPED = 1e12  # a clipping norm no gradient reaches


def _test_features(inputs: PreparedInputs, folder: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The test split of ``folder`` as the head sees it: pooled, standardised features, and the labels."""
    rows = split_rows(read_manifest(folder / MANIFEST_NAME), "test")
    clips = load_clips(rows, folder, tuple(inputs.config["input_size"]))
    features = pooled_features(inputs.pretrained, normalise(clips).to(inputs.device))
    if inputs.statistics is not None:
        features = standardise(features, inputs.statistics)
    return features, labels_of(rows).to(inputs.device)


def _variants(
    masked: PreparedInputs, whole: PreparedInputs, avatar: PreparedInputs
) -> dict[str, tuple[PreparedInputs, PrivateData, Recipe]]:
    """Each compared variant: the inputs its head is built from, the data it trains on, and its recipe."""
    recipe, data = masked.recipe, masked.data
    unclipped = dataclasses.replace(recipe, max_grad_norm=UNCLIPPED, public_max_grad_norm=UNCLIPPED)
    private_only = PrivateData(data.units, data.labels, has_private=data.has_private)
    return {
        "maskdp": (masked, data, recipe),
        "maskdp_views_unclipped": (masked, data, unclipped),
        "private_view_only": (masked, private_only, recipe),
        "maskdp_whole_clip": (whole, whole.data, whole.recipe),
        "dp_sgd_avatar": (avatar, avatar.data, avatar.recipe),
        "avatar_unclipped": (
            avatar,
            avatar.data,
            dataclasses.replace(avatar.recipe, max_grad_norm=UNCLIPPED),
        ),
    }


def _scores(
    name: str,
    variant: tuple[PreparedInputs, PrivateData, Recipe],
    fresh_head: Callable[[int], torch.nn.Module],
    tests: dict[str, tuple[torch.Tensor, torch.Tensor]],
    seeds: int,
) -> dict[str, list[float]]:
    """Top-1 (%) per test protocol of ``seeds`` heads trained without noise on one variant."""
    inputs, data, recipe = variant
    randomness = DpRandomness("seeded", 0)
    scores: dict[str, list[float]] = {protocol: [] for protocol in tests}
    for seed in range(seeds):
        head = head_of(copy.deepcopy(inputs.pretrained)) if seed == 0 else fresh_head(seed)
        head = training_head(
            head, inputs.statistics
        )  # the k-input head of the public subspace, if any
        public = (
            randomness.stream("bench", name, seed, "public") if data.public is not None else None
        )
        train_grouped(head, data, recipe, 0.0, randomness.stream("bench", name, seed), public)
        with torch.no_grad():
            for protocol, (features, labels) in tests.items():
                correct = (head(features).argmax(1) == labels).float().mean()
                scores[protocol].append(100 * float(correct))
    return scores


def run_bench(
    params_path: Path, frames: Path, avatar: Path, init: Path, seeds: int, out: Path
) -> dict[str, Any]:
    """Train every variant's heads, write ``out`` (JSON: Top-1 mean and 95 % Student-t half-width in percent, per
    protocol) and return it."""
    base = load_section(params_path, "base", BaseParams)
    params = load_section(params_path, "private", PrivateParams).model_copy(
        update={"epsilons": []}  # ε = ∞ only: no release, so no budget to check
    )
    whole_clip = params.model_copy(update={"maskdp_private_input": "whole_clip"})
    plan = load_plan(params_path)  # no finite ε: nothing is checked against it
    shared = (plan.report, plan.privacy, derived_plan(plan))
    arguments = (frames, init, avatar)
    masked = prepare_inputs(base, params, *shared, "maskdp", *arguments)
    whole = prepare_inputs(base, whole_clip, *shared, "maskdp", *arguments)
    on_avatar = prepare_inputs(base, params, *shared, "dp_sgd_avatar", *arguments)
    tests = {"P1": _test_features(masked, frames), "P2": _test_features(masked, avatar)}

    def fresh_head(seed: int) -> torch.nn.Module:
        model = public_model(init, frames, classifier_seed(base.seed, seed))[0]
        return head_of(model.to(masked.device))

    record: dict[str, Any] = {"seeds": seeds, "randomness": "seeded (not private)", "top1": {}}
    for name, variant in _variants(masked, whole, on_avatar).items():
        scores = _scores(name, variant, fresh_head, tests, seeds)
        summaries = {protocol: interval(values) for protocol, values in scores.items()}
        record["top1"][name] = {
            protocol: {"mean": round(summary.mean, 2), "half_width": round(summary.half_width, 2)}
            for protocol, summary in summaries.items()
        }
        LOG.info(
            "bench maskdp-views: %s: %s",
            name,
            ", ".join(
                f"{protocol} {summary.mean:.1f} ± {summary.half_width:.1f} %"
                for protocol, summary in summaries.items()
            ),
        )
    atomic_write_bytes(out, (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode())
    return record
