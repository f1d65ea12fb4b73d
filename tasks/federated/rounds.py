"""The federated loop (paper 003 Algorithm 1), written once for every transport.

``run_rounds`` holds the server's logic — select S_t, broadcast θ_t, aggregate the masked
updates (eq. 13), evaluate, account ε per client, measure the bytes — and takes the transport
as a function: in-process (:func:`in_process`, what ``make run`` uses) or Flower messages
(:mod:`tasks.federated.flower_app`). Given the same seed both walk the same trajectory: every
random draw is seeded by (seed, round, client), never by the order results arrive in.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tasks.core.item_randomness import derive_seed
from tasks.federated.aggregation import aggregate, select_clients
from tasks.federated.client import (
    ClientResult,
    LocalRecipe,
    Shard,
    client_round,
    load_trainable,
    serialized_bytes,
    trainable_state,
)
from tasks.privacy.federated_accounting import epsilon_of, paper_tls_epsilon

Tensors = dict[str, torch.Tensor]
# (round, selected clients, broadcast θ_t, per-client seeds) -> one result per selected client, in order
Transport = Callable[[int, list[int], Tensors, list[int]], list[ClientResult]]


SECRET_SEED = -1  # sent to a client: draw your shuffles and noise from your own OS entropy


def client_seed(seed: int, client: int, round_index: int, secure: bool = False) -> int:
    """The seed of client ``client``'s shuffles and noise in round ``round_index`` (noise uses seed + 1);
    :data:`SECRET_SEED` under secure randomness: the client's own OS entropy, known to nobody else."""
    if secure:
        return SECRET_SEED
    return derive_seed(seed, "federated", "client", client, "round", round_index) % 2**62


@dataclass(frozen=True)
class Federation:
    clients: int  # K
    rounds: int  # T
    client_fraction: float
    aggregation: str  # fedavg | fednova
    delta: float
    seed: int
    recipe: LocalRecipe
    secure: bool = (
        False  # clients' shuffles and noise from their own OS entropy (privacy.randomness: secure)
    )


@dataclass
class FederationResult:
    history: list[dict[str, Any]]
    state: Tensors  # final θ_t
    participations: list[int]  # rounds each client took part in
    epsilons: list[float] = field(default_factory=list)  # per client, valid accountant


def in_process(module: nn.Module, shards: list[Shard], recipe: LocalRecipe) -> Transport:
    """Clients as function calls in this process."""

    def train(
        round_index: int, selected: list[int], broadcast: Tensors, seeds: list[int]
    ) -> list[ClientResult]:
        return [
            client_round(module, broadcast, shards[k], recipe, seed)
            for k, seed in zip(selected, seeds)
        ]

    return train


@torch.no_grad()
def evaluate(
    module: nn.Module, state: Tensors, test: Shard, batch_size: int = 64
) -> tuple[float, float]:
    """(Top-1, mean cross-entropy) of ``module`` with θ_t = ``state`` on the test shard."""
    load_trainable(module, state)
    was_training = module.training
    module.eval()
    correct, loss = 0, 0.0
    for inputs, labels in zip(test.inputs.split(batch_size), test.labels.split(batch_size)):
        logits = module(inputs)
        correct += int((logits.argmax(1) == labels).sum())
        loss += float(F.cross_entropy(logits, labels, reduction="sum"))
    module.train(was_training)
    return correct / len(test.labels), loss / len(test.labels)


def _paper_eq11(federation: Federation, counts: list[int], participations: list[int]) -> float:
    """Paper 003's eq. 11 value (its approximation, printed beside the accountant's ε) of the most exposed client."""
    return max(
        paper_tls_epsilon(
            federation.recipe.batch_size,
            counts[k],
            federation.recipe.noise_multiplier,
            participations[k] * federation.recipe.local_epochs,
            federation.delta,
        )
        for k in range(federation.clients)
        if participations[k]
    )


def _traffic(results: list[ClientResult], full_model_bytes: int) -> dict[str, Any]:
    """The round's measured upload: serialised masked-update bytes per client, against a full-model update."""
    update_bytes = [serialized_bytes(r.update) for r in results]
    return {
        "bytes_per_client": float(np.mean(update_bytes)),
        "full_model_bytes": full_model_bytes,
        "bytes_ratio": float(np.mean(update_bytes)) / full_model_bytes,
        "local_steps": ",".join(str(r.steps) for r in results),
    }


def run_rounds(
    module: nn.Module,
    federation: Federation,
    counts: list[int],
    transport: Transport,
    test: Shard,
    full_model_bytes: int,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> FederationResult:
    """T rounds of Algorithm 1 from ``module``'s θ_t; ``counts`` are the clients' n_k (for p_k and ε)."""
    state = trainable_state(module)
    evaluator = copy.deepcopy(
        module
    )  # evaluation loads θ_t into a copy: ``module`` stays w_0 for the next run
    chooser = np.random.default_rng(derive_seed(federation.seed, "federated", "select"))
    participations = [0] * federation.clients
    history: list[dict[str, Any]] = []
    spent: list[float] = []
    sigma, epochs = federation.recipe.noise_multiplier, federation.recipe.local_epochs
    for round_index in range(1, federation.rounds + 1):
        started = time.perf_counter()
        selected = select_clients(federation.clients, federation.client_fraction, chooser)
        seeds = [client_seed(federation.seed, k, round_index, federation.secure) for k in selected]
        results = transport(round_index, selected, state, seeds)
        state = aggregate(
            state,
            [r.update for r in results],
            [r.count for r in results],
            [r.steps for r in results],
            federation.aggregation,
            federation.recipe.momentum,
        )
        seconds = time.perf_counter() - started
        for k in selected:
            participations[k] += 1
        accuracy, test_loss = evaluate(evaluator, state, test)
        spent = [
            epsilon_of(sigma, participations[k] * epochs, federation.delta)
            for k in range(federation.clients)
        ]
        record = {
            "round": round_index,
            "clients": ",".join(map(str, selected)),
            "accuracy": accuracy,
            "test_loss": test_loss,
            "train_loss": float(np.mean([r.loss for r in results])),
            "epsilon": max(spent),
            "paper_eq11_epsilon": _paper_eq11(federation, counts, participations),
            **_traffic(results, full_model_bytes),
            "seconds": seconds,
        }
        history.append(record)
        if on_round is not None:
            on_round(record)
    return FederationResult(
        history, state, participations, spent
    )  # ε per client after the last round
