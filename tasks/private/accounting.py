"""ε of DP-SGD-style training: the Poisson-subsampled Gaussian mechanism composed over steps.

Every private method here (DP-SGD, multi-clip, MaskDP) releases, per step, a sum of clipped
per-unit gradients plus N(0, σ²C²) with each unit (a video) sampled independently with
probability q. Its ε after ``steps`` is what Opacus's accountant of that name computes:

- ``rdp``: Rényi DP of the sampled Gaussian mechanism (Mironov et al. 2019), composed and
  converted to (ε, δ) — the bound Theorem 1 of paper 001 writes out for MaskDP;
- ``prv``: privacy random variables (Gopi et al. 2021), numerically tight;
- ``gdp``: Gaussian DP by the central limit theorem (Dong et al. 2019), an approximation
  that is not an upper bound for few steps (Opacus warns; we say so in the tag).

The tests recompute each RDP ε with Google's ``dp-accounting`` (an independent implementation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from opacus.accountants import create_accountant
from opacus.accountants.utils import get_noise_multiplier

from tasks.core.errors import PrivharError
from tasks.core.privacy import PrivacyGuarantee

ACCOUNTANTS = {
    "rdp": "Opacus RDPAccountant (Rényi DP of the Poisson-sampled Gaussian mechanism)",
    "prv": "Opacus PRVAccountant (privacy random variables)",
    "gdp": "Opacus GaussianAccountant (Gaussian DP, CLT approximation)",
}


@dataclass(frozen=True)
class SgdPrivacy:
    """The parameters that fix a DP-SGD run's ε: σ (noise multiplier), q, steps, δ, accountant."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float
    accountant: str

    def epsilon(self) -> float:
        if self.steps == 0:
            return 0.0
        return epsilon_spent(self.noise_multiplier, self.sample_rate, self.steps, self.delta, self.accountant)

    def guarantee(self, unit: str) -> PrivacyGuarantee:
        """The claim, its accountant and parameters spelled out (registry tags, ledger)."""
        return PrivacyGuarantee(self.epsilon(), self.delta,
                                f"{ACCOUNTANTS[self.accountant]}; sigma={self.noise_multiplier:.6g}, "
                                f"q={self.sample_rate:.6g}, steps={self.steps}; unit: {unit}")


def _check(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise PrivharError(f"private.accountant = {accountant!r} is invalid: expected one of {sorted(ACCOUNTANTS)}")


def epsilon_spent(noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str) -> float:
    """ε after ``steps`` steps of the sampled Gaussian mechanism (σ, q), at δ."""
    _check(accountant)
    if noise_multiplier <= 0:
        return math.inf
    engine = create_accountant(mechanism=accountant)
    engine.history = [(noise_multiplier, sample_rate, steps)]
    return float(engine.get_epsilon(delta=delta))


def calibrate(target_epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """The smallest σ (to Opacus's 0.01 tolerance in ε) whose ε after ``steps`` is at most ``target_epsilon``."""
    _check(accountant)
    if not target_epsilon > 0:
        raise PrivharError(f"private.epsilons: {target_epsilon} is invalid: expected ε > 0")
    try:
        return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=sample_rate,
                                          steps=steps, accountant=accountant))
    except ValueError as error:  # Opacus: "The privacy budget is too low."
        raise PrivharError(f"private: ε = {target_epsilon} at δ = {delta} is unreachable with q = {sample_rate:.4g} "
                           f"over {steps} steps ({error})") from None
