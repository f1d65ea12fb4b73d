"""ε of DP-SGD-style training: the Poisson-subsampled Gaussian mechanism composed over steps.

Every private method here (DP-SGD, multi-clip, MaskDP) releases, per step, a sum of clipped
per-unit gradients plus N(0, σ²C²), each unit (a video, or with ``private.unit: person`` all of a
person's videos) sampled independently with probability q. The relation each method has:

- DP-SGD and multi-clip: **add/remove** of one unit (the sum is divided by the expected batch qN,
  so the step does not reveal the batch size);
- MaskDP (paper 001 Definition 2): masked adjacency *replaces* one video's private tokens —
  **replace-one**, the clipped sum moves by up to 2C. Paper 001's Theorem 1 accounts it with the
  add/remove RDP bound; that number is kept beside ours as ``paper_epsilon``, labelled as the paper's.

ε is computed by :mod:`tasks.privacy.accounting` (default: Opacus's PRV accountant for add/remove,
dp-accounting's PLD for replace-one). The tests recompute each with an independent implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.core.guarantee import PrivacyGuarantee
from tasks.privacy.accounting import (
    ADD_REMOVE,
    Relation,
    calibrate_noise,
    describe,
    group_epsilon,
    sampled_gaussian_epsilon,
)


@dataclass(frozen=True)
class SgdPrivacy:
    """The parameters that fix a DP-SGD run's ε: σ (noise multiplier), q, steps, δ, accountant, relation."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float
    accountant: str
    relation: Relation = ADD_REMOVE

    def epsilon(self) -> float:
        return sampled_gaussian_epsilon(
            self.noise_multiplier,
            self.sample_rate,
            self.steps,
            self.delta,
            accountant=self.accountant,
            relation=self.relation,
        )

    def paper_epsilon(self) -> float:
        """Paper 001 Theorem 1: the add/remove RDP bound of the same (σ, q, steps), whatever the real relation."""
        return sampled_gaussian_epsilon(
            self.noise_multiplier,
            self.sample_rate,
            self.steps,
            self.delta,
            accountant="rdp",
            relation=ADD_REMOVE,
        )

    def group_epsilon(self, group: int) -> float:
        """ε of a person whose data sit in ``group`` units (exact mixture-of-Gaussians PLD, not group·ε)."""
        return group_epsilon(
            self.noise_multiplier,
            self.sample_rate,
            self.steps,
            self.delta,
            group,
            relation=self.relation,
        )

    def describe(self) -> str:
        return (
            f"{describe(self.accountant, self.relation)}; sigma={self.noise_multiplier:.6g}, "
            f"q={self.sample_rate:.6g}, steps={self.steps}"
        )

    def guarantee(self, unit: str, randomness: str) -> PrivacyGuarantee:
        """The claim, its accountant and parameters spelled out (registry tags, ledger)."""
        return PrivacyGuarantee(
            self.epsilon(),
            self.delta,
            self.describe(),
            unit=unit,
            relation=self.relation,
            randomness=randomness,
        )


def calibrate(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str,
    relation: Relation = ADD_REMOVE,
) -> float:
    """The smallest σ (to 0.5 % in ε) whose ε after ``steps`` is at most ``target_epsilon``."""
    return calibrate_noise(
        target_epsilon, delta, sample_rate, steps, accountant=accountant, relation=relation
    )
