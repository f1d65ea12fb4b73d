"""Noise scales σ1 (for P = XR) and σ2 (for Q = PᵀP) of Video-DPRP, two ways.

Budget split (Algorithm 1, lines 1-2): ε1 = b·ε, δ1 = b·δ, ε2 = (1−b)·ε, δ2 = (1−b)·δ;
sequential composition (paper §3.4, after Theorem 4) gives (ε1 + ε2, δ1 + δ2) = (ε, δ).

``paper`` — σ1 and σ2 exactly as Theorems 3 and 4 print them, with θ = 255/√k and
σp = 1/√k (§3.4, lines 106-113 of the text). Two defects are kept, not fixed, in this mode
(``../shared/papers/README.md``): Theorem 4's σ2 = θ·√(√(2·ln 1.25 / δ2) / ε2) is not the
Gaussian mechanism, and σ1 = θ·σp·√(χ²-bound)·(…) divides by √k twice, so what the calibration
covers is **an ℓ2 change of one frame of at most 255/√k grey levels** (9.2 at k = 768) — neither
one pixel value (255) nor one frame (255·√d). Beside it we report the ε the *same* noise gives
for a one-pixel and for a whole-frame change (:func:`change_epsilon`, exact Gaussian DP of P's
noise at δ1; at ε = 2, k = 768: about 85 and 1.8·10⁶). Theorem 3's χ² bound holds with
probability 1 − δ1/2 (its ln(2/δ1)): that failure probability is added to the recorded δ.

**The headline ε holds for that unit and the R actually used.** Theorem 3 bounds ‖ΔxR‖ by the χ²
bound, which needs R secret and drawn after the neighbours are fixed. With a public R (``projection:
shared``, or any R a seed regenerates) Δx can lie along R's top singular direction, and only the
operator norm s_max(R) ≤ (√d + √k + √(2 ln(1/β)))/√k bounds it (≈ 8 at d = 36 864, k = 768): the
paper's σ1 then gives ε ≈ 12 for its own unit where it prints ε1 = 1.6. So ``epsilon`` (what every
table, plot, registry tag and claim uses) is the exact Gaussian-DP ε (Dong-Roth-Su) at δ of P's
noise, and of Q's where Q is used (rank r < k; μ composed in quadrature), for a frame change of ℓ2
norm 255/√k under the bound that holds for R (χ² for a secret R, the operator norm for a public one);
``paper_epsilon`` keeps the ε the paper's theorems print for the same σ, labelled as the paper's.

``gaussian`` — the Gaussian mechanism σ = Δ·√(2 ln(1.25/δ)) / ε (Dwork & Roth, Thm A.1;
proven for ε < 1, and used as the textbook calibration beyond it — the report says so),
with Δ derived from a stated neighbouring relation (replace-one: a frame's or a pixel's content
replaced, the video's length fixed):

- ``frame``: X, X' differ in one whole frame (row t), ‖x_t − x'_t‖₂ ≤ 255·√d (the paper's
  definition).  ``pixel``: one pixel value differs by at most 255, ‖Δx‖₂ ≤ 255.
- P = XR changes in one row by ΔxR. How large ‖ΔxR‖ can be depends on who knows R:
  * R **secret** (``projection: per_video`` drawn from OS entropy under ``privacy.randomness:
    secure``): for neighbours fixed before R is drawn, ‖ΔxR‖² / ‖Δx‖² ~ χ²_k / k, and
    Laurent & Massart's χ²_k ≤ k + 2√(k·ln(1/β)) + 2·ln(1/β) holds with probability ≥ 1 − β;
  * R **public** (``shared``, or any R regenerable from ``base.seed``): Δx may be chosen after R,
    along its top singular direction (an adversarial frame change reaches 1221 against the χ²
    bound 215); only the operator norm holds for every Δx: s_max(R) ≤ (√d + √k + √(2 ln(1/β)))/√k
    with probability ≥ 1 − β (Davidson & Szarek).
  So Δ1 = ‖Δx‖·(√(c_β/k) or s_bound), and β joins δ1.
- Q = PᵀP changes by p'ᵀp' − pᵀp = pᵀe + eᵀp + eᵀe with e = ΔxR, so
  ‖ΔQ‖_F ≤ 2‖p‖‖e‖ + ‖e‖². Every row of X has ‖x‖ ≤ 255·√d, and ‖xR‖ ≤ ‖x‖·s_max(R), so
  Δ2 = 2·B_p·‖e‖_max + ‖e‖²_max with B_p = 255·√d·s_bound and ‖e‖_max = Δ1; this β and the
  one above join δ2. For ``frame`` e can be as large as p itself, and Δ2 ≈ 3·B_p².

**The person.** A person in v videos of T frames changes every frame of them. P's rows get
independent noise, so the change of a whole video is a Gaussian mechanism with sensitivity
‖ΔX R‖_F ≤ √T·255·√d·s_bound; v videos compose: μ = √(vT)·255·√d·s_bound/σ1 (exact Gaussian DP,
Dong-Roth-Su), plus, where Q is used (rank r < k), μ_Q = √v·T·Δ2(frame)/σ2 in quadrature
(:meth:`NoiseScales.person_epsilon`).
Expect frame-level Gaussian noise to drown the signal: that is a finding, not a bug.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal, NamedTuple

from tasks.core.dp_params import DprpParams
from tasks.core.errors import PrivharError
from tasks.privacy.accounting import REPLACE_ONE, gaussian_person_epsilon, gdp_epsilon

Calibration = Literal["paper", "gaussian"]
Neighbour = Literal["frame", "pixel"]
PIXEL_MAX = 255.0


@dataclass(frozen=True)
class NoiseScales:
    """What one video's mechanism used, for the manifest and the privacy ledger."""

    sigma1: float
    sigma2: float
    epsilon: float
    delta: float  # total, the failure probability of the sensitivity bounds included
    epsilon1: float
    delta1: float
    epsilon2: float
    delta2: float
    calibration: str
    neighbour: str  # what ε covers: the unit of the claim
    failure_probability: float  # of the high-probability sensitivity bounds, already inside delta
    sensitivity_bound: str  # χ² (secret R) or operator norm (public R)
    epsilon_one_pixel: float  # the ε P's noise gives for one pixel value changed by 255 (at δ1)
    epsilon_whole_frame: float  # … for a whole frame changed (255·√d)
    mu_per_frame: (
        float  # Gaussian DP of P's noise for one whole frame changed, any R (operator norm)
    )
    mu_q_per_video: float  # … of Q's noise for a whole video changed; 0 when Q is not used (r = k)
    relation: str = REPLACE_ONE
    paper_delta: float | None = None  # the δ the paper's calibration names (paper mode)
    paper_epsilon: float | None = (
        None  # the ε Theorems 3-4 print for this σ (paper mode); ``epsilon`` is what holds
    )
    target_epsilon: float = math.nan  # dprp.epsilons' value that keys this copy (dprp@<ε>)

    @property
    def label(self) -> str:
        """The row name of tables and plots: the ε that holds, the paper's beside it where it differs."""
        if self.paper_epsilon is None:
            return f"Video-DPRP ε = {self.epsilon:.3g}"
        return f"Video-DPRP ε = {self.epsilon:.3g} (paper's ε = {self.paper_epsilon:g})"

    @property
    def accountant(self) -> str:
        """The theorem behind ε, as the registry and ledgers name it."""
        return f"Video-DPRP, {self.calibration}; covers: {self.neighbour}; sensitivity: {self.sensitivity_bound}"

    @property
    def unit(self) -> str:
        return self.neighbour

    def person_epsilon(self, videos: int, frames: int) -> tuple[float, float]:
        """(ε, δ) for a person in ``videos`` videos of ``frames`` frames each (module docstring, "The person")."""
        return gaussian_person_epsilon(
            mu_per_frame=self.mu_per_frame,
            mu_q_per_video=self.mu_q_per_video,
            delta=self.delta,
            failure=self.failure_probability,
            videos=videos,
            frames=frames,
        )

    def as_dict(self) -> dict[str, float | str]:
        return {**asdict(self), "accountant": self.accountant, "unit": self.unit}


def check_budget(epsilon: float, delta: float, budget_split: float, k: int, d: int) -> None:
    """One line naming the bad parameter and what is allowed."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise PrivharError(f"dprp: epsilon = {epsilon} is invalid: expected a finite number > 0")
    if not 0 < delta < 1:
        raise PrivharError(f"dprp: delta = {delta} is invalid: expected 0 < delta < 1")
    if not 0 < budget_split < 1:
        raise PrivharError(f"dprp: budget_split = {budget_split} is invalid: expected 0 < b < 1")
    if not 0 < k <= d:
        raise PrivharError(
            f"dprp: k = {k} is invalid: expected 0 < k <= d = {d} (the pixel values per frame)"
        )


def check_total_delta(delta: float, total: float, label: str) -> None:
    """A release whose total δ (δ plus the probability that the projection's bound fails) reaches 1 guarantees
    nothing: one line naming the parameter."""
    if total >= 1:
        raise PrivharError(
            f"dprp: delta = {delta} gives the release a total δ of {total:.4g} (δ plus the probability that the "
            f"projection's bound fails, {label}): expected < 1, and far below 1 / the number of people; choose a "
            "smaller delta"
        )


def split_budget(
    epsilon: float, delta: float, budget_split: float
) -> tuple[float, float, float, float]:
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
    sigma1 = (
        theta
        * sigma_p
        * math.sqrt(k + 2 * math.sqrt(k * math.log(2 / d1)) + 2 * math.log(2 / d1))
        * math.sqrt(2 * (math.log(1 / (2 * d1)) + e1))
        / e1
    )
    sigma2 = theta * math.sqrt(math.sqrt(2 * math.log(1.25) / d2) / e2)
    return sigma1, sigma2


def gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """The Gaussian mechanism's σ = Δ·√(2 ln(1.25/δ)) / ε."""
    return sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def operator_norm_bound(d: int, k: int, beta: float) -> float:
    """Davidson-Szarek: s_max(R) ≤ (√d + √k + √(2 ln(1/β)))/√k with probability ≥ 1 − β, R ~ N(0, 1/k)^{d×k}."""
    return (math.sqrt(d) + math.sqrt(k) + math.sqrt(2 * math.log(1 / beta))) / math.sqrt(k)


def row_factor(k: int, d: int, beta: float, secret_projection: bool) -> float:
    """‖ΔxR‖ ≤ factor·‖Δx‖ with probability ≥ 1 − β: χ² for a secret R, the operator norm for a public one."""
    return (
        math.sqrt(chi_square_bound(k, beta) / k)
        if secret_projection
        else operator_norm_bound(d, k, beta)
    )


def change_epsilon(change: float, factor: float, sigma1: float, delta: float) -> float:
    """ε of P's noise σ1 for a frame change of ℓ2 norm ``change`` (exact Gaussian DP at ``delta``)."""
    return gdp_epsilon(change * factor / sigma1, delta)


def gaussian_scales(
    epsilon: float,
    delta: float,
    budget_split: float,
    k: int,
    d: int,
    neighbour: Neighbour,
    secret_projection: bool,
) -> tuple[float, float, float, float, float]:
    """(σ1, σ2, δ1 used by the mechanism, δ2 used, total failure probability) for the Gaussian mode.

    Half of each δ_i pays for the high-probability bounds over R (β), half for the mechanism.
    """
    e1, d1, e2, d2 = split_budget(epsilon, delta, budget_split)
    beta1, beta2 = d1 / 2, d2 / 4  # Δ2 uses two bounds over R (‖e‖ and s_max): β each
    row_change = PIXEL_MAX * math.sqrt(d) if neighbour == "frame" else PIXEL_MAX
    delta_p = row_change * row_factor(k, d, beta1, secret_projection)
    change_in_q = row_change * row_factor(k, d, beta2, secret_projection)
    row_norm = PIXEL_MAX * math.sqrt(d) * operator_norm_bound(d, k, beta2)
    delta_q = 2 * row_norm * change_in_q + change_in_q**2
    sigma1 = gaussian_sigma(delta_p, e1, d1 - beta1)
    sigma2 = gaussian_sigma(delta_q, e2, d2 - 2 * beta2)
    return sigma1, sigma2, d1 - beta1, d2 - 2 * beta2, beta1 + 2 * beta2


class _Calibrated(NamedTuple):
    """One calibration's σ1, σ2 and what its record says: the failure probability, the label, what one change
    covers, the δ and the ε that hold."""

    sigma1: float
    sigma2: float
    failure: float
    label: str
    covers: str
    record_delta: float
    holds: float


def _paper_calibration(
    epsilon: float,
    delta: float,
    budget_split: float,
    k: int,
    d: int,
    secret_projection: bool,
    full_rank: bool,
) -> _Calibrated:
    """Theorems 3-4 as printed, and the ε their σ really give for the paper's unit (paper_unit_epsilon)."""
    _, d1, _, d2 = split_budget(epsilon, delta, budget_split)
    sigma1, sigma2 = paper_scales(epsilon, delta, budget_split, k)
    # Theorem 3's χ² bound (β = δ1/2); Q's two bounds
    failure = d1 / 2 if full_rank else d1 / 2 + d2 / 2
    return _Calibrated(
        sigma1,
        sigma2,
        failure,
        "paper (Theorems 3-4 as printed)",
        "an l2 change of one frame of at most 255/sqrt(k) grey levels (paper calibration)",
        delta + failure,
        paper_unit_epsilon(sigma1, sigma2, delta, d1, d2, k, d, secret_projection, full_rank),
    )


def _gaussian_calibration(
    epsilon: float,
    delta: float,
    budget_split: float,
    k: int,
    d: int,
    neighbour: Neighbour,
    secret_projection: bool,
) -> _Calibrated:
    """Each σ_i the Gaussian mechanism's for (ε_i, δ_i) at the derived Δ_i: ε holds by basic composition."""
    sigma1, sigma2, _, _, failure = gaussian_scales(
        epsilon, delta, budget_split, k, d, neighbour, secret_projection
    )
    covers = (
        "one whole frame replaced"
        if neighbour == "frame"
        else "one pixel value changed by up to 255"
    )
    return _Calibrated(
        sigma1, sigma2, failure, "gaussian (Dwork-Roth, Δ derived)", covers, delta, epsilon
    )


def noise_scales(
    *,
    epsilon: float,
    delta: float,
    budget_split: float,
    k: int,
    d: int,
    calibration: Calibration,
    neighbour: Neighbour,
    secret_projection: bool = False,
    full_rank: bool = True,
) -> NoiseScales:
    """σ1, σ2 and the full privacy record of one video's mechanism.

    ``secret_projection``: R is drawn per video from OS entropy and never stored (then the χ² bound
    holds); otherwise R is public and the operator-norm bound is used. ``full_rank``: Q is not used.
    """
    check_budget(epsilon, delta, budget_split, k, d)
    e1, d1, e2, d2 = split_budget(epsilon, delta, budget_split)
    bound = (
        "χ² over a secret per-video R (Laurent-Massart)"
        if secret_projection
        else "operator norm of a public R (Davidson-Szarek)"
    )
    if calibration == "paper":
        chosen = _paper_calibration(
            epsilon, delta, budget_split, k, d, secret_projection, full_rank
        )
    else:
        chosen = _gaussian_calibration(
            epsilon, delta, budget_split, k, d, neighbour, secret_projection
        )
    check_total_delta(delta, chosen.record_delta, chosen.label)
    beta = d1 / 2
    factor = row_factor(k, d, beta, secret_projection)
    frame_change = PIXEL_MAX * math.sqrt(d)
    q_frame = frame_change * operator_norm_bound(d, k, d2 / 4)
    delta_q_frame = 2 * frame_change * operator_norm_bound(d, k, d2 / 4) * q_frame + q_frame**2
    mu_q = 0.0 if full_rank else delta_q_frame / chosen.sigma2
    return NoiseScales(
        chosen.sigma1,
        chosen.sigma2,
        chosen.holds,
        chosen.record_delta,
        e1,
        d1,
        e2,
        d2,
        chosen.label,
        chosen.covers,
        chosen.failure,
        bound,
        change_epsilon(PIXEL_MAX, factor, chosen.sigma1, d1),
        change_epsilon(frame_change, factor, chosen.sigma1, d1),
        frame_change * operator_norm_bound(d, k, beta) / chosen.sigma1,
        mu_q,
        paper_delta=delta if calibration == "paper" else None,
        paper_epsilon=epsilon if calibration == "paper" else None,
        target_epsilon=epsilon,
    )


def paper_unit_epsilon(
    sigma1: float,
    sigma2: float,
    delta: float,
    delta1: float,
    delta2: float,
    k: int,
    d: int,
    secret_projection: bool,
    full_rank: bool,
) -> float:
    """The ε the paper's σ1, σ2 give for the paper's unit (a frame change of ℓ2 norm 255/√k), R as used.

    P's row moves by e ≤ (255/√k)·factor (χ² or operator norm, failing with β = δ1/2); Q by
    2·B_p·e' + e'² (B_p = 255·√d·s_max, e' at β = δ2/4, two bounds), used only when r < k. Both are
    Gaussian: μ = √(μ_P² + μ_Q²), and ε is exact Gaussian DP at δ (the failures are in the record's δ).
    """
    change = PIXEL_MAX / math.sqrt(k)
    mu_p = change * row_factor(k, d, delta1 / 2, secret_projection) / sigma1
    mu_q = 0.0
    if not full_rank:
        moved = change * row_factor(k, d, delta2 / 4, secret_projection)
        row_norm = PIXEL_MAX * math.sqrt(d) * operator_norm_bound(d, k, delta2 / 4)
        mu_q = (2 * row_norm * moved + moved**2) / sigma2
    return gdp_epsilon(math.hypot(mu_p, mu_q), delta)


def dataset_scales(
    params: DprpParams, epsilon: float, d: int, secret_randomness: bool
) -> NoiseScales:
    """The scales of the copy ``dprp@<epsilon>`` of frames with ``d`` values: R is secret only when drawn per video
    from OS entropy (``projection: per_video`` under ``privacy.randomness: secure``)."""
    return noise_scales(
        epsilon=epsilon,
        delta=params.delta,
        budget_split=params.budget_split,
        k=params.k_value,
        d=d,
        calibration=params.calibration,
        neighbour=params.neighbour,
        secret_projection=params.projection == "per_video" and secret_randomness,
        full_rank=rank_of(params.rank, params.k_value) == params.k_value,
    )


def rank_of(rank: int | float, k: int) -> int:
    """``rank`` as an integer r in 1..k (a float in (0, 1] is a fraction of k)."""
    r = math.ceil(rank * k) if isinstance(rank, float) else int(rank)
    if not 1 <= r <= k:
        raise PrivharError(
            f"dprp: rank = {rank} is invalid: expected an integer in 1..k = {k} or a fraction in (0, 1]"
        )
    return r
