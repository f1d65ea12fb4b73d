"""An empirical lower bound ε̂ on a mechanism's ε from one run of it (Steinke, Nasr & Jagielski, "Privacy auditing
with one (1) training run", NeurIPS 2023, arXiv 2305.08846).

m canaries are each put in the run's data with probability ½, independently and secretly. The auditor scores every
canary from what the run released, guesses "in" for the k₊ highest scores and "out" for the k₋ lowest, and counts
its correct guesses v of r = k₊ + k₋. Each canary's in/out is one step of the neighbouring relation, so under
(ε, δ)-DP no auditor's v exceeds what ε-randomized response would give by more than δ allows (their bound for
(ε, δ): the binomial tail at e^ε / (1 + e^ε) plus a δ term, :func:`p_value`). The largest ε the observed v rejects at
the chosen confidence is ε̂: a lower bound on the ε of the mechanism that ran, never a guarantee. It is above the claimed ε only
when the mechanism leaks more than its accountant says (or, with probability under 1 − confidence, by chance).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.stats import binom

from tasks.core.errors import PrivharError
from tasks.core.guarantee import AUDIT_COLUMNS as COLUMNS
from tasks.core.params_files import AUDITED_SECTIONS
from tasks.privacy import fdp_audit

# torch is imported by the stages that draw, not by the params checks that size an audit

if TYPE_CHECKING:
    import torch

    from tasks.core.dp_randomness import DpStream

GUESS_SHARES = (
    1 / 20,
    1 / 10,
    1 / 5,
)  # the shares of the canaries guessed "in" (highest scores), alone or with as many guessed "out" (lowest)
# the f-DP bound's one plan, fixed before any run: a tenth of the canaries guessed "in" and a tenth "out". Of the
# plans tried on simulated white-box Gaussian canaries (1 000, 40 seeds, μ of ε = 2 and 8 at δ = 1e-4), the one with
# the highest tenth percentile of ε̂ at ε = 8 (4.2; the three shares above, each in and out, Bonferroni over 3: 3.7)
FDP_GUESS_SHARE = 1 / 10
FDP_COLUMNS = ("epsilon_audited_fdp", "audit_fdp_mu", "audit_fdp_guesses", "audit_fdp_correct")


def least_canaries(confidence: float) -> int:
    """The fewest canaries with which :func:`audit` can show any ε̂ above 0 at ``confidence``: its largest guess plan,
    every guess right, rejects ε = 0 (with δ = 0; a δ only raises the count). Fewer can only ever report 0, and one
    canary broke the audit after the stage's work (issue 82: ``need 0 <= v <= r <= m``).

    >>> least_canaries(0.95)
    18
    """
    level = (1 - confidence) / (2 * len(GUESS_SHARES))
    count = 2
    while 0.5 ** (2 * max(1, round(max(GUESS_SHARES) * count))) >= level:
        count += 1
    return count


def check_audit_size(name: str, section: Any) -> None:
    """Refuse in one line, before any work, an audited section whose audit has too few canaries to show anything."""
    key = AUDITED_SECTIONS.get(name)  # the sections whose stages audit their releases
    count = getattr(section, key, 0) if key else 0
    if count and count < (least := least_canaries(section.audit_confidence)):
        raise PrivharError(
            f"{name}.{key} = {count}: a one-run audit at {section.audit_confidence:.0%} confidence needs at least "
            f"{least} canaries to show any ε̂ above 0 (every guess right); 0 turns the audit off"
        )


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[v or more of r guesses correct] when the run is (ε, δ)-DP with m canaries: the tail of Binomial(r, e^ε /
    (1 + e^ε)) plus 2mδ · max over i ≤ v of P[v − i ≤ Binomial(r, ·) < v] / i.

    >>> round(p_value(100, 10, 10, 0.0, 0.0), 6)  # ten coin flips all right
    0.000977
    """
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1 / (1 + math.exp(-epsilon))
    tail = float(binom.sf(v - 1, r, q))
    if v == 0 or delta == 0:
        return min(1.0, tail)
    below = np.cumsum(binom.pmf(np.arange(v - 1, -1, -1), r, q))  # P[v − i ≤ B < v], i = 1 .. v
    alpha = float(np.max(below / np.arange(1, v + 1)))
    return min(1.0, tail + alpha * delta * 2 * m)


def epsilon_bound(m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """The largest ε whose :func:`p_value` is below 1 − ``confidence`` (bisection: the p-value grows with ε); 0 when
    even ε = 0 explains v.

    >>> round(epsilon_bound(1000, 100, 100, 0.0, 0.95), 3)  # 100 right of 100: ln(q / (1 − q)), q = 0.05^(1/100)
    3.493
    """
    level = 1 - confidence
    if p_value(m, r, v, 0.0, delta) >= level:
        return 0.0
    low, high = 0.0, 1.0
    while p_value(m, r, v, high, delta) < level:
        low, high = high, 2 * high
        if high > 1e3:
            return math.inf
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if p_value(m, r, v, middle, delta) < level else (low, middle)
    return low


@dataclass(frozen=True)
class FdpBound:
    """The one-run f-DP bound (:mod:`tasks.privacy.fdp_audit`): ε̂ at the run's δ, the μ̂ it comes from, its guesses."""

    epsilon: float
    mu: float
    guesses: int
    correct: int


def _correct(ranked: np.ndarray, k_in: int, k_out: int) -> int:
    """Right guesses of a plan over canaries ``ranked`` by score: the top ``k_in`` guessed in, the bottom ``k_out`` out."""
    return int(ranked[:k_in].sum()) + (int((~ranked[len(ranked) - k_out :]).sum()) if k_out else 0)


def fdp_bound(ranked: np.ndarray, delta: float, confidence: float) -> FdpBound:
    """The f-DP bound of canaries ``ranked`` by score (included, highest first): :data:`FDP_GUESS_SHARE` guessed in
    from the top and as many out from the bottom, one plan, so the whole 1 − confidence is its level."""
    m = len(ranked)
    k = max(1, round(FDP_GUESS_SHARE * m))
    correct = _correct(ranked, k, k)
    epsilon, mu = fdp_audit.epsilon_bound(m, 2 * k, correct, delta, 1 - confidence)
    return FdpBound(epsilon, mu, 2 * k, correct)


@dataclass(frozen=True)
class Audit:
    """ε̂ and how it was reached: the canaries, the guess plan that gave it, and the confidence."""

    epsilon_audited: float
    canaries: int
    included: int
    guessed_in: int
    guessed_out: int
    correct: int
    confidence: float
    plans: int  # guess plans tried, Bonferroni-corrected: each at 1 − (1 − confidence) / plans
    # the f-DP bound of the same scores, where the mechanism's trade-off is Gaussian
    fdp: FdpBound | None = None

    def summary(self, canaries: str = "canaries") -> str:
        """ε̂ and how it was reached, for a stage's log line."""
        said = (
            f"audited ε̂ {self.epsilon_audited:.3g} ({self.confidence:.0%} confidence; {self.correct} of "
            f"{self.guessed_in + self.guessed_out} guesses right, {self.canaries} {canaries}, one run)"
        )
        if self.fdp is None:
            return said
        return (
            f"{said}; f-DP ε̂ {self.fdp.epsilon:.3g} (μ̂ {self.fdp.mu:.3g} of the Gaussian trade-off; "
            f"{self.fdp.correct} of {self.fdp.guesses} guesses right)"
        )

    def fdp_columns(self) -> dict[str, float | int | str]:
        """The f-DP bound as a ledger's columns ("" where it does not apply)."""
        if self.fdp is None:
            return dict.fromkeys(FDP_COLUMNS, "")
        values = (
            round(self.fdp.epsilon, 4),
            round(self.fdp.mu, 4),
            self.fdp.guesses,
            self.fdp.correct,
        )
        return dict(zip(FDP_COLUMNS, values, strict=True))

    def columns(self) -> dict[str, float | int]:
        """The audit as a ledger's columns, beside the release's ε."""
        values = (
            round(self.epsilon_audited, 4),
            self.confidence,
            self.canaries,
            self.guessed_in + self.guessed_out,
            self.correct,
        )
        return dict(zip(COLUMNS, values, strict=True))


def draw_included(stream: DpStream, canaries: int) -> torch.Tensor:
    """(m,) bool: which canaries are in, each independently with probability ½ from ``stream`` (secret by default)."""
    import torch

    included = torch.zeros(canaries, dtype=torch.bool)
    included[stream.poisson_sample(canaries, 0.5)] = True
    return included


def audit(
    scores: np.ndarray,
    included: np.ndarray,
    delta: float,
    confidence: float = 0.95,
    gaussian: bool = False,
) -> Audit:
    """ε̂ from one run: ``scores`` (m,) of the canaries, ``included`` (m,) bool, their secret draw.

    Guess plans are fixed in advance (:data:`GUESS_SHARES`, "in" only and "in" with as many "out"), and the
    confidence is split over them (Bonferroni), so picking the best plan keeps the stated confidence. ``gaussian``:
    the mechanism's trade-off is the Gaussian one (composed Gaussian mechanisms, no subsampling), and the f-DP bound
    of the same scores is added (:func:`fdp_bound`; each bound holds at ``confidence`` on its own).
    """
    m = len(scores)
    order = np.argsort(-scores, kind="stable")
    ranked = included[order]
    plans = [
        (max(1, round(share * m)), out) for share in GUESS_SHARES for out in (0, 1)
    ]  # (k₊, whether k₋ = k₊)
    each = 1 - (1 - confidence) / len(plans)
    best, telling = None, math.inf
    for k_in, both in plans:
        k_out = k_in if both else 0
        correct = _correct(ranked, k_in, k_out)
        found = Audit(
            epsilon_bound(m, k_in + k_out, correct, delta, each),
            m,
            int(included.sum()),
            k_in,
            k_out,
            correct,
            confidence,
            len(plans),
        )
        # the highest ε̂; where every plan gives 0, the plan chance explains least, so the log says how many of how
        # many guesses were right (issue 82: "0 of 0 guesses right")
        chance = p_value(m, k_in + k_out, correct, 0.0, delta)
        if best is None or (found.epsilon_audited, -chance) > (best.epsilon_audited, -telling):
            best, telling = found, chance
    assert best is not None  # GUESS_SHARES is not empty
    if not gaussian:
        return best
    return dataclasses.replace(best, fdp=fdp_bound(ranked, delta, confidence))
