"""The one-run audit of a federated release (paper 003 Algorithm 1): gradient canaries at one client, through that
client's own DP-SGD, in one extra federation that is never saved or registered.

The federation is the release's: its clients, shards, rounds, selection, aggregation and local recipe (Opacus on
shuffled fixed-size batches, clipping to C, σ), with the client randomness of the release (OS entropy unless seeded).
The head gains m canary columns (:mod:`tasks.privacy.gradient_canaries`); every client's inputs are 0 there, so the
real videos train as released. The m canaries are videos of the audited client: under replace-one (the federated
accountant's relation, :mod:`tasks.privacy.federated_accounting`) each is a unit, and an "out" canary is the "in" one
negated, its gradient nearly opposite: the replacement that moves the clipped batch sum most (2C).

The auditor sees every local iterate of the audited client (more than the server, which sees Δ_k): per round it undoes
the momentum (reset each round) and scores each canary as train-private's audit does, with q = 1 / ⌈N_k / B_k⌉, the
share of an epoch's steps that hold it.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import torch
from torch import nn

from tasks.core.head_features import head_of
from tasks.core.models import head_name
from tasks.core.randomness import DpStream
from tasks.core.seeding import derive_seed
from tasks.core.selective import trainable_parameters
from tasks.federated.client import ClientResult, LocalRecipe, Shard, Tensors, client_round
from tasks.federated.rounds import Federation, run_rounds
from tasks.privacy.accounting import REPLACE_ONE
from tasks.privacy.federated_accounting import epsilon_of
from tasks.privacy.gradient_canaries import (
    CANARY_INPUT,
    Iterates,
    RunAudit,
    StepMechanism,
    canary_scores,
    widened,
)
from tasks.privacy.one_run_audit import audit


def trains_head_alone(tail: nn.Module) -> bool:
    """True when the clients train the head's weight and bias and nothing else: the canaries' columns are then seen
    by nothing but the head (a trained backbone would mix them)."""
    name = head_name(tail)
    return set(trainable_parameters(tail)) == {f"{name}.weight", f"{name}.bias"}


def padded(shard: Shard, canaries: int) -> Shard:
    """``shard`` with ``canaries`` zero channels after its own: the same logits through the widened head."""
    inputs = shard.inputs
    zeros = inputs.new_zeros((len(inputs), canaries, *inputs.shape[2:]))
    return Shard(torch.cat([inputs, zeros], dim=1), shard.labels)


def with_canaries(
    shard: Shard, columns: torch.Tensor, included: torch.Tensor, labels: torch.Tensor, width: int
) -> Shard:
    """``shard`` (padded) with canaries after its videos: canary j is :data:`CANARY_INPUT` on channel
    ``width`` + ``columns[j]`` (all of it: the head's pool, max or mean, then reads the value), negated when it is
    "out"."""
    m = len(labels)
    inputs = shard.inputs
    canary = inputs.new_zeros((m, *inputs.shape[1:]))
    value = torch.where(included, CANARY_INPUT, -CANARY_INPUT).to(inputs)
    canary[torch.arange(m), width + columns] = value.view(m, *[1] * (inputs.dim() - 2))
    return Shard(torch.cat([inputs, canary]), torch.cat([shard.labels, labels]))


def opacus_normaliser(count: int, batch: int) -> int:
    """What Opacus divides a shuffled batch's noised sum by: int(N / ⌈N / B⌉) (its expected batch size)."""
    return int(count / math.ceil(count / batch))


def placement(counts: list[int], batch_size: int, canaries: int) -> torch.Tensor:
    """(m,) the client of each canary: first the room left in each client's last batch (B·⌈N_k / B⌉ − N_k: there a
    canary adds no step, so each client takes the release's steps and, holding one batch, the auditor knows the step
    that holds each canary), then one client after another."""
    room = [batch_size * math.ceil(n / batch_size) - n for n in counts]
    clients = [k for k, free in enumerate(room) for _ in range(free)][:canaries]
    clients += [i % len(counts) for i in range(canaries - len(clients))]
    return torch.tensor(clients, dtype=torch.long)


def audit_federation(
    tail: nn.Module,
    shards: list[Shard],
    test: Shard,
    federation: Federation,
    full_model_bytes: int,
    stream: DpStream,
    canaries: int,
    confidence: float,
    clients: torch.Tensor | None = None,
) -> RunAudit:
    """One audited federation of ``tail`` (head alone trainable) with ``canaries`` canaries, each "in" with
    probability ½ from ``stream``, at the clients :func:`placement` gives (or ``clients``); ε̂ at ``confidence``
    against the largest ε of a client that holds canaries (its rounds taken part in)."""
    included = torch.zeros(canaries, dtype=torch.bool)
    included[stream.poisson_sample(canaries, 0.5)] = True
    recipe = federation.recipe
    if clients is None:
        clients = placement([len(shard.labels) for shard in shards], recipe.batch_size, canaries)
    name, head = head_name(tail), head_of(tail)
    labels = torch.arange(canaries) % head.out_features
    wide = copy.deepcopy(tail)
    wide.set_submodule(name, widened(head, canaries))
    width = head.in_features
    inputs = [padded(shard, canaries) for shard in shards]
    for k in range(len(shards)):
        mine = torch.nonzero(clients == k).flatten()
        inputs[k] = with_canaries(inputs[k], mine, included[mine], labels[mine], width)
    recorded: list[tuple[int, Iterates]] = []

    def transport(
        round_index: int, selected: list[int], broadcast: Tensors, seeds: list[int]
    ) -> list[ClientResult]:
        results = []
        for k, seed in zip(selected, seeds):
            seen = Iterates(broadcast[f"{name}.weight"], broadcast[f"{name}.bias"], width)
            recorded.append((k, seen))
            on_step = lambda local, seen=seen: seen.record(head_of(local))  # noqa: E731
            results.append(client_round(wide, broadcast, inputs[k], recipe, seed, on_step))
        return results

    own = dataclasses.replace(federation, seed=derive_seed(federation.seed, "audit"))
    counts = [len(shard.labels) for shard in inputs]
    result = run_rounds(wide, own, counts, transport, padded(test, canaries), full_model_bytes)
    scores, share = _scores(recorded, clients, labels, counts, recipe)
    found = audit(scores, included.numpy(), federation.delta, confidence)
    epochs = [result.participations[k] * recipe.local_epochs for k in set(clients.tolist())]
    claimed = max(epsilon_of(recipe.noise_multiplier, e, federation.delta) for e in epochs)
    return RunAudit(found, claimed, share)


def _scores(
    recorded: list[tuple[int, Iterates]],
    clients: torch.Tensor,
    labels: torch.Tensor,
    counts: list[int],
    recipe: LocalRecipe,
) -> tuple[np.ndarray, float]:
    """Each canary's score summed over the rounds its client took part in, from that client's local iterates; the
    share of the canaries' steps whose gradient reached C."""
    scores, clipped = np.zeros(len(labels)), []
    for k, seen in recorded:
        mine = torch.nonzero(clients == k).flatten()
        if not len(mine):
            continue
        batch = min(recipe.batch_size, counts[k])
        mechanism = StepMechanism(
            recipe.learning_rate,
            recipe.momentum,
            recipe.max_grad_norm,
            recipe.noise_multiplier,
            1
            / math.ceil(
                counts[k] / batch
            ),  # the share of an epoch's steps that hold a given canary
            opacus_normaliser(counts[k], batch),
            REPLACE_ONE,
        )
        seen.weights = [weight[:, mine] for weight in seen.weights]  # this client's canary columns
        round_scores, round_clipped = canary_scores(seen, labels[mine], mechanism)
        scores[mine.numpy()] += round_scores
        clipped.append(round_clipped.flatten())
    return scores, float(torch.cat(clipped).double().mean()) if clipped else 0.0
