"""The one-run audit of a private training: gradient-space canaries through the trainer that made the release.

The audit run is one extra training at a release's ε, with the release's recipe, data and trainer (Opacus or the
grouped loop), plus m canary units (:mod:`tasks.privacy.one_run_audit` turns their scores into ε̂). It is never saved
or registered.

The canaries are Dirac gradient canaries in the head (:mod:`tasks.privacy.gradient_canaries`, which also scores
them): they reach the model only through the same Poisson sampling, per-unit clipping to C and Gaussian noise as every
real unit. Under MaskDP's replace-one relation the "out" canary is the "in" one negated.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tasks.core.dp_randomness import DpStream
from tasks.privacy.accounting import REPLACE_ONE
from tasks.privacy.fdp_audit import gaussian_trade_off
from tasks.privacy.gradient_canaries import (
    CANARY_INPUT,
    Iterates,
    RunAudit,
    StepMechanism,
    canary_scores,
    widened,
)
from tasks.privacy.one_run_audit import audit, draw_included
from tasks.private.methods import Outcome, PrivateData, Recipe, expected_batch
from tasks.private.opacus_loop import StepCallback

CANARIES = 1000  # per audit run: more adds guesses, and ε̂ at ε = 8 moved from 2.18 to 2.21 at 5 000 (8 s a run)
Train = Callable[[nn.Module, PrivateData, StepCallback], Outcome]


def with_canaries(
    data: PrivateData, labels: torch.Tensor, included: torch.Tensor, relation: str
) -> PrivateData:
    """``data`` (head features, (N, K, d)) with m canary units after the real ones (their inputs padded with m zero
    columns). Under add/remove only the included canaries are units; under replace-one every canary is, and an
    excluded one's private input is the included one's negated, its gradient (nearly) the opposite: the masked
    adjacency replaces the private tokens, and this is the replacement that moves the clipped sum most (2C); the
    public view, empty, is the same. Under person units each canary is a person of its own."""
    count, views, width = data.units.shape
    m = len(labels)
    rows = torch.arange(m) if relation == REPLACE_ONE else torch.nonzero(included).flatten()
    device = data.units.device
    canary = torch.zeros(len(rows), views, width + m, device=device)
    present = included[rows] if relation == REPLACE_ONE else torch.ones(len(rows), dtype=torch.bool)
    canary[torch.arange(len(rows)), :, width + rows] = torch.where(
        present, CANARY_INPUT, -CANARY_INPUT
    ).to(device)[:, None]
    padded = torch.cat([data.units, torch.zeros(count, views, m, device=device)], dim=2)
    public = has_private = has_public = owners = None
    if data.public is not None:
        public = torch.cat(
            [
                torch.cat([data.public, torch.zeros(count, m, device=device)], dim=1),
                torch.zeros(len(rows), width + m, device=device),
            ]
        )
    if data.has_private is not None:
        has_private = torch.cat(
            [data.has_private, torch.ones(len(rows), dtype=torch.bool, device=device)]
        )
    if data.has_public is not None:
        has_public = torch.cat(
            [data.has_public, torch.zeros(len(rows), dtype=torch.bool, device=device)]
        )
    if data.owners is not None:
        owners = torch.cat([data.owners, data.unit_count + torch.arange(len(rows), device=device)])
    return PrivateData(
        torch.cat([padded, canary]),
        torch.cat([data.labels, labels[rows].to(device)]),
        public=public,
        has_private=has_private,
        has_public=has_public,
        owners=owners,
    )


def audit_training(
    train: Train,
    head: nn.Linear,
    data: PrivateData,
    recipe: Recipe,
    stream: DpStream,
    canaries: int = CANARIES,
    confidence: float = 0.95,
) -> RunAudit:
    """One audit run of ``train`` (the release's trainer at its ε, with the audit's own DP streams) on ``data`` with
    ``canaries`` canaries drawn in from ``stream``; ε̂ at ``confidence``."""
    included = draw_included(stream, canaries)
    labels = torch.arange(canaries) % head.out_features
    wide = widened(head, canaries)
    seen = Iterates(wide.weight, wide.bias, head.in_features)
    audited = with_canaries(data, labels, included, recipe.relation)
    outcome = train(wide, audited, seen)
    mechanism = StepMechanism(
        recipe.learning_rate,
        recipe.momentum,
        recipe.max_grad_norm,
        outcome.privacy.noise_multiplier,
        outcome.privacy.sample_rate,
        expected_batch(audited.unit_count, recipe),
        recipe.relation,
    )
    scores, clipped = canary_scores(seen, labels, mechanism)
    gaussian = gaussian_trade_off(outcome.privacy.sample_rate)  # q = 1: the f-DP bound applies too
    found = audit(scores, included.numpy(), recipe.delta, confidence, gaussian)
    inside = clipped[:, included]
    return RunAudit(found, outcome.privacy.epsilon(), float(inside.double().mean()))
