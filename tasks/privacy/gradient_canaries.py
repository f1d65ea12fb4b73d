"""Dirac gradient canaries in a linear head, and the white-box score of each from a DP-SGD run's iterates.

Shared by the one-run audits of train-private (:mod:`tasks.private.audit`) and train-federated
(:mod:`tasks.federated.audit`); :mod:`tasks.privacy.one_run_audit` turns the scores into ε̂.

The head (``nn.Linear``) gains m input columns, initialised to 0, and every real unit's input is 0 there, so the real
units' forward pass and gradients are exactly those of the release. Canary j's input is :data:`CANARY_INPUT` on
column d + j and 0 elsewhere, so its gradient lies in that column and the shared bias alone, and no real unit or other
canary touches the column. A canary reaches the model only through the mechanism under audit: its sampling, per-unit
clipping to C (its gradient is larger than C: :data:`CANARY_INPUT`) and Gaussian noise, as every real unit.

The auditor sees every iterate. It recovers each step's noised gradient by undoing SGD's momentum, and scores canary
j by the likelihood ratio of "in" against "out" of that gradient along j's own clipped gradient at each step's start,
summed over the steps (:func:`canary_scores`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from tasks.privacy.accounting import REPLACE_ONE
from tasks.privacy.one_run_audit import COLUMNS, FDP_COLUMNS, Audit

# a canary's input on its column: its gradient is |p − e_y|·√101, at least C while p(y) ≤ 0.8 (C = 2, train-private) or
# ≤ 0.9 (C = 1, train-federated)
CANARY_INPUT = 10.0
ATTACK = "one run, gradient canaries, white box (every iterate), likelihood-ratio score"
CSV_COLUMNS = (*COLUMNS, *FDP_COLUMNS, "audit_attack")


@dataclass(frozen=True)
class RunAudit:
    """One audit run: ε̂ with how it was reached, and the ε the run's own accountant claims for it."""

    found: Audit
    epsilon_claimed: float
    clipped_share: (
        float  # of the included canaries' steps, those whose gradient reached C (1.0: all)
    )

    def metrics(self) -> dict[str, float]:
        """The MLflow metrics of the audited release's run."""
        fdp = {} if self.found.fdp is None else {"epsilon_audited_fdp": self.found.fdp.epsilon}
        return {
            "epsilon_audited": self.found.epsilon_audited,
            **fdp,
            "epsilon_audit_run": self.epsilon_claimed,
        }

    def summary(self) -> str:
        """The stage's log line: ε̂ with how it was reached, the audit run's own ε and the clipped share."""
        return (
            f"{self.found.summary()}; the audit run's own ε {self.epsilon_claimed:.4g}; canary gradients clipped in "
            f"{100 * self.clipped_share:.0f}% of their steps"
        )


def audit_columns(audited: RunAudit | None) -> dict[str, object]:
    """The audit of a row's ε as its CSV columns (empty where none ran: ε = ∞, or no audit)."""
    if audited is None:
        return {key: "" for key in CSV_COLUMNS}
    return {**audited.found.columns(), **audited.found.fdp_columns(), "audit_attack": ATTACK}


@dataclass(frozen=True)
class StepMechanism:
    """What scoring a canary needs of the DP-SGD that ran: SGD's η and μ, the clipping bound C, σ, the chance that a
    step holds a given unit, the update's normaliser (the sum of clipped gradients is divided by it) and the
    neighbouring relation."""

    learning_rate: float
    momentum: float
    max_grad_norm: float
    noise_multiplier: float
    sample_rate: float
    normaliser: float
    relation: str


def widened(head: nn.Linear, canaries: int) -> nn.Linear:
    """A copy of ``head`` with ``canaries`` more input columns, all 0: the same function on inputs 0 there."""
    wide = nn.Linear(head.in_features + canaries, head.out_features, bias=head.bias is not None)
    with torch.no_grad():
        wide.weight.zero_()
        wide.weight[:, : head.in_features] = head.weight
        if head.bias is not None:
            wide.bias.copy_(head.bias)
    return wide.to(head.weight.device)


class Iterates:
    """The white-box view: a widened head's canary columns (from ``first`` on) and its bias at the start and after
    every step."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, first: int) -> None:
        self.first = first
        self.weights = [weight[:, first:].detach().cpu().clone()]
        self.biases = [bias.detach().cpu().clone()]

    def record(self, head: nn.Linear) -> None:
        self.weights.append(head.weight[:, self.first :].detach().cpu().clone())
        self.biases.append(head.bias.detach().cpu().clone())

    def __call__(self, step: int, sampled: int, head: nn.Linear) -> None:
        """train-private's step callback (:data:`tasks.private.opacus_loop.StepCallback`)."""
        self.record(head)


def canary_scores(
    iterates: Iterates, labels: torch.Tensor, mechanism: StepMechanism
) -> tuple[np.ndarray, torch.Tensor]:
    """(m,) scores, the log-likelihood ratio of "in" against "out" over the steps, and (T, m) whether each canary's
    gradient reached C (clipping bound).

    The step's noised gradient gₜ comes from the iterates with momentum undone (SGD: bₜ = μ bₜ₋₁ + gₜ, θₜ = θₜ₋₁ − η bₜ).
    Along canary j's gradient direction uⱼ,ₜ at θₜ₋₁, in units of C / (the update's normaliser), it reads
    zₜ = sₜ·aₜ + N(0, σ²): aₜ is the canary's clipped gradient along uⱼ,ₜ and sₜ ~ Bernoulli(q) whether the step sampled
    it (when it is in the data). No real unit and no other canary has a gradient there. So the likelihood ratio of one
    step is 1 − q + q·exp((zₜaₜ − aₜ²/2) / σ²), the most powerful test of in against out (Neyman-Pearson); under
    replace-one, "out" is the negated canary, and the score is the ratio of the two mixtures. (Under shuffled batches
    a canary is in exactly one step of an epoch; the per-step mixture is then an approximation of the likelihood,
    still a valid score: the audit's soundness holds for any score.)"""
    weights = torch.stack(iterates.weights).double()  # (T + 1, classes, m)
    biases = torch.stack(iterates.biases).double()
    moves = (weights[:-1] - weights[1:]) / mechanism.learning_rate  # bₜ
    steps = moves.clone()
    steps[1:] -= mechanism.momentum * moves[:-1]  # gₜ
    clip = mechanism.max_grad_norm
    along, direction, clipped = _clipped_along(weights, biases, labels, clip, CANARY_INPUT)
    z = (steps * direction).sum(dim=1) * mechanism.normaliser / clip
    sigma, rate = mechanism.noise_multiplier, mechanism.sample_rate
    if sigma == 0:
        return z.sum(dim=0).numpy(), clipped

    def log_likelihood(
        signal: torch.Tensor,
    ) -> torch.Tensor:  # of z against no signal, over the steps
        return torch.logaddexp(
            torch.full_like(z, math.log1p(-rate) if rate < 1 else -math.inf),  # q = 1: every step
            math.log(rate) + (z * signal - signal**2 / 2) / sigma**2,
        ).sum(dim=0)

    ratio = log_likelihood(along)
    if mechanism.relation == REPLACE_ONE:  # out: the negated canary, along the same direction
        against, _, _ = _clipped_along(weights, biases, labels, clip, -CANARY_INPUT, direction)
        ratio = ratio - log_likelihood(against)
    return ratio.numpy(), clipped


def _clipped_along(
    weights: torch.Tensor,
    biases: torch.Tensor,
    labels: torch.Tensor,
    clip: float,
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
    scale = torch.clamp(clip / norm.clamp_min(1e-12), max=1.0)
    along = scale * (column * direction).sum(dim=1) / clip
    return along, direction, norm >= clip
