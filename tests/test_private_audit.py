"""The one-run audit of the private trainers (tasks/private/audit.py) at small scale: it holds on the trainers as built,
under each relation and unit, and it catches the noise halved and the Poisson sampling made deterministic. Randomness
seeded (tests only, not private)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tasks.core.dp_randomness import DpRandomness, DpStream
from tasks.privacy.accounting import ADD_REMOVE, REPLACE_ONE
from tasks.privacy.gradient_canaries import CANARY_INPUT, RunAudit, widened
from tasks.private.audit import audit_training, with_canaries
from tasks.private.methods import PrivateData, Recipe
from tasks.private.stage import train_one

UNITS, WIDTH, CLASSES = 100, 8, 4


def recipe_for(relation: str, epochs: int = 4, batch: int = 25) -> Recipe:
    """q = batch / 100 (a public size of 100 units), epochs / q steps."""
    return Recipe(
        epochs=epochs,
        batch_size=batch,
        physical_batch_size=256,
        learning_rate=0.05,
        momentum=0.9,
        max_grad_norm=2.0,
        delta=1e-5,
        accountant="pld",
        relation=relation,
        public_size=UNITS,
        public_max_grad_norm=2.0,
    )


def features(method: str) -> PrivateData:
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(UNITS) % CLASSES
    units = torch.randn(CLASSES, WIDTH, generator=generator)[labels] + torch.randn(
        UNITS, WIDTH, generator=generator
    )
    if method == "multiclip":
        return PrivateData(units[:, None].repeat(1, 2, 1), labels)
    if method == "maskdp":
        every = torch.ones(UNITS, dtype=torch.bool)
        return PrivateData(
            units[:, None],
            labels,
            public=torch.randn(UNITS, WIDTH, generator=generator),
            has_private=every,
            has_public=every,
        )
    if method == "dp_sgd_person":
        return PrivateData(units[:, None], labels, owners=torch.arange(UNITS) // 2)
    return PrivateData(units[:, None], labels)


def audit_run(
    method: str, epsilon: float, seed: int = 0, epochs: int = 4, batch: int = 25
) -> RunAudit:
    """One audit run of ``method``'s trainer (Opacus for dp_sgd, else the grouped loop); batch = 100: q = 1."""
    relation = REPLACE_ONE if method == "maskdp" else ADD_REMOVE
    recipe = recipe_for(relation, epochs, batch)
    randomness = DpRandomness("seeded", seed)

    def train(module, data, on_step):
        return train_one(method, module, data, recipe, epsilon, randomness, 0, on_step, ("audit",))

    torch.manual_seed(seed)
    return audit_training(
        train,
        nn.Linear(WIDTH, CLASSES),
        features(method),
        recipe,
        randomness.stream("audit", method, epsilon),
    )


def audited(
    method: str, epsilon: float, seed: int = 0, epochs: int = 4, batch: int = 25
) -> tuple[float, float]:
    """(ε̂, the audit run's ε) of one audit run."""
    run = audit_run(method, epsilon, seed, epochs, batch)
    return run.found.epsilon_audited, run.epsilon_claimed


@pytest.mark.parametrize("method", ["dp_sgd", "dp_sgd_person", "multiclip", "maskdp"])
def test_it_holds_on_every_trainer_and_says_something_at_epsilon_8(method):
    found, claimed = audited(method, 2.0)
    assert 1.98 <= claimed <= 2.0 and found <= claimed
    found, claimed = audited(method, 8.0)
    assert 0.5 < found <= claimed, found


def test_an_eighth_of_the_noise_is_caught(monkeypatch):
    """One run does not catch the noise halved at these ε (ε̂ 0.1-0.5 against 1 and 0.7-1.3 against 2, at q = 0.1 and
    0.25): the many-run audits of tests/test_audit.py do. Divided by 8 it does, by a wide margin (ε̂ 2.3-3.1)."""
    original = DpStream.normal
    monkeypatch.setattr(DpStream, "normal", lambda self, std, like: original(self, std / 8, like))
    for method in ("dp_sgd", "multiclip"):
        found, claimed = audited(method, 1.0, batch=10)
        assert found > 1.5 * claimed, (method, found, claimed)


@pytest.mark.parametrize("method", ["dp_sgd", "dp_sgd_person", "multiclip", "maskdp"])
def test_at_full_batch_the_f_dp_bound_holds_and_reads_more_than_the_other(method):
    """q = 1 (the shipped recipe): every trainer's run is composed Gaussian steps, so the f-DP bound applies; at q =
    0.25 it does not and is left out."""
    for epsilon in (2.0, 8.0):
        run = audit_run(method, epsilon, epochs=8, batch=UNITS)
        assert run.found.fdp is not None and run.found.fdp.epsilon <= run.epsilon_claimed
    assert run.found.fdp.epsilon > run.found.epsilon_audited + 1.0, run.found
    assert audit_run(method, 8.0).found.fdp is None


def test_half_the_noise_is_caught_by_the_f_dp_bound(monkeypatch):
    """At q = 1 and ε = 4 (σ halved: μ doubled, ε ≈ 10 in truth) one run's f-DP ε̂ passes the claim on every trainer
    (4.6-6.3 over three audit seeds); the (ε, δ) bound from the same guesses stays below it (2.5-3.3)."""
    original = DpStream.normal
    monkeypatch.setattr(DpStream, "normal", lambda self, std, like: original(self, std / 2, like))
    for method in ("dp_sgd", "dp_sgd_person", "multiclip", "maskdp"):
        run = audit_run(method, 4.0, epochs=8, batch=UNITS)
        assert run.found.fdp.epsilon > 1.05 * run.epsilon_claimed, (method, run.found)


def test_a_canary_in_every_batch_is_caught(monkeypatch):
    """The plant takes every unit into every batch (the draw at q = 0.1); the canaries' own draw (½) is left as is."""
    original = DpStream.poisson_sample
    monkeypatch.setattr(
        DpStream,
        "poisson_sample",
        lambda self, count, rate: (
            torch.arange(count) if rate != 0.5 else original(self, count, rate)
        ),
    )
    for method in ("dp_sgd", "multiclip"):
        found, claimed = audited(method, 1.0, batch=10)
        assert found > 1.5 * claimed, (method, found, claimed)


def test_canaries_touch_only_their_own_columns_and_the_real_units_are_unchanged():
    data = features("maskdp")
    included = torch.tensor([True, False, True])
    labels = torch.tensor([0, 1, 2])
    swapped = with_canaries(
        data, labels, included, REPLACE_ONE
    )  # every canary a unit, the excluded at 0
    assert swapped.units.shape == (UNITS + 3, 1, WIDTH + 3)
    assert torch.equal(swapped.units[:UNITS, :, :WIDTH], data.units)
    assert not swapped.units[:UNITS, :, WIDTH:].any()
    canaries = swapped.units[UNITS:, 0]
    assert torch.equal(
        canaries[:, WIDTH:], torch.diag(torch.tensor([CANARY_INPUT, -CANARY_INPUT, CANARY_INPUT]))
    )
    assert not canaries[:, :WIDTH].any() and not swapped.public[UNITS:].any()
    assert swapped.has_private[UNITS:].all() and not swapped.has_public[UNITS:].any()
    person = with_canaries(features("dp_sgd_person"), labels, included, ADD_REMOVE)
    assert person.units.shape[0] == UNITS + 2 and person.owners[UNITS:].tolist() == [50, 51]
    head = nn.Linear(WIDTH, CLASSES)
    wide = widened(head, 3)
    inputs = torch.randn(5, WIDTH)
    padded = torch.cat([inputs, torch.zeros(5, 3)], dim=1)
    assert torch.allclose(wide(padded), head(inputs))
