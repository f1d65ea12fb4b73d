"""Empirical privacy audits: many runs of a mechanism with and without a canary, a threshold attack, and a
Clopper-Pearson lower bound ε̂ on what the runs prove; ε̂ must not exceed the ε the accountant claims.

Each audit also plants the bug it is meant to catch (noise halved, the canary in every batch, MaskDP's
public gradient summed over the private batch, randomized response at twice its ε) and checks that
the audit then fails: a test that cannot fail proves nothing. The randomness is seeded (tests only).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import pytest
import torch
from scipy.stats import beta
from torch import nn

import tasks.private.methods as methods
from tasks.core.dp_randomness import DpStream
from tasks.core.parallel import worker_count
from tasks.federated.client import LocalRecipe, Shard, client_round, trainable_state
from tasks.ldp.randomized_response import perturb
from tasks.privacy.accounting import ADD_REMOVE, REPLACE_ONE, sampled_gaussian_epsilon
from tasks.privacy.federated_accounting import epsilon_of as federated_epsilon
from tasks.private.methods import PrivateData, Recipe, train_grouped

RUNS = (
    12_000  # per world (the grouped-loop audits; Video-DPRP uses 4 000); `pytest -m slow` runs 10x
)
CONFIDENCE = 0.999  # of each one-sided Clopper-Pearson bound, Bonferroni over the thresholds tried
# The audit checks the accountant's whole (ε, δ) curve at one point: a few thousand runs see rates near
# 1e-3, so ε is claimed and audited at δ = 1e-3 (the same accountant, the same σ, q, steps).
DELTA = 1e-3
# The attack's thresholds on z (units of C) in the Gaussian audits: Bonferroni over these
THRESHOLDS = [1.0, 1.5, 2.0, 2.5, 3.0]
# A planted noise bug is checked on this many runs of each world; its audit then reads the as-built runs (noise_divided)
HEAD_RUNS = 16
# A planted sampling bug puts the canary in (nearly) every batch: a quarter of the runs of its world catch it by a wide
# margin (expected ε̂ 1.70 at 3 000 runs, 1.84 at 12 000, against 0.65 claimed at q = 0.1), so the planted world runs
# that many; the world as built keeps RUNS, which is what bounds how small a real leak the audit sees
PLANTED_RUNS = RUNS // 4
# The world with the canary and the world without, each scored from its first run's index (0 and 10**6)
WORLD_OFFSETS = (0, 10**6)
# The runs of an audit go to CHUNKS forked processes (at most one per CPU), each run seeded by its own index: the
# scores are the same on any machine, and a 2-core CI runner audits twice as fast.
CHUNKS = 4
# A fork of a process whose other threads hold a lock can wait on it forever (tasks/core/parallel.py: pool_context);
# the chunks are forks all the same (monkeypatched bugs and closures reach them only that way), so a pool that has not
# answered in this long is ended and the runs are scored here, serially: the same scores, only slower; and no later
# audit of the session forks.
CHUNK_TIMEOUT_S = 900
_forks_hung = False
Scores = Callable[[int, int], np.ndarray]  # (runs, first run's index) -> one score per run
_chunk_scores: Scores | None = (
    None  # what a forked chunk runs (inherited, never pickled: it may be a closure)
)


def _one_torch_thread() -> None:
    """Not tasks.core.parallel's one_thread_per_worker: cv2.setNumThreads in a fork of a process whose OpenCV pool has
    run waits for threads the fork does not have (it hung every audit pool of a CI run, 2026-11-28)."""
    torch.set_num_threads(1)


def _score_chunk(bounds: tuple[int, int]) -> np.ndarray:
    assert _chunk_scores is not None
    return _chunk_scores(bounds[1] - bounds[0], bounds[0])


def _serially(scores: Scores, bounds: list[tuple[int, int]]) -> list[np.ndarray]:
    return [scores(last - first, first) for first, last in bounds]


def in_chunks(scores: Scores, runs: int, offset: int) -> np.ndarray:
    """``scores(runs, offset)`` computed as CHUNKS contiguous slices of the runs in forked processes (each a fresh fork
    of this one, so monkeypatched bugs reach them), concatenated in order: equal to the serial call."""
    global _chunk_scores, _forks_hung
    edges = np.linspace(offset, offset + runs, CHUNKS + 1).round().astype(int).tolist()
    bounds = list(zip(edges[:-1], edges[1:], strict=True))
    if _forks_hung:
        return np.concatenate(_serially(scores, bounds))
    _chunk_scores = scores
    try:
        with multiprocessing.get_context("fork").Pool(
            min(CHUNKS, worker_count(0)), initializer=_one_torch_thread, maxtasksperchild=1
        ) as pool:
            pending = pool.map_async(_score_chunk, bounds, 1)
            try:
                parts = pending.get(CHUNK_TIMEOUT_S)
            except multiprocessing.TimeoutError:
                logging.getLogger(__name__).warning(
                    "audit chunks gave no answer in %d s: scoring the runs serially",
                    CHUNK_TIMEOUT_S,
                )
                pool.terminate()
                _forks_hung = True
                parts = _serially(scores, bounds)
    finally:
        _chunk_scores = None
    return np.concatenate(parts)


def test_chunks_equal_the_serial_scores_and_a_pool_that_hangs_is_scored_serially(monkeypatch):
    parent = os.getpid()

    def scores(runs: int, first: int) -> np.ndarray:
        return np.arange(first, first + runs, dtype=float) * 0.5

    def hangs_in_a_fork(runs: int, first: int) -> np.ndarray:
        if os.getpid() != parent:
            time.sleep(120)  # a forked chunk stuck on a lock
        return scores(runs, first)

    assert np.array_equal(in_chunks(scores, 10, 5), scores(10, 5))
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "CHUNK_TIMEOUT_S", 1)
    monkeypatch.setattr(module, "_forks_hung", False)
    started = time.monotonic()
    assert np.array_equal(in_chunks(hangs_in_a_fork, 10, 5), scores(10, 5))
    assert time.monotonic() - started < 60 and module._forks_hung  # and later audits do not fork


def epsilon_lower_bound(
    hits_canary: int,
    hits_without: int,
    runs: int,
    thresholds: int = 1,
    runs_without: int | None = None,
) -> float:
    """ε̂ = ln((TPR_low − δ) / FPR_high), Clopper-Pearson at CONFIDENCE (Bonferroni over ``thresholds``); the world
    without the canary ran ``runs_without`` times (``runs`` unless given)."""
    alpha = (1 - CONFIDENCE) / thresholds
    runs_without = runs if runs_without is None else runs_without
    tpr_low = beta.ppf(alpha, hits_canary, runs - hits_canary + 1) if hits_canary else 0.0
    fpr_high = (
        beta.ppf(1 - alpha, hits_without + 1, runs_without - hits_without)
        if hits_without < runs_without
        else 1.0
    )
    return math.log((tpr_low - DELTA) / fpr_high) if tpr_low > DELTA else 0.0


def best_bound(
    scores_canary: np.ndarray, scores_without: np.ndarray, thresholds: list[float]
) -> float:
    return max(
        epsilon_lower_bound(
            int((scores_canary > t).sum()),
            int((scores_without > t).sum()),
            len(scores_canary),
            len(thresholds),
            len(scores_without),
        )
        for t in thresholds
    )


class _Stop(Exception):
    """Ends a run after its first iterate: the audit observes that step (white box)."""


def first_step(data: PrivateData, recipe: Recipe, sigma: float, seed: int) -> torch.Tensor:
    """The trainable weights after one step of the grouped loop (multi-clip / MaskDP / person units), from zero."""
    module = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        module.weight.zero_()
    seen = {}

    def stop(step: int, sampled: int, trained: nn.Module) -> None:
        seen["weight"] = trained.weight.detach().clone()
        raise _Stop

    try:
        train_grouped(
            module,
            data,
            recipe,
            sigma,
            DpStream.seeded(2 * seed),
            DpStream.seeded(2 * seed + 1),
            on_step=stop,
        )
    except _Stop:
        pass
    return seen["weight"]


def canary_data(
    units: int, canary: float, public: bool = False, canary_videos: int = 1
) -> PrivateData:
    """``units`` units of zero input (no gradient) but the first, whose input is ``canary`` along x₀;
    with ``public``, every unit also has a public view and the first's lies along x₁ (MaskDP); with
    ``canary_videos`` > 1, the units are persons and the first is in that many videos, each with the canary."""
    inputs = torch.zeros(units + canary_videos - 1, 1, 2)
    inputs[:canary_videos, 0, 0] = canary
    labels = torch.zeros(len(inputs), dtype=torch.long)
    if canary_videos > 1:
        owners = torch.cat([torch.zeros(canary_videos, dtype=torch.long), torch.arange(1, units)])
        return PrivateData(inputs, labels, owners=owners)
    if not public:
        return PrivateData(inputs, labels)
    views = torch.zeros(units, 2)
    views[0, 1] = 100.0
    return PrivateData(
        inputs,
        labels,
        public=views,
        has_private=torch.ones(units, dtype=torch.bool),
        has_public=torch.ones(units, dtype=torch.bool),
    )


def recipe_for(units: int, batch: int) -> Recipe:
    return Recipe(
        epochs=1,
        batch_size=batch,
        physical_batch_size=16,
        learning_rate=1e-3,
        momentum=0.0,
        max_grad_norm=1.0,
        delta=DELTA,
        accountant="pld",
    )


def private_scores(
    data: PrivateData,
    recipe: Recipe,
    sigma: float,
    runs: int,
    offset: int,
    public_gate: bool = False,
) -> np.ndarray:
    """z: the first update along the canary's clipped gradient, in units of C (the noise has std σ).

    With ``public_gate`` (MaskDP) the attacker reads the noise-free public column first: where it shows
    the canary's public view, the canary was in the public batch; elsewhere the run scores −∞.
    """
    rate = 1.0 / math.ceil(data.unit_count / recipe.batch_size)
    scale = rate * data.unit_count / (recipe.learning_rate * recipe.max_grad_norm)
    direction = torch.tensor([[-1.0, 0.0], [1.0, 0.0]]) / math.sqrt(
        2
    )  # the clipped gradient of label 0 along x₀
    scores = []
    for run in range(runs):
        weight = first_step(data, recipe, sigma, offset + run)
        z = float(-(weight * direction).sum() * scale)
        if (
            public_gate and abs(float(weight[0, 1])) < 0.025
        ):  # the public term moves it by 0.05, the noise by ~0.001
            z = -math.inf
        scores.append(z)
    return np.array(scores)


def null_world(
    *, units: int, batch: int, sigma: float, runs: int = RUNS, canary_videos: int = 1
) -> np.ndarray:
    """The add/remove audit's world without the canary: every input 0, so no gradient, and each run's score is the
    noise alone, drawn from its own stream (seed 2r + 1), whatever the sampling stream (seed 2r) draws. A planted
    sampling bug leaves these scores as they are, so both halves of such an audit share them."""
    other = canary_data(units, 0.0, False, canary_videos)
    recipe = recipe_for(units, batch)
    return in_chunks(
        lambda count, first: private_scores(other, recipe, sigma, count, first), runs, 10**6
    )


def grouped_worlds(
    *,
    units: int,
    batch: int,
    sigma: float,
    relation: str,
    runs: int = RUNS,
    canary_videos: int = 1,
    without: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The scores of one step of the grouped loop with the canary and without: its input +100 against 0 (add/remove)
    or −100 (replace-one, MaskDP's masked adjacency: the private tokens swapped, the public view the same); with
    ``canary_videos`` > 1, user-level mode: the canary is a person in that many videos, each +100 against 0.
    ``without``: the add/remove world without the canary, computed once (:func:`null_world`)."""
    public = relation == REPLACE_ONE
    recipe = recipe_for(units, batch)
    canary = canary_data(units, 100.0, public, canary_videos)
    with_canary = in_chunks(
        lambda count, first: private_scores(canary, recipe, sigma, count, first, public), runs, 0
    )
    if public:
        other = canary_data(units, -100.0, public, canary_videos)
        without = in_chunks(
            lambda count, first: private_scores(other, recipe, sigma, count, first, public),
            runs,
            10**6,
        )
    elif without is None:
        without = null_world(
            units=units, batch=batch, sigma=sigma, runs=runs, canary_videos=canary_videos
        )
    return with_canary, without


def grouped_claim(*, units: int, batch: int, sigma: float, relation: str, **_: object) -> float:
    """The ε the accountant claims for one step of the grouped loop at q = 1 / ⌈units / batch⌉ (PLD)."""
    rate = 1.0 / math.ceil(units / batch)
    return sampled_gaussian_epsilon(sigma, rate, 1, DELTA, accountant="pld", relation=relation)


def audit_grouped(**world: object) -> tuple[float, float]:
    """(ε̂, ε claimed) of one step of the grouped loop (:func:`grouped_worlds`)."""
    return best_bound(*grouped_worlds(**world), THRESHOLDS), grouped_claim(**world)


def noise_divided(built: np.ndarray, head: np.ndarray, divisor: float) -> np.ndarray:
    """A world's scores under a plant that divides the std of every Gaussian draw by ``divisor``, from its scores as
    built. Each run draws the same standard normals either way (its own seeds), so a run that scores s + n as built
    scores s + n / divisor planted, s being the run's noise-free score. ``head``, the world's first runs under the
    plant, must show exactly that, with one s for every run (the canary is in every batch at q = 1): a plant that
    does not take, or scales the noise otherwise, fails here. Then the world is not run again: the same runs and the
    same power as a planted world of its own, at no cost."""
    signal = (divisor * head - built[: len(head)]) / (divisor - 1)
    assert np.allclose(signal, signal[0], atol=1e-4), (
        f"not one signal plus noise / {divisor}: {signal}"
    )
    return signal[0] + (built - signal[0]) / divisor


def test_dp_sgd_noise_holds_and_halved_noise_is_caught(monkeypatch):
    recipe = recipe_for(1, 1)
    worlds = tuple(
        partial(private_scores, canary_data(1, canary), recipe, 1.0) for canary in (100.0, 0.0)
    )
    claimed = grouped_claim(units=1, batch=1, sigma=1.0, relation=ADD_REMOVE)
    original = methods.add_noise

    def halve_the_noise() -> None:
        monkeypatch.setattr(
            methods,
            "add_noise",
            lambda summed, sigma, clip, stream: original(summed, sigma / 2, clip, stream),
        )

    assert_it_holds_and_halved_noise_is_caught(worlds, claimed, halve_the_noise, runs=RUNS)


def fixed_draw(stream: DpStream, std: float, like: torch.Tensor) -> torch.Tensor:
    return std * torch.arange(1, like.numel() + 1, dtype=like.dtype).reshape(like.shape)


def fixed_noise_null_world(**world) -> np.ndarray:
    """The canary-free world's first 16 scores with every Gaussian draw fixed (std × 1, 2, 3, …): equal as
    built and under a planted sampling bug exactly when its score is the noise alone, scaled independently of the
    sample. Then both halves of that audit may share the null world's scores: the plant changes which draws of the
    stream become the noise, not their law (i.i.d. N(0, σ²C²) either way)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DpStream, "normal", fixed_draw)
        return null_world(**world, runs=16)


def test_poisson_sampling_holds_and_a_canary_in_every_batch_is_caught(monkeypatch):
    world = {"units": 10, "batch": 1, "sigma": 1.0}
    without, fixed = null_world(**world), fixed_noise_null_world(**world)
    found, claimed = audit_grouped(**world, relation=ADD_REMOVE, without=without)
    assert found <= claimed
    monkeypatch.setattr(DpStream, "poisson_sample", lambda stream, count, rate: torch.arange(count))
    assert np.array_equal(fixed_noise_null_world(**world), fixed)  # the null world may be shared
    broken, claimed = audit_grouped(
        **world, relation=ADD_REMOVE, without=without, runs=PLANTED_RUNS
    )
    assert broken > claimed, (broken, claimed)


def test_person_sampling_holds_below_q_1_and_per_video_sampling_is_caught(monkeypatch):
    """User-level mode at q = 0.1: a person in 30 videos is sampled as one unit. The planted bug draws each of a
    person's videos at the person rate (as if the unit were the video), so the person is in ~96 % of the steps."""
    world = {"units": 10, "batch": 1, "sigma": 1.0, "canary_videos": 30}
    without, fixed = null_world(**world), fixed_noise_null_world(**world)
    found, claimed = audit_grouped(**world, relation=ADD_REMOVE, without=without)
    assert found <= claimed
    coins = np.random.default_rng(0)

    def per_video(data: PrivateData, chosen: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.flatnonzero(coins.random(len(data.labels)) < 0.1))

    monkeypatch.setattr(PrivateData, "videos_of", per_video)
    assert np.array_equal(fixed_noise_null_world(**world), fixed)  # the null world may be shared
    broken, claimed = audit_grouped(
        **world, relation=ADD_REMOVE, without=without, runs=PLANTED_RUNS
    )
    assert broken > claimed, (broken, claimed)


def opacus_steps(
    units: int, canary: float, sigma: float, steps: int, seed: int
) -> tuple[np.ndarray, list[int]]:
    """The headline ``dp_sgd`` path (Opacus with stream noise and Poisson batches), observed at every step from the
    same iterate: z (as in :func:`private_scores`) and the batch size. Each step resets the weights to zero, so the
    ``steps`` steps of one run are ``steps`` independent one-step runs; σ is fixed (the audit tests the mechanism)."""
    data = canary_data(units, canary)
    module = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        module.weight.zero_()
    recipe = Recipe(
        epochs=math.ceil(steps / units),
        batch_size=1,
        physical_batch_size=16,
        learning_rate=1e-3,
        momentum=0.0,
        max_grad_norm=1.0,
        delta=DELTA,
        accountant="rdp",
    )  # Opacus reports its ε: RDP is instant
    direction = torch.tensor([[-1.0, 0.0], [1.0, 0.0]]) / math.sqrt(2)
    scores, sizes = [], []

    def observe(step: int, sampled: int, trained: nn.Module) -> None:
        with torch.no_grad():
            scores.append(
                float(-(trained.weight * direction).sum())
                / (recipe.learning_rate * recipe.max_grad_norm)
            )
            sizes.append(sampled)
            trained.weight.zero_()

    methods.train_dp_sgd(
        module,
        data,
        recipe,
        sigma,
        DpStream.seeded(2 * seed),
        DpStream.seeded(2 * seed + 1),
        on_step=observe,
    )
    return np.array(scores), sizes


def opacus_worlds() -> tuple[Scores, Scores]:
    """One Opacus DP-SGD step, q = 1, σ = 1: the canary's input +100 against 0 (a chunk is one run of that many
    steps, seeded by its first index)."""
    return (
        lambda n, first: opacus_steps(1, 100.0, 1.0, n, first)[0],
        lambda n, first: opacus_steps(1, 0.0, 1.0, n, first)[0],
    )


def halve_every_stream_draw(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """The plant: every Gaussian draw of :class:`DpStream` (Opacus's noise, through tasks/privacy/opacus_randomness.py)
    at half its standard deviation."""
    original = DpStream.normal
    return lambda: monkeypatch.setattr(
        DpStream, "normal", lambda stream, std, like: original(stream, std / 2, like)
    )


def assert_it_holds_and_halved_noise_is_caught(
    worlds: tuple[Scores, Scores],
    claimed: float,
    halve_the_noise: Callable[[], None],
    runs: int = RUNS // 2,
) -> None:
    """ε̂ of ``worlds`` within ``claimed`` as built, above it once ``halve_the_noise()`` has planted noise of half the
    standard deviation (:func:`noise_divided`)."""
    built = [in_chunks(scores, runs, offset) for scores, offset in zip(worlds, WORLD_OFFSETS)]
    found = best_bound(*built, THRESHOLDS)
    assert found <= claimed, (found, claimed)
    halve_the_noise()
    # the first runs under the plant, as the first chunk ran them (serially: an Opacus chunk seeds from its first index)
    head = [scores(HEAD_RUNS, offset) for scores, offset in zip(worlds, WORLD_OFFSETS)]
    planted = [noise_divided(scores, first, 2.0) for scores, first in zip(built, head)]
    broken = best_bound(*planted, THRESHOLDS)
    assert broken > claimed, (broken, claimed)


def test_opacus_noise_holds_and_halved_noise_is_caught(monkeypatch):
    """The headline method: its noise comes from :mod:`tasks.privacy.opacus_randomness`, not from the grouped loop."""
    claimed = sampled_gaussian_epsilon(1.0, 1.0, 1, DELTA, accountant="pld", relation=ADD_REMOVE)
    assert_it_holds_and_halved_noise_is_caught(
        opacus_worlds(), claimed, halve_every_stream_draw(monkeypatch)
    )


def test_opacus_batches_are_poisson_and_fixed_batches_are_caught(monkeypatch):
    """40 videos, B = 1: Opacus's batch sizes are Binomial(40, 1/40); ``poisson_sampling=False`` gives 1 every step."""
    from tasks.privacy.opacus_randomness import StreamPrivacyEngine

    def binomial_like() -> bool:
        sizes = np.array(opacus_steps(40, 0.0, 1.0, 1_000, 0)[1])
        return (
            abs(sizes.mean() - 1.0) < 0.15 and 0.6 * 0.975 < sizes.var() < 1.5 * 0.975
        )  # q N, q N (1 − q)

    assert binomial_like()
    original = StreamPrivacyEngine.make_private
    monkeypatch.setattr(
        StreamPrivacyEngine,
        "make_private",
        lambda engine, **kwargs: original(engine, **{**kwargs, "poisson_sampling": False}),
    )
    assert not binomial_like()


def federated_client_scores(canary: float, runs: int, offset: int) -> np.ndarray:
    """One federated client's round (tasks/federated/client.py: Opacus on shuffled fixed-size batches), 4 videos
    in one batch, σ = 2, from zero weights: z, the update along the canary's clipped gradient in units of C. The
    canary's input is +100 or −100 along x₀ (replace-one: its clipped gradient flips, sensitivity 2C), shifted so
    that the two worlds are N(1, (σ/2)²) and N(0, (σ/2)²)."""
    module = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        module.weight.zero_()
    recipe = LocalRecipe(
        local_epochs=1,
        batch_size=4,
        learning_rate=1e-3,
        momentum=0.0,
        max_grad_norm=1.0,
        noise_multiplier=2.0,
    )
    inputs = torch.zeros(4, 2)
    inputs[0, 0] = canary
    shard = Shard(inputs, torch.zeros(4, dtype=torch.long))
    broadcast = trainable_state(module)
    direction = torch.tensor([[-1.0, 0.0], [1.0, 0.0]]) / math.sqrt(2)
    scale = recipe.batch_size / (recipe.learning_rate * recipe.max_grad_norm)
    scores = []
    for run in range(runs):  # the client's shuffle and noise streams: seeds 2r and 2r + 1
        update = client_round(module, broadcast, shard, recipe, 2 * (offset + run))
        scores.append(float(-(update.update["weight"] * direction).sum()) * scale)
    return (np.array(scores) + 1.0) / 2.0


def federated_client_worlds() -> tuple[Scores, Scores]:
    """One client's round at σ = 2 (μ = 2/σ = 1): the canary's input +100 against −100."""
    return partial(federated_client_scores, 100.0), partial(federated_client_scores, -100.0)


def test_federated_client_noise_holds_and_halved_noise_is_caught(monkeypatch):
    """The federated clients (paper 003) claim replace-one μ-GDP with sensitivity 2C (ε from
    tasks.privacy.federated_accounting): audited on a client's round."""
    claimed = federated_epsilon(2.0, 1, DELTA)
    assert_it_holds_and_halved_noise_is_caught(
        federated_client_worlds(), claimed, halve_every_stream_draw(monkeypatch)
    )


def test_batches_are_poisson_not_fixed_size(monkeypatch):
    """Fixed-size batches show no amplification an attack can see in a few thousand runs; their sizes give them away:
    under Poisson sampling the batch size is Binomial(N, q)."""

    def batch_sizes() -> list[int]:
        sizes = []
        data = PrivateData(torch.zeros(40, 1, 2), torch.zeros(40, dtype=torch.long))
        recipe = Recipe(
            epochs=25,
            batch_size=8,
            physical_batch_size=16,
            learning_rate=1e-3,
            momentum=0.0,
            max_grad_norm=1.0,
            delta=DELTA,
            accountant="pld",
        )
        train_grouped(
            nn.Linear(2, 2),
            data,
            recipe,
            1.0,
            DpStream.seeded(0),
            on_step=lambda step, sampled, module: sizes.append(sampled),
        )
        return sizes

    def binomial_like(sizes: list[int]) -> bool:
        return (
            abs(np.mean(sizes) - 8.0) < 0.8 and 0.6 * 6.4 < np.var(sizes) < 1.5 * 6.4
        )  # N q, N q (1 − q)

    assert binomial_like(batch_sizes())

    def fixed(stream: DpStream, count: int, rate: float) -> torch.Tensor:
        return stream.permutation(count)[: round(count * rate)]

    monkeypatch.setattr(DpStream, "poisson_sample", fixed)
    assert not binomial_like(batch_sizes())


def test_maskdp_holds_and_a_public_gradient_on_the_private_batch_is_caught(monkeypatch):
    found, claimed = audit_grouped(units=10, batch=1, sigma=1.0, relation=REPLACE_ONE)
    assert found <= claimed
    original = DpStream.poisson_sample
    last: dict[str, torch.Tensor] = {}

    def same_batch(stream: DpStream, count: int, rate: float) -> torch.Tensor:
        if "private" in last:  # the public draw: the private batch again (Algorithm 1 as printed)
            return last.pop("private")
        last["private"] = original(stream, count, rate)
        return last["private"]

    monkeypatch.setattr(DpStream, "poisson_sample", same_batch)
    broken, claimed = audit_grouped(
        units=10, batch=1, sigma=1.0, relation=REPLACE_ONE, runs=PLANTED_RUNS
    )
    assert broken > claimed, (broken, claimed)


@pytest.mark.parametrize("domain", [2, 16])
def test_randomized_response_holds_and_twice_its_epsilon_is_caught(domain):
    """Input 0 against 1, output 0 as the attack's guess: p/q = e^ε exactly, so ε̂ comes close to ε."""
    runs, epsilon = 200_000, 1.0
    rng = np.random.default_rng(0)

    def bound(used: float) -> float:
        with_zero = perturb(np.zeros(runs, dtype=np.int64), domain, used, rng)
        with_one = perturb(np.ones(runs, dtype=np.int64), domain, used, rng)
        return epsilon_lower_bound(int((with_zero == 0).sum()), int((with_one == 0).sum()), runs)

    found = bound(epsilon)
    assert 0.85 * epsilon < found <= epsilon
    assert bound(2 * epsilon) > epsilon


def dprp_scores(
    sigma1: float, runs: int, offset: int, canary: bool, divisors: tuple[float, ...] = (1.0,)
) -> np.ndarray:
    """Video-DPRP on a 4 × 4 colour frame (d = 48), k = 24, R secret and fresh per run (per_video under secure randomness):
    the noisy projection P̃ along the canary's ΔP = Δx R, in units of σ1; one column per divisor of σ1. The canary is one
    pixel value 0 → 255, fixed before R is drawn (the χ² bound's setting); the auditor then sees R (white box).

    P̃ = XR + σ1·M with M the run's own standard normals (its noise seed), so the run at σ1 / d scores s + n / d where
    it scores s + n at σ1 (s: the canary's ΔP along itself, n: the noise along it): every divisor reads the same runs.
    :func:`dprp_divides_its_noise` checks that against the mechanism run at σ1 / d."""
    from tasks.dprp.mechanism import Projection, project, protect_video

    frame = np.zeros((1, 4, 4, 3), dtype=np.uint8)
    changed = frame.copy()
    changed[0, 0, 0, 0] = 255
    scores = []
    for run in range(runs):
        projection = Projection(seed=offset + run, d=48, k=24)
        clean = project(torch.from_numpy(frame.reshape(1, -1).astype(np.float32)), projection)
        moved = (
            project(torch.from_numpy(changed.reshape(1, -1).astype(np.float32)), projection) - clean
        )
        out = protect_video(
            changed if canary else frame,
            projection,
            sigma1=sigma1,
            sigma2=1.0,
            rank=24,
            noise_seed=10**7 + offset + run,
        )
        direction = moved / moved.norm()
        signal = float((moved * direction).sum()) / sigma1 if canary else 0.0
        noise = float(((out.projected - clean) * direction).sum()) / sigma1 - signal
        scores.append([signal + noise / divisor for divisor in divisors])
    return np.array(scores)


def dprp_scales() -> tuple[float, float]:
    """(σ1, ε claimed at δ = DELTA) of Video-DPRP's P̃: ε = 6, δ = 1e-5, k = 24, d = 48, gaussian calibration, pixel
    neighbours, secret R. The claim is the Gaussian mechanism's exact curve at the calibrated sensitivity Δ1 (χ² bound,
    failing with probability β, which joins δ): μ = Δ1/σ1."""
    from tasks.privacy.accounting import gdp_epsilon
    from tasks.privacy.dprp_calibration import chi_square_bound, noise_scales

    scales = noise_scales(
        epsilon=6.0,
        delta=1e-5,
        budget_split=0.8,
        k=24,
        d=48,
        calibration="gaussian",
        neighbour="pixel",
        secret_projection=True,
    )
    beta = scales.delta1 / 2
    return scales.sigma1, gdp_epsilon(
        255 * math.sqrt(chi_square_bound(24, beta) / 24) / scales.sigma1, DELTA - beta
    )


def audit_dprp(
    divisors: tuple[float, ...] = (1.0,), runs: int = 4_000
) -> tuple[list[float], float]:
    """(ε̂ at σ1 / d for each divisor d, the ε claimed at δ = DELTA) of Video-DPRP's P̃ (:func:`dprp_scales`)."""
    sigma1, claimed = dprp_scales()
    worlds = [
        in_chunks(partial(dprp_scores, sigma1, canary=canary, divisors=divisors), runs, offset)
        for canary, offset in ((True, 0), (False, 10**6))
    ]
    return [
        best_bound(worlds[0][:, k], worlds[1][:, k], [0.5, 1.0, 1.5, 2.0, 2.5])
        for k in range(len(divisors))
    ], claimed


def dprp_divides_its_noise(divisor: float) -> None:
    """The mechanism run at σ1 / ``divisor`` scores what :func:`dprp_scores` derives for it from the runs at σ1, in
    both worlds (its first HEAD_RUNS runs): a P̃ whose noise did not scale with σ1 fails here."""
    sigma1, _ = dprp_scales()
    for canary, offset in ((True, 0), (False, 10**6)):
        derived = dprp_scores(sigma1, HEAD_RUNS, offset, canary, (divisor,))[:, 0]
        planted = dprp_scores(sigma1 / divisor, HEAD_RUNS, offset, canary)[:, 0] / divisor
        assert np.allclose(planted, derived, atol=1e-4), (canary, planted, derived)


def test_video_dprp_noise_holds_and_an_eighth_of_it_is_caught():
    """For one pixel value with a secret R the calibration is conservative by ~1.9× in μ (the χ² bound at β = δ1/2 over a
    typical row norm of R, k = 24), so σ1 halved still meets this claim (measured: ε̂ 1.25 against 2.96 at 3 000 runs):
    the planted bug this audit is shown to catch is σ1 / 8 (μ ≈ 4 against the claimed 0.95), scored from the same runs
    (:func:`dprp_scores`; 8 000 runs, not 16 000)."""
    dprp_divides_its_noise(8.0)
    (found, broken), claimed = audit_dprp(divisors=(1.0, 8.0))
    assert found <= claimed
    assert broken > claimed, (broken, claimed)


def default_dprp_scores(
    projection, change: torch.Tensor, sigma1: float, runs: int, offset: int, canary: bool
) -> np.ndarray:
    """Video-DPRP's P̃ of one mid-grey 16 × 16 frame (d = 768, k = 24) through :func:`protect_video` with the public
    ``projection``, along the canary's ΔP = Δx R, in units of σ1; the canary frame is the grey frame plus ``change``."""
    from tasks.dprp.mechanism import project, protect_video

    frame = np.full((1, 16, 16, 3), 128, dtype=np.uint8)
    changed = (
        (frame.reshape(1, -1).astype(np.int64) + change.numpy().astype(np.int64))
        .reshape(frame.shape)
        .astype(np.uint8)
    )
    clean = project(torch.from_numpy(frame.reshape(1, -1).astype(np.float64)), projection)
    moved = project(torch.from_numpy(changed.reshape(1, -1).astype(np.float64)), projection) - clean
    direction = moved / moved.norm()
    scores = []
    for run in range(runs):
        out = protect_video(
            changed if canary else frame,
            projection,
            sigma1=sigma1,
            sigma2=1.0,
            rank=24,
            noise_seed=10**7 + offset + run,
        )
        scores.append(float(((out.projected - clean) * direction).sum()) / sigma1)
    return np.array(scores)


def test_video_dprp_default_mode_holds_its_headline_and_the_chi_square_claim_for_a_public_r_is_caught():
    """The default: ``calibration: paper``, ``projection: shared`` (one public R), full rank. The auditor knows R and
    picks the frame change the paper's unit allows (ℓ2 ≤ 255/√k, whole grey levels) along R's top singular vector, so
    ‖ΔxR‖ reaches 255/√k·s_max(R) — 3.7× Theorem 3's χ² bound at d = 768, k = 24. ε̂ stays within the headline ε
    (operator norm), and exceeds both the ε the χ² bound claims for this σ1 and the paper's printed ε = 2."""
    from tasks.dprp.mechanism import Projection
    from tasks.privacy.dprp_calibration import noise_scales, operator_norm_bound

    d, k = 16 * 16 * 3, 24
    projection = Projection(seed=11, d=d, k=k)
    left, singular, _ = torch.linalg.svd(projection.dense().double(), full_matrices=False)
    scales = noise_scales(
        epsilon=2.0, delta=DELTA, budget_split=0.8, k=k, d=d, calibration="paper", neighbour="frame"
    )
    assert float(singular[0]) <= operator_norm_bound(
        d, k, scales.delta1 / 2
    )  # this R is inside the bound's 1 − β
    limit, size = 255 / math.sqrt(k), 255 / math.sqrt(k)
    while (
        float(torch.round(size * left[:, 0]).norm()) > limit
    ):  # whole grey levels within the unit's ℓ2 norm
        size *= 0.99
    change = torch.round(size * left[:, 0])
    with_canary = in_chunks(
        lambda n, first: default_dprp_scores(projection, change, scales.sigma1, n, first, True),
        4_000,
        0,
    )
    without = in_chunks(
        lambda n, first: default_dprp_scores(projection, change, scales.sigma1, n, first, False),
        4_000,
        10**6,
    )
    found = best_bound(with_canary, without, [0.5, 1.0, 1.5, 2.0, 2.5])
    assert found <= scales.epsilon, (found, scales.epsilon)
    chi_square = noise_scales(
        epsilon=2.0,
        delta=DELTA,
        budget_split=0.8,
        k=k,
        d=d,
        calibration="paper",
        neighbour="frame",
        secret_projection=True,
    )
    assert found > chi_square.epsilon and found > scales.paper_epsilon, (
        found,
        chi_square.epsilon,
        scales.paper_epsilon,
    )


@pytest.mark.slow
def test_the_heavy_audit_still_passes_as_built_and_catches_halved_noise(monkeypatch):
    """10x the runs: tighter bounds, so a regression of a few percent in the noise shows too."""
    found, claimed = audit_grouped(units=1, batch=1, sigma=1.0, relation=ADD_REMOVE, runs=10 * RUNS)
    assert found <= claimed
    original = methods.add_noise
    monkeypatch.setattr(
        methods,
        "add_noise",
        lambda summed, sigma, clip, stream: original(summed, sigma / 2, clip, stream),
    )
    broken, claimed = audit_grouped(
        units=1, batch=1, sigma=1.0, relation=ADD_REMOVE, runs=10 * RUNS
    )
    assert broken > claimed
    (found,), claimed = audit_dprp(runs=40_000)
    assert found <= claimed
