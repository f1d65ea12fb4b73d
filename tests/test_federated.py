"""Federated private training (paper 003): clients, aggregation, masked updates, bytes, accounting, bad input."""

from __future__ import annotations

import io
import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.pld import PLDAccountant
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tasks.core.errors import PrivharError
from tasks.federated.aggregation import aggregate, local_step_norm, select_clients
from tasks.federated.client import (
    LocalRecipe,
    Shard,
    client_round,
    client_stream,
    serialized_bytes,
    trainable_state,
)
from tasks.federated.rounds import Federation, client_seed, in_process, run_rounds
from tasks.privacy.federated_accounting import calibrate, epsilon_of, paper_tls_epsilon
from tasks.privacy.opacus_randomness import StreamShuffle
from tasks.video_data.partition import partition


def toy_data(count: int = 48, features: int = 6, classes: int = 3, seed: int = 0) -> Shard:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % classes
    inputs = (
        torch.randn(count, features, generator=generator)
        + nn.functional.one_hot(labels, features).float() * 2
    )
    return Shard(inputs, labels)


def toy_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def federation(
    clients: int = 1, rounds: int = 3, aggregation: str = "fedavg", **recipe
) -> Federation:
    settings = {
        "local_epochs": 1,
        "batch_size": 16,
        "learning_rate": 0.1,
        "momentum": 0.0,
        "max_grad_norm": 1e6,
        "noise_multiplier": 0.0,
        **recipe,
    }
    return Federation(clients, rounds, 1.0, aggregation, 1e-3, 7, LocalRecipe(**settings))


def test_one_client_without_noise_or_clipping_is_centralised_training_step_for_step():
    """Noise 0, C → ∞, one client, E = 1: each round is one epoch of plain SGD over the same shuffled batches."""
    data, model = toy_data(), toy_model()
    setup = federation(rounds=3)
    train = in_process(model, [data], setup.recipe)
    broadcasts = []  # w_t as the server sends it: the state after each round

    def recording(round_index, selected, broadcast, seeds):
        broadcasts.append({name: tensor.clone() for name, tensor in broadcast.items()})
        return train(round_index, selected, broadcast, seeds)

    result = run_rounds(model, setup, [len(data.labels)], recording, data, 1)
    federated = [*broadcasts[1:], result.state]
    reference = toy_model()
    optimiser = torch.optim.SGD(reference.parameters(), lr=0.1)
    for round_index in range(1, 4):
        order = client_stream(
            client_seed(setup.seed, 0, round_index), 0
        )  # the client's shuffles, seeded
        loader = DataLoader(
            TensorDataset(data.inputs, data.labels),
            batch_size=16,
            sampler=StreamShuffle(len(data.labels), order),
        )
        for inputs, labels in loader:
            optimiser.zero_grad()
            nn.functional.cross_entropy(reference(inputs), labels).backward()
            optimiser.step()
        for name, value in trainable_state(reference).items():
            torch.testing.assert_close(
                federated[round_index - 1][name], value, rtol=1e-5, atol=1e-6
            )


def test_fedavg_is_the_weighted_mean_of_the_updates():
    start = {"w": torch.zeros(2)}
    updates = [{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([4.0, 8.0])}]
    merged = aggregate(start, updates, counts=[1, 3], steps=[5, 9], rule="fedavg")
    torch.testing.assert_close(merged["w"], torch.tensor([0.25 * 1 + 0.75 * 4, 0.75 * 8]))


def test_fednova_normalises_by_local_steps_and_rescales_by_the_effective_count():
    """Δ_k = τ_k · g_k (τ_k SGD steps of a constant gradient): FedNova averages g_k, then takes τ_eff = Σ p_k τ_k steps."""
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    updates = [{"w": 2 * g1}, {"w": 6 * g2}]
    merged = aggregate(
        {"w": torch.zeros(2)}, updates, counts=[10, 10], steps=[2, 6], rule="fednova"
    )
    torch.testing.assert_close(merged["w"], 4 * (0.5 * g1 + 0.5 * g2))
    fedavg = aggregate({"w": torch.zeros(2)}, updates, counts=[10, 10], steps=[2, 6], rule="fedavg")
    assert not torch.allclose(merged["w"], fedavg["w"])
    same = aggregate({"w": torch.zeros(2)}, updates, counts=[10, 30], steps=[4, 4], rule="fednova")
    torch.testing.assert_close(
        same["w"], aggregate({"w": torch.zeros(2)}, updates, [10, 30], [4, 4], "fedavg")["w"]
    )


def test_fednova_momentum_normaliser_is_the_sum_of_the_momentum_coefficients():
    rho, tau = 0.9, 7
    # a_k of Wang et al.: the weight of the j-th gradient in the sum after τ momentum steps
    literal = sum((1 - rho ** (tau - j)) / (1 - rho) for j in range(tau))
    assert local_step_norm(tau, rho) == pytest.approx(literal)
    assert local_step_norm(tau, 0.0) == tau


def test_masked_updates_hold_only_trainable_tensors_and_frozen_ones_never_change():
    data, model = toy_data(), toy_model()
    model[0].weight.requires_grad_(False)
    model[0].bias.requires_grad_(False)
    frozen = model[0].weight.detach().clone()
    shards = [Shard(data.inputs[:24], data.labels[:24]), Shard(data.inputs[24:], data.labels[24:])]
    setup = federation(clients=2, rounds=4, max_grad_norm=1.0, noise_multiplier=1.0, momentum=0.9)
    update = client_round(model, trainable_state(model), shards[0], setup.recipe, seed=3).update
    assert set(update) == {"2.weight", "2.bias"}
    result = run_rounds(model, setup, [24, 24], in_process(model, shards, setup.recipe), data, 1)
    assert set(result.state) == {"2.weight", "2.bias"}
    assert torch.equal(model[0].weight, frozen)


def test_bytes_are_the_serialised_trainable_tensors_and_smaller_than_a_full_update():
    data, model = toy_data(), toy_model()
    model[0].requires_grad_(False)
    full = serialized_bytes({name: p.detach() for name, p in model.named_parameters()})
    setup = federation(rounds=1)
    record = run_rounds(
        model, setup, [48], in_process(model, [data], setup.recipe), data, full
    ).history[0]
    buffer = io.BytesIO()
    torch.save({"2.weight": torch.zeros(3, 8), "2.bias": torch.zeros(3)}, buffer)
    assert record["bytes_per_client"] == buffer.getbuffer().nbytes
    assert (
        4 * 27 < record["bytes_per_client"] < 4 * 27 + 2000
    )  # float32 values plus torch.save's zip and names
    assert record["bytes_ratio"] == pytest.approx(record["bytes_per_client"] / full)


@pytest.mark.parametrize("epochs", [1, 3, 10])
def test_epsilon_matches_dp_accounting_pld_under_replace_one(epochs):
    sigma = 4.0
    accountant = PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.GaussianDpEvent(sigma), epochs)
    assert epsilon_of(sigma, epochs, 1e-5) == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-3)
    assert epsilon_of(calibrate(1.33, epochs, 1e-4), epochs, 1e-4) == pytest.approx(1.33, abs=1e-6)
    assert epsilon_of(0.0, epochs, 1e-5) == math.inf and epsilon_of(sigma, 0, 1e-5) == 0.0


def test_paper_eq11_is_the_printed_formula_and_no_bound():
    assert paper_tls_epsilon(32, 200, 2.0, 5, 1e-4) == pytest.approx(
        32 / 200 / 2.0 * math.sqrt(10 * math.log(1e4))
    )
    assert paper_tls_epsilon(100, 100, 2.0, 1, 1e-4) < epsilon_of(
        2.0, 1, 1e-4
    )  # q = 1: below the Gaussian's own ε


def test_noise_makes_training_differ_and_a_seed_repeats_it():
    data, model = toy_data(), toy_model()
    noisy = federation(rounds=2, max_grad_norm=1.0, noise_multiplier=2.0)
    runs = [
        run_rounds(model, noisy, [48], in_process(model, [data], noisy.recipe), data, 1).state
        for _ in range(2)
    ]
    clean = federation(rounds=2, max_grad_norm=1.0)
    plain = run_rounds(model, clean, [48], in_process(model, [data], clean.recipe), data, 1).state
    assert all(torch.equal(runs[0][name], runs[1][name]) for name in plain)
    assert not torch.allclose(runs[0]["2.weight"], plain["2.weight"])


def rows(identities: int, per_person: int = 4) -> list[dict]:
    return [
        {"identity": person, "label": index % 3}
        for person in range(identities)
        for index in range(per_person)
    ]


@pytest.mark.parametrize("scheme", ["iid", "by_identity", "dirichlet"])
def test_partitions_are_disjoint_and_cover_the_training_split(scheme):
    data = rows(6)
    shards = partition(data, 3, scheme, alpha=100.0, seed=0)
    assert sorted(i for shard in shards for i in shard) == list(range(len(data)))
    if scheme == "by_identity":
        homes = [{data[i]["identity"] for i in shard} for shard in shards]
        assert all(not (a & b) for n, a in enumerate(homes) for b in homes[n + 1 :])


def test_videos_that_name_nobody_are_each_their_own_person_under_by_identity():
    """Real footage without subjects: each unnamed video is its own person (as in the ledger), not one person
    "None" holding them all on one client."""
    unnamed = [{"identity": None, "label": index % 3} for index in range(6)]
    shards = partition(unnamed, 3, "by_identity", 0.5, 0)
    assert sorted(len(shard) for shard in shards) == [2, 2, 2]


def test_bad_input_is_one_line():
    with pytest.raises(
        PrivharError, match="federated.clients = 30 is more than the 24 training videos"
    ):
        partition(rows(6), 30, "iid", 0.5, 0)
    with pytest.raises(
        PrivharError, match=r"client \d of 8 got no training video \(6 people for 8 clients\)"
    ):
        partition(rows(6), 8, "by_identity", 0.5, 0)
    for fraction in (0.0, 1.5):
        with pytest.raises(
            PrivharError,
            match=rf"federated.client_fraction = {fraction} is invalid: expected a value in \(0, 1\]",
        ):
            select_clients(4, fraction, np.random.default_rng(0))
    with pytest.raises(PrivharError, match="every client of a round needs data"):
        aggregate(
            {"w": torch.zeros(1)}, [{"w": torch.ones(1)}], counts=[0], steps=[1], rule="fedavg"
        )
    with pytest.raises(PrivharError, match="federated.aggregation = 'fedsgd' is invalid"):
        aggregate(
            {"w": torch.zeros(1)}, [{"w": torch.ones(1)}], counts=[1], steps=[1], rule="fedsgd"
        )


def test_flower_simulation_walks_the_in_process_trajectory():
    """The ServerApp / ClientApp on Flower's simulation engine (messages on loopback): same seed, same rounds."""
    flower = pytest.importorskip(
        "tasks.federated.flower_app", reason="flwr is the 'federated' extra"
    )
    data, model = toy_data(count=60), toy_model()
    shards = [Shard(data.inputs[:36], data.labels[:36]), Shard(data.inputs[36:], data.labels[36:])]
    setup = federation(
        clients=2,
        rounds=2,
        aggregation="fednova",
        max_grad_norm=1.0,
        noise_multiplier=1.0,
        momentum=0.5,
        batch_size=8,
    )
    local = run_rounds(model, setup, [36, 24], in_process(model, shards, setup.recipe), data, 1)
    remote = flower.simulate(model, shards, data, setup, [36, 24], 1)
    assert [r["accuracy"] for r in remote.history] == [r["accuracy"] for r in local.history]
    for name, value in local.state.items():
        torch.testing.assert_close(remote.state[name], value, rtol=1e-4, atol=1e-5)
    assert [r["bytes_per_client"] for r in remote.history] == [
        r["bytes_per_client"] for r in local.history
    ]
