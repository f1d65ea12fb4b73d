"""Noise scales σ1 (for P = XR) and σ2 (for Q = PᵀP) of Video-DPRP, two ways.

Budget split (Algorithm 1, lines 1-2): ε1 = b·ε, δ1 = b·δ, ε2 = (1−b)·ε, δ2 = (1−b)·δ;
sequential composition (paper §3.4, after Theorem 4) gives (ε1 + ε2, δ1 + δ2) = (ε, δ).

``paper`` — σ1 and σ2 exactly as Theorems 3 and 4 print them, with θ = 255/√k and
σp = 1/√k (§3.4, lines 106-113 of the text). Two defects are kept, not fixed, in this mode
(``../shared/papers/README.md``): Theorem 4's σ2 = θ·√(√(2·ln 1.25 / δ2) / ε2) is not the
Gaussian mechanism, and θ bounds a change of one pixel value although the paper's
neighbours differ in a whole frame. The numbers are reported as "paper calibration".

``gaussian`` — the Gaussian mechanism σ = Δ·√(2 ln(1.25/δ)) / ε (Dwork & Roth, Thm A.1;
proven for ε < 1, and used as the textbook calibration beyond it — the report says so),
with Δ derived from a stated neighbouring relation:

- ``frame``: X, X' differ in one whole frame (row t), ‖x_t − x'_t‖₂ ≤ 255·√d (the paper's
  definition).  ``pixel``: one pixel value differs by at most 255, ‖Δx‖₂ ≤ 255.
- P = XR changes in one row by ΔxR. For a fixed Δx, ‖ΔxR‖² / ‖Δx‖² ~ χ²_k / k (R has
  N(0, 1/k) entries), and Laurent & Massart's bound χ²_k ≤ k + 2√(k·ln(1/β)) + 2·ln(1/β)
  holds with probability ≥ 1 − β over R, which is drawn independently of the data. So
  Δ1 = ‖Δx‖·√(c_β/k), c_β = k + 2√(k ln(1/β)) + 2 ln(1/β), and β joins δ1.
- Q = PᵀP changes by p'ᵀp' − pᵀp = pᵀe + eᵀp + eᵀe with e = ΔxR, so
  ‖ΔQ‖_F ≤ 2‖p‖‖e‖ + ‖e‖². Every row of X has ‖x‖ ≤ 255·√d, and ‖xR‖ ≤ ‖x‖·s_max(R) with
  s_max(R) ≤ (√d + √k + √(2 ln(1/β)))/√k with probability ≥ 1 − β (Davidson & Szarek), so
  Δ2 = 2·B_p·‖e‖_max + ‖e‖²_max with B_p = 255·√d·s_bound and ‖e‖_max = Δ1; this β and the
  one above join δ2. For ``frame`` e can be as large as p itself, and Δ2 ≈ 3·B_p².
Expect frame-level Gaussian noise to drown the signal: that is a finding, not a bug.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

from tasks.core.errors import PrivharError

Calibration = Literal["paper", "gaussian"]
Neighbour = Literal["frame", "pixel"]
PIXEL_MAX = 255.0


@dataclass(frozen=True)
class NoiseScales:
    """What one video's mechanism used, for the manifest and the privacy ledger."""

    sigma1: float
    sigma2: float
    epsilon: float
    delta: float
    epsilon1: float
    delta1: float
    epsilon2: float
    delta2: float
    calibration: str
    neighbour: str
    failure_probability: float  # of the high-probability sensitivity bounds, already inside delta

    @property
    def accountant(self) -> str:
        """The theorem behind ε, as the registry and ledgers name it."""
        return f"Video-DPRP, {self.calibration}; neighbours: {self.neighbour}"

    def as_dict(self) -> dict[str, float | str]:
        return {**asdict(self), "accountant": self.accountant}


def check_budget(epsilon: float, delta: float, budget_split: float, k: int, d: int) -> None:
    """One line naming the bad parameter and what is allowed."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise PrivharError(f"dprp: epsilon = {epsilon} is invalid: expected a finite number > 0")
    if not 0 < delta < 1:
        raise PrivharError(f"dprp: delta = {delta} is invalid: expected 0 < delta < 1")
    if not 0 < budget_split < 1:
        raise PrivharError(f"dprp: budget_split = {budget_split} is invalid: expected 0 < b < 1")
    if not 0 < k <= d:
        raise PrivharError(f"dprp: k = {k} is invalid: expected 0 < k <= d = {d} (the pixel values per frame)")


def split_budget(epsilon: float, delta: float, budget_split: float) -> tuple[float, float, float, float]:
    """(ε1, δ1, ε2, δ2) of Algorithm 1, lines 1-2."""
    b = budget_split
    return b * epsilon, b * delta, (1 - b) * epsilon, (1 - b) * delta


def chi_square_bound(k: int, beta: float) -> float:
    """Laurent-Massart: P[χ²_k ≥ k + 2√(k ln(1/β)) + 2 ln(1/β)] ≤ β."""
    log_term = math.log(1.0 / beta)
    return k + 2.0 * math.sqrt(k * log_term) + 2.0 * log_term


def paper_scales(epsilon: float, delta: float, budget_split: float, k: int) -> tuple[float, float]:
    """σ1 (Theorem 3) and σ2 (Theorem 4) exactly as printed, θ = 255/√k, σp = 1/√k."""
    e1, d1, e2, d2 = split_budget(epsilon, delta, budget_split)
    theta, sigma_p = PIXEL_MAX / math.sqrt(k), 1.0 / math.sqrt(k)
    sigma1 = (theta * sigma_p * math.sqrt(k + 2 * math.sqrt(k * math.log(2 / d1)) + 2 * math.log(2 / d1))
              * math.sqrt(2 * (math.log(1 / (2 * d1)) + e1)) / e1)
    sigma2 = theta * math.sqrt(math.sqrt(2 * math.log(1.25) / d2) / e2)
    return sigma1, sigma2


def gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """The Gaussian mechanism's σ = Δ·√(2 ln(1.25/δ)) / ε."""
    return sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def gaussian_scales(epsilon: float, delta: float, budget_split: float, k: int, d: int,
                    neighbour: Neighbour) -> tuple[float, float, float, float, float]:
    """(σ1, σ2, δ1 used by the mechanism, δ2 used, total failure probability) for the Gaussian mode.

    Half of each δ_i pays for the high-probability bounds over R (β), half for the mechanism.
    """
    e1, d1, e2, d2 = split_budget(epsilon, delta, budget_split)
    beta1, beta2 = d1 / 2, d2 / 4  # Δ2 uses two bounds over R (‖e‖ and s_max): β each
    row_change = PIXEL_MAX * math.sqrt(d) if neighbour == "frame" else PIXEL_MAX
    delta_p = row_change * math.sqrt(chi_square_bound(k, beta1) / k)
    change_in_q = row_change * math.sqrt(chi_square_bound(k, beta2) / k)
    s_max = (math.sqrt(d) + math.sqrt(k) + math.sqrt(2 * math.log(1 / beta2))) / math.sqrt(k)
    row_norm = PIXEL_MAX * math.sqrt(d) * s_max
    delta_q = 2 * row_norm * change_in_q + change_in_q ** 2
    sigma1 = gaussian_sigma(delta_p, e1, d1 - beta1)
    sigma2 = gaussian_sigma(delta_q, e2, d2 - 2 * beta2)
    return sigma1, sigma2, d1 - beta1, d2 - 2 * beta2, beta1 + 2 * beta2


def noise_scales(*, epsilon: float, delta: float, budget_split: float, k: int, d: int,
                 calibration: Calibration, neighbour: Neighbour) -> NoiseScales:
    """σ1, σ2 and the full privacy record of one video's mechanism."""
    check_budget(epsilon, delta, budget_split, k, d)
    e1, d1, e2, d2 = split_budget(epsilon, delta, budget_split)
    if calibration == "paper":
        sigma1, sigma2 = paper_scales(epsilon, delta, budget_split, k)
        return NoiseScales(sigma1, sigma2, epsilon, delta, e1, d1, e2, d2, "paper (Theorems 3-4 as printed)",
                           "pixel value (what θ = 255/√k bounds)", 0.0)
    sigma1, sigma2, _, _, failure = gaussian_scales(epsilon, delta, budget_split, k, d, neighbour)
    return NoiseScales(sigma1, sigma2, epsilon, delta, e1, d1, e2, d2, "gaussian (Dwork-Roth, Δ derived)",
                       neighbour, failure)
