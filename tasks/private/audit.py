"""The one-run audit of a private training: gradient-space canaries through the trainer that made the release.

The audit run is one extra training at a release's ε, with the release's recipe, data and trainer (Opacus or the
grouped loop), plus m canary units (:mod:`tasks.privacy.one_run_audit` turns their scores into ε̂). It is never saved
or registered.

The canaries are Dirac gradient canaries (white box: each canary's gradient is chosen, not learnt). The head (``nn.Linear``)
gains m input columns, initialised to 0, and every real unit's input is 0 there, so the real units' forward pass and
gradients are exactly those of the release. Canary j's input is :data:`CANARY_INPUT` on column d + j and 0 elsewhere,
so its gradient lies in that column and the shared bias alone, and no real unit or other canary touches the column.
A canary reaches the model only through the mechanism under audit: the same Poisson sampling, per-unit clipping to C
(its gradient is larger than C: :data:`CANARY_INPUT`) and Gaussian noise as every real unit.

The auditor sees every iterate. It recovers each step's noised gradient by undoing SGD's momentum, and scores canary
j by the likelihood ratio of "in" against "out" of that gradient along j's own clipped gradient at each step's start,
summed over the steps (:func:`canary_scores`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from tasks.core.randomness import DpStream
from tasks.privacy.accounting import REPLACE_ONE
from tasks.privacy.one_run_audit import Audit, audit
from tasks.private.accounting import SgdPrivacy
from tasks.private.methods import Outcome, PrivateData, Recipe, expected_batch
from tasks.private.opacus_loop import StepCallback

CANARY_INPUT = 10.0  # a canary's input on its column: its gradient is |p − e_y|·√(101) ≥ C = 2 while p(y) ≤ 0.8
CANARIES = 1000  # per audit run: more adds guesses, and ε̂ at ε = 8 moved from 2.18 to 2.21 at 5 000 (8 s a run)
Train = Callable[[nn.Module, PrivateData, StepCallback], Outcome]


@dataclass(frozen=True)
class RunAudit:
    """One audit run: ε̂ with how it was reached, and the ε the run's own accountant claims for it."""

    found: Audit
    epsilon_claimed: float
    clipped_share: (
        float  # of the included canaries' steps, those whose gradient reached C (1.0: all)
    )


def widened(head: nn.Linear, canaries: int) -> nn.Linear:
    """A copy of ``head`` with ``canaries`` more input columns, all 0: the same function on inputs 0 there."""
    wide = nn.Linear(head.in_features + canaries, head.out_features, bias=head.bias is not None)
    with torch.no_grad():
        wide.weight.zero_()
        wide.weight[:, : head.in_features] = head.weight
        if head.bias is not None:
            wide.bias.copy_(head.bias)
    return wide.to(head.weight.device)


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


class Iterates:
    """The white-box view: the canary columns and the bias of the head before the run and after every step."""

    def __init__(self, head: nn.Linear, first: int) -> None:
        self.first = first
        self.weights = [head.weight[:, first:].detach().cpu().clone()]
        self.biases = [head.bias.detach().cpu().clone()]

    def __call__(self, step: int, sampled: int, module: nn.Module) -> None:
        self.weights.append(module.weight[:, self.first :].detach().cpu().clone())
        self.biases.append(module.bias.detach().cpu().clone())


def canary_scores(
    iterates: Iterates, labels: torch.Tensor, recipe: Recipe, privacy: SgdPrivacy, normaliser: float
) -> tuple[np.ndarray, torch.Tensor]:
    """(m,) scores, the log-likelihood ratio of "in" against "out" over the steps, and (T, m) whether each canary's
    gradient reached C (clipping bound).

    The step's noised gradient gₜ comes from the iterates with momentum undone (SGD: bₜ = μ bₜ₋₁ + gₜ, θₜ = θₜ₋₁ − η bₜ).
    Along canary j's gradient direction uⱼ,ₜ at θₜ₋₁, in units of C / (the update's normaliser), it reads
    zₜ = sₜ·aₜ + N(0, σ²): aₜ is the canary's clipped gradient along uⱼ,ₜ and sₜ ~ Bernoulli(q) whether the step sampled
    it (when it is in the data). No real unit and no other canary has a gradient there. So the likelihood ratio of one
    step is 1 − q + q·exp((zₜaₜ − aₜ²/2) / σ²), the most powerful test of in against out (Neyman-Pearson); under
    replace-one, "out" is the negated canary, and the score is the ratio of the two mixtures."""
    weights = torch.stack(iterates.weights).double()  # (T + 1, classes, m)
    biases = torch.stack(iterates.biases).double()
    moves = (weights[:-1] - weights[1:]) / recipe.learning_rate  # bₜ
    steps = moves.clone()
    steps[1:] -= recipe.momentum * moves[:-1]  # gₜ
    along, direction, clipped = _clipped_along(weights, biases, labels, recipe, CANARY_INPUT)
    z = (steps * direction).sum(dim=1) * normaliser / recipe.max_grad_norm
    sigma, rate = privacy.noise_multiplier, privacy.sample_rate
    if sigma == 0:
        return z.sum(dim=0).numpy(), clipped

    def log_likelihood(
        signal: torch.Tensor,
    ) -> torch.Tensor:  # of z against no signal, over the steps
        return torch.logaddexp(
            torch.full_like(z, math.log1p(-rate)),
            math.log(rate) + (z * signal - signal**2 / 2) / sigma**2,
        ).sum(dim=0)

    ratio = log_likelihood(along)
    if (
        recipe.relation == REPLACE_ONE
    ):  # out: the negated canary, its clipped gradient along the same direction
        against, _, _ = _clipped_along(weights, biases, labels, recipe, -CANARY_INPUT, direction)
        ratio = ratio - log_likelihood(against)
    return ratio.numpy(), clipped


def _clipped_along(
    weights: torch.Tensor,
    biases: torch.Tensor,
    labels: torch.Tensor,
    recipe: Recipe,
    value: float,
    direction: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(T, m) the clipped gradient of the canary whose input is ``value``, at each step's start, along ``direction``
    (its own when None) in units of C; that direction (T, classes, m); whether its gradient reached C."""
    residual = torch.softmax(value * weights[:-1] + biases[:-1, :, None], dim=1)
    residual[:, labels, torch.arange(len(labels))] -= 1.0  # p − e_y, (T, classes, m)
    size = residual.norm(dim=1)
    column = value * residual  # the gradient's canary column
    if direction is None:
        direction = column / column.norm(dim=1).clamp_min(1e-12)[:, None, :]
    norm = size * math.sqrt(value**2 + 1)  # the whole gradient, bias included
    scale = torch.clamp(recipe.max_grad_norm / norm.clamp_min(1e-12), max=1.0)
    along = scale * (column * direction).sum(dim=1) / recipe.max_grad_norm
    return along, direction, norm >= recipe.max_grad_norm


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
    included = torch.zeros(canaries, dtype=torch.bool)
    included[stream.poisson_sample(canaries, 0.5)] = True
    labels = torch.arange(canaries) % head.out_features
    wide = widened(head, canaries)
    seen = Iterates(wide, head.in_features)
    audited = with_canaries(data, labels, included, recipe.relation)
    outcome = train(wide, audited, seen)
    normaliser = expected_batch(audited.unit_count, recipe)
    scores, clipped = canary_scores(seen, labels, recipe, outcome.privacy, normaliser)
    found = audit(scores, included.numpy(), recipe.delta, confidence)
    inside = clipped[:, included]
    return RunAudit(found, outcome.privacy.epsilon(), float(inside.double().mean()))
