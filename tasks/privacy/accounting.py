"""ε of the mechanisms privhar runs, under the neighbouring relation each really has.

Two relations (``Relation``): **add/remove** (one unit present or absent: Poisson-sampled DP-SGD
with the sum divided by the *expected* batch) and **replace-one** (one unit swapped for another: a
fixed-size batch, MaskDP's masked adjacency, which substitutes one video's private tokens). For a
clipped sum with clip C, replace-one moves the sum by up to 2C: in dp-accounting's terms a shift of
±C around the other data, ``sensitivity = 1`` in units of C with ``REPLACE_ONE``.

Accountants of the Poisson-subsampled Gaussian mechanism (σ = noise multiplier, q, steps):

- ``prv``: Opacus ``PRVAccountant`` (Gopi et al. 2021), numerically tight; add/remove only;
- ``pld``: Google's dp-accounting privacy-loss distributions (Koskela et al.; Doroshenko et al. 2022,
  pessimistic connect-the-dots), tight; add/remove and replace-one;
- ``rdp``: Opacus ``RDPAccountant`` (Mironov et al. 2019), an upper bound about 10 % above PLD here;
- ``gdp``: Opacus ``GaussianAccountant`` (CLT), an approximation, not a bound for few steps.

Opacus's accountants know add/remove only: a replace-one mechanism is always accounted with PLD
(:func:`effective_accountant`), whatever ``private.accountant`` says.

**Groups** (the person as the unit). A person whose data sit in m units (videos) of a
Poisson-sampled Gaussian sum changes, in one step, j ~ Binomial(m, q) clipped terms: the sum moves
by at most j·C (all aligned is the worst case, Choquette-Choo et al. 2023, Cor. 4.7). Its exact
privacy loss is a *mixture of Gaussians* with sensitivities 0..m and binomial weights, composed over
the steps (:func:`group_epsilon`, dp-accounting PLD) — not m·ε. Under replace-one, the person's
data are first replaced by the empty contribution and then by the other data: two such group steps, whose
trade-off curves compose (:mod:`tasks.privacy.tradeoff`, Dong, Roth & Su's group privacy) — within 2 % of the
symmetric worst case (gradients −C then +C, a lower bound on any valid ε) where the (ε, δ) path 2ε',
δ'(1 + e^{ε'}) was 13-20× above it — or, where smaller, the Gaussian mechanism without amplification:
μ = 2·m·√steps/σ.

**Gaussian DP** (:func:`gdp_epsilon`): a composition of Gaussian mechanisms without sampling is
exactly μ-GDP (Dong, Roth & Su 2019, Cor. 3.3), δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy.optimize import brentq
from scipy.special import logsumexp
from scipy.stats import binom, norm

from tasks.core.disk_cache import disk_cached
from tasks.core.errors import PrivharError
from tasks.core.private_catalogue import CATALOGUE
from tasks.privacy import tradeoff

# the accountants' values are shared on disk by the stages of a run (tasks.core.disk_cache); the folder is
# keyed by this module's source and these libraries' versions
cached = disk_cached(__file__, ("opacus", "dp-accounting", "scipy", "numpy"), helpers=("tradeoff",))

Relation = Literal["add/remove", "replace-one"]
ADD_REMOVE: Relation = "add/remove"
REPLACE_ONE: Relation = "replace-one"
ACCOUNTANTS = {
    "prv": "Opacus PRVAccountant (privacy random variables)",
    "pld": "dp-accounting PLD (privacy-loss distributions, pessimistic)",
    "rdp": "Opacus RDPAccountant (Rényi DP of the Poisson-sampled Gaussian mechanism)",
    "gdp": "Opacus GaussianAccountant (Gaussian DP, CLT approximation: not a bound for few steps)",
}
PLD_INTERVAL = 1e-3  # dp-accounting's value discretisation (pessimistic: rounding only raises ε)
# … of a group: a first pass at 0.5, then ε/1000 of that (at least 1e-3, at most 0.5): the pessimistic rounding then
# adds well under 1 % (m = 37, σ 6.25: 93.2 against 92.75 at 0.02; m = 55, σ 1.59: 2 343.5 against 2 342.7) in a
# fraction of the time of a fixed fine interval.
PLD_INTERVAL_COARSE = 0.5
PRV_ERROR = 1e-3  # Opacus PRV's ε error (its answer is an upper bound within it); its default 0.01 is 2 % at ε = 0.5


def _opacus_options(accountant: str) -> dict[str, float]:
    return {"eps_error": PRV_ERROR} if accountant == "prv" else {}


@contextlib.contextmanager
def _opacus_quiet(accountant: str):
    """Opacus's PRV accountant without its two harmless warnings (issue 85's runs printed them by the hundred): at
    q = 1 it takes log(1 − q) = −∞ as a threshold every value exceeds (numpy: divide by zero), and it bounds its
    domain with an RDP ε at a tiny δ whose best order is the largest it tries (a looser bound makes a wider domain,
    not a smaller ε). RDP's own warning stays where RDP is the accountant."""
    if accountant != "prv":
        yield
        return
    with np.errstate(divide="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
        yield


def relation_of(method: str) -> Relation:
    """A private training method's relation: MaskDP's masked adjacency replaces private tokens; the others add or
    remove a unit."""
    return CATALOGUE[method].relation


def poisson_schedule(count: int, batch_size: int, epochs: int) -> tuple[float, int]:
    """(q, steps) of DP-SGD over ``count`` units: q = 1/⌈count/B⌉ (Opacus's 1/len(data_loader)), ⌈count/B⌉ steps an epoch."""
    steps_per_epoch = math.ceil(count / batch_size)
    return 1.0 / steps_per_epoch, steps_per_epoch * epochs


def check_accountant(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise PrivharError(
            f"private.accountant = {accountant!r} is invalid: expected one of {sorted(ACCOUNTANTS)}"
        )


def effective_accountant(accountant: str, relation: Relation) -> str:
    """The accountant actually used: PLD for replace-one, which Opacus's accountants do not cover."""
    check_accountant(accountant)
    return "pld" if relation == REPLACE_ONE else accountant


def describe(accountant: str, relation: Relation) -> str:
    used = effective_accountant(accountant, relation)
    note = (
        "" if used == accountant else f" (private.accountant = {accountant} covers add/remove only)"
    )
    return f"{ACCOUNTANTS[used]}, {relation}{note}"


def _neighbouring(relation: Relation):
    from dp_accounting import NeighboringRelation

    return (
        NeighboringRelation.REPLACE_ONE
        if relation == REPLACE_ONE
        else NeighboringRelation.ADD_OR_REMOVE_ONE
    )


@lru_cache(maxsize=4096)
@cached
def _pld_epsilon(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float, relation: Relation
) -> float:
    from dp_accounting.pld import privacy_loss_distribution

    single = privacy_loss_distribution.from_gaussian_mechanism(
        noise_multiplier,
        sensitivity=1.0,
        sampling_prob=sample_rate,
        neighboring_relation=_neighbouring(relation),
        value_discretization_interval=PLD_INTERVAL,
    )
    return float(single.self_compose(steps).get_epsilon_for_delta(delta))


@lru_cache(maxsize=4096)  # pure in its arguments: the training seeds of one model ask it the same
@cached
def sampled_gaussian_epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    *,
    accountant: str,
    relation: Relation,
) -> float:
    """ε after ``steps`` of the Poisson-subsampled Gaussian mechanism (σ, q) at δ, under ``relation``."""
    used = effective_accountant(accountant, relation)
    if steps == 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    if used == "pld":
        return _pld_epsilon(
            float(noise_multiplier), float(sample_rate), int(steps), float(delta), relation
        )
    from opacus.accountants import create_accountant

    engine = create_accountant(mechanism=used)
    engine.history = [(noise_multiplier, sample_rate, steps)]
    with _opacus_quiet(used):
        return float(engine.get_epsilon(delta=delta, **_opacus_options(used)))


@lru_cache(maxsize=1024)
@cached
def opacus_engine_epsilon(
    accountant: str, history: tuple[tuple[float, float, int], ...], delta: float
) -> float:
    """What an Opacus ``PrivacyEngine`` whose accountant is ``accountant`` with this step history reports at δ.

    The engine's own number, printed beside ours; every seed of a model has the same history.
    """
    from opacus.accountants import create_accountant

    engine = create_accountant(mechanism=accountant)
    engine.history = list(history)
    with _opacus_quiet(accountant):
        return float(engine.get_epsilon(delta=delta))


@lru_cache(
    maxsize=1024
)  # pure in its arguments: each seed of a model, and each method at one ε and q, share σ
@cached
def calibrate_noise(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    *,
    accountant: str,
    relation: Relation,
) -> float:
    """The smallest σ (to 0.5 % in ε) whose ε after ``steps`` is at most ``target_epsilon``."""
    used = effective_accountant(accountant, relation)
    if not target_epsilon > 0:
        raise PrivharError(f"private.epsilons: {target_epsilon} is invalid: expected ε > 0")
    if used != "pld":
        from opacus.accountants.utils import get_noise_multiplier

        try:
            with _opacus_quiet(used):
                return float(
                    get_noise_multiplier(
                        target_epsilon=target_epsilon,
                        target_delta=delta,
                        sample_rate=sample_rate,
                        steps=steps,
                        accountant=used,
                        epsilon_tolerance=0.005 * target_epsilon,
                        **_opacus_options(used),
                    )
                )
        except ValueError as error:  # Opacus: "The privacy budget is too low."
            raise PrivharError(
                f"private: ε = {target_epsilon} at δ = {delta} is unreachable with q = {sample_rate:.4g} "
                f"over {steps} steps ({error})"
            ) from None

    def spent(sigma: float) -> float:
        return sampled_gaussian_epsilon(
            sigma, sample_rate, steps, delta, accountant=used, relation=relation
        )

    low, high = 0.1, 1.0
    while spent(high) > target_epsilon:
        low, high = high, high * 2
        if high > 1e4:
            raise PrivharError(
                f"private: ε = {target_epsilon} at δ = {delta} is unreachable with q = {sample_rate:.4g} "
                f"over {steps} steps"
            )
    while spent(low) <= target_epsilon and low > 1e-3:
        high, low = low, low / 2
    while spent(high) < 0.995 * target_epsilon and high - low > 1e-4:
        middle = (low + high) / 2
        low, high = (low, middle) if spent(middle) <= target_epsilon else (middle, high)
    return high


def _binomial_mixture(group: int, sample_rate: float) -> tuple[np.ndarray, np.ndarray]:
    counts = np.arange(group + 1)
    weights = binom.pmf(counts, group, sample_rate)
    keep = weights > 1e-40
    return counts[keep].astype(float), weights[keep] / weights[keep].sum()


@lru_cache(maxsize=4096)
@cached
def _group_add_remove(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float, group: int
) -> float:
    """The mixture-of-Gaussians PLD of a group; its discretisation grows with the group (the loss grows as group²).

    dp-accounting's ε search sometimes overflows (ε = ∞ at one group size between two finite ones): then it is
    recomputed at another discretisation, then for the next larger groups (a group's ε only grows with its size:
    Binomial(m + 1, q) sensitivities dominate Binomial(m, q)), and, should all fail, the Gaussian mechanism
    without amplification (μ = group·√steps/σ, a valid bound) is used.
    """
    if group == 1:
        return _pld_epsilon(noise_multiplier, sample_rate, steps, delta, ADD_REMOVE)
    for larger in range(group, group + 4):
        for scale in (1.0, 1.7, 3.1):
            coarse = _mixture_epsilon(
                noise_multiplier, sample_rate, steps, delta, larger, PLD_INTERVAL_COARSE * scale
            )
            if not math.isfinite(coarse):
                continue
            fine = _mixture_epsilon(
                noise_multiplier, sample_rate, steps, delta, larger, _fine_interval(coarse) * scale
            )
            return fine if math.isfinite(fine) else coarse
    return gdp_epsilon(group * math.sqrt(steps) / noise_multiplier, delta)


def _fine_interval(epsilon: float) -> float:
    """A group PLD's discretisation from a first ε (module constants): ε/1000 within [PLD_INTERVAL, coarse]; ∞: coarse."""
    return min(PLD_INTERVAL_COARSE, max(PLD_INTERVAL, epsilon / 1000))


def _mixture_pld(
    noise_multiplier: float, sample_rate: float, steps: int, group: int, interval: float
):
    """dp-accounting's composed PLD of a group's mixture of Gaussians (its remove pair (mixture, N(0)), add pair
    (N(0), mixture))."""
    from dp_accounting.pld import privacy_loss_distribution

    sensitivities, weights = _binomial_mixture(group, sample_rate)
    single = privacy_loss_distribution.from_mixture_gaussian_mechanism(
        noise_multiplier,
        sensitivities.tolist(),
        weights.tolist(),
        value_discretization_interval=interval,
    )
    return single.self_compose(steps)


def _mixture_epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    group: int,
    interval: float,
) -> float:
    with np.errstate(over="ignore", divide="ignore"):
        return float(
            _mixture_pld(
                noise_multiplier, sample_rate, steps, group, interval
            ).get_epsilon_for_delta(delta)
        )


def group_epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    group: int,
    *,
    relation: Relation,
) -> float:
    """ε of a group of ``group`` units (a person's videos) in the Poisson-subsampled Gaussian mechanism (module doc)."""
    if group <= 0 or steps == 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    args = (float(noise_multiplier), float(sample_rate), int(steps))
    if relation == ADD_REMOVE:
        return _group_add_remove(*args, float(delta), int(group))
    return _group_replace_one(*args, float(delta), int(group))


@lru_cache(maxsize=4096)
@cached
def _group_replace_one(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float, group: int
) -> float:
    """The smaller of two bounds: the path of two group steps composed as trade-off functions (module doc,
    :mod:`tasks.privacy.tradeoff`), and the Gaussian mechanism without amplification (each step moves the sum by at
    most 2·group·C: μ = 2·group·√steps / σ)."""
    unsampled = gdp_epsilon(2 * group * math.sqrt(steps) / noise_multiplier, delta)
    if group == 1:
        return min(
            unsampled, _pld_epsilon(noise_multiplier, sample_rate, steps, delta, REPLACE_ONE)
        )
    add_remove = _group_add_remove(noise_multiplier, sample_rate, steps, delta, group)
    # the add pair's loss log N(0)/mixture is at most log 1/(1 − q)^m a step (the mixture holds N(0) with that
    # weight); where it does not (q = 1, or (1 − q)^m below the mixture's 1e-40 cut) nothing is amplified anyway
    sensitivities, weights = _binomial_mixture(group, sample_rate)
    if sensitivities[0] != 0:
        return unsampled
    away_top = steps * -math.log(weights[0])
    ceiling = min(unsampled, add_remove + away_top + 1.0)
    if not math.isfinite(ceiling):
        return unsampled
    pld = _mixture_pld(noise_multiplier, sample_rate, steps, group, _fine_interval(add_remove))
    away_epsilons = tradeoff.epsilon_grid(away_top)
    away = np.minimum(
        _pmf_hockey_stick(pld._pmf_add, away_epsilons),
        _mixture_add_chernoff(noise_multiplier, sample_rate, steps, group, away_epsilons),
    )
    away[-1] = 0.0  # no loss reaches away_top
    back_epsilons = tradeoff.epsilon_grid(ceiling)
    back = _pmf_hockey_stick(pld._pmf_remove, back_epsilons)
    chained = tradeoff.path_of_two_epsilon(
        tradeoff.DeltaCurve(away_epsilons, away),
        tradeoff.DeltaCurve(back_epsilons, back),
        delta,
        ceiling,
    )
    return min(unsampled, chained)


def _pmf_hockey_stick(pmf, epsilons: np.ndarray) -> np.ndarray:
    """H_{e^ε} of one direction of a dp-accounting PLD (its dense or sparse pmf of losses)."""
    if hasattr(pmf, "_probs"):
        probabilities = np.asarray(pmf._probs, float)
        losses = (pmf._lower_loss + np.arange(len(probabilities))) * pmf._discretization
    else:
        keys, values = zip(*sorted(pmf._loss_probs.items()))
        probabilities, losses = np.array(values, float), np.array(keys, float) * pmf._discretization
    return tradeoff.hockey_stick(losses, probabilities, float(pmf._infinity_mass), epsilons)


def _mixture_add_chernoff(
    noise_multiplier: float, sample_rate: float, steps: int, group: int, epsilons: np.ndarray
) -> np.ndarray:
    """Chernoff bound on H(N(0)‖mixture) composed over ``steps`` (:func:`tasks.privacy.tradeoff.chernoff_hockey_stick`)."""
    orders = np.geomspace(1e-3, 1e4, 120)
    return tradeoff.chernoff_hockey_stick(
        epsilons,
        steps,
        orders,
        mixture_add_log_moments(noise_multiplier, sample_rate, group, orders),
    )


def mixture_add_log_moments(
    noise_multiplier: float, sample_rate: float, group: int, orders: np.ndarray
) -> np.ndarray:
    """Upper bounds on log E_N(0) e^{λL} at λ = ``orders``, L = log N(0)/mixture of one step: L falls as x rises (every
    shift is ≥ 0), so each cell of a grid is charged its exact N(0) mass times e^{λL} at its left end, the left tail
    e^{λ·max L} (L ≤ log 1/w₀, w₀ the weight of shift 0), the right tail its left end's."""
    sensitivities, weights = _binomial_mixture(group, sample_rate)
    sigma = noise_multiplier
    edges = np.linspace(-sensitivities.max() - 40 * sigma, 40 * sigma, 100_001)
    loss = -logsumexp(
        np.log(weights)[:, None]
        + (2 * edges[None] * sensitivities[:, None] - sensitivities[:, None] ** 2) / (2 * sigma**2),
        axis=0,
    )
    z = edges / sigma
    log_below, log_above = norm.logcdf(z), norm.logsf(z)
    with np.errstate(divide="ignore"):  # a cell's mass, from whichever tail keeps its digits
        left_side = log_below[1:] + np.log1p(
            -np.exp(np.minimum(log_below[:-1] - log_below[1:], 0.0))
        )
        right_side = log_above[:-1] + np.log1p(
            -np.exp(np.minimum(log_above[1:] - log_above[:-1], 0.0))
        )
    log_mass = np.concatenate(
        [[log_below[0]], np.where(z[1:] <= 0, left_side, right_side), [log_above[-1]]]
    )
    charged = np.concatenate(
        [[-math.log(weights[0])], loss]
    )  # the left tail at the largest loss, each cell its left end
    return np.array([logsumexp(log_mass + order * charged) for order in orders])


def gdp_delta(epsilon: float, mu: float) -> float:
    """δ(ε) of μ-GDP (the second term in log space: e^ε overflows where Φ underflows). That term is at most the
    first, so its exponent is ≤ 0: at a huge ε float cancellation can push it past, which is clamped."""
    exponent = min(epsilon + float(norm.logcdf(-epsilon / mu - mu / 2)), 0.0)
    return max(float(norm.cdf(-epsilon / mu + mu / 2)) - math.exp(exponent), 0.0)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ ``delta`` for μ-GDP (μ = 0: nothing released; μ = ∞: no bound)."""
    if mu == 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if gdp_delta(0.0, mu) <= delta:
        return 0.0
    high = 1.0
    while gdp_delta(high, mu) > delta:
        high *= 2
        if math.isinf(
            high
        ):  # μ so large (ε = 1e308 asked of DPRP) that no double bounds ε: none is claimed
            return math.inf
    return float(
        brentq(
            lambda epsilon: gdp_delta(epsilon, mu) - delta, 0.0, high, xtol=1e-10 * max(1.0, high)
        )
    )


def gaussian_person_epsilon(
    *,
    mu_per_frame: float,
    mu_q_per_video: float,
    delta: float,
    failure: float,
    videos: int,
    frames: int,
) -> tuple[float, float]:
    """(ε, δ) of a person whose ``videos`` videos of ``frames`` frames all change, for a Gaussian mechanism with
    independent noise per frame row (Video-DPRP's P, μ per whole-frame change) and per video (its Q): exact
    Gaussian DP, μ = sqrt(videos·frames·μ_frame² + videos·μ_Q²); the sensitivity bounds' failure probability
    ``failure`` per video is added to δ."""
    if videos == 0:
        return 0.0, 0.0
    mu = math.sqrt(videos * frames * mu_per_frame**2 + videos * mu_q_per_video**2)
    return gdp_epsilon(mu, videos * (delta - failure)), videos * delta
