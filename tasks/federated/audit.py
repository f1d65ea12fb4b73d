"""The one-run audit of a federated release (paper 003 Algorithm 1): gradient canaries at the clients, through each
client's own DP-SGD, in one extra federation that is never saved or registered.

The federation is the release's: its clients, shards, rounds, selection, aggregation and local recipe (Opacus on
shuffled fixed-size batches, clipping to C, σ, the tuning's trainable tensors), with the client randomness of the
release (OS entropy unless seeded). The head gains m canary columns (:mod:`tasks.privacy.gradient_canaries`) that every
real video leaves at 0, so the real videos train as released (:class:`CanaryRows`). The canaries are videos of the
clients: under replace-one (the federated accountant's relation, :mod:`tasks.privacy.federated_accounting`) each is a
unit, and an "out" canary is the "in" one negated, its gradient nearly opposite: the replacement that moves the clipped
batch sum most (2C). They fill the room in each client's batches first (:func:`placement`).

The auditor sees every local iterate of every client (more than the server, which sees Δ_k): per round it undoes the
momentum (reset each round) and scores each canary as train-private's audit does, with q = 1 / ⌈N_k / B⌉, the share of
an epoch's steps that hold it (1: the auditor knows the step).
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import torch
from torch import nn

from tasks.core.dp_randomness import DpStream
from tasks.core.item_randomness import derive_seed
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
from tasks.privacy.one_run_audit import audit, draw_included
from tasks.video_models.head_features import head_of
from tasks.video_models.models import head_name


class CanaryRows(nn.Module):
    """``model`` with its head widened by m canary columns, on flat rows ``[clip (or the tail's input) | m canary
    values | flag]``. A real video's row (flag 0, canary values 0) gives the model's own logits and gradients, 0 on
    the canary columns. A canary's row (flag 1) has its backbone features zeroed, so its gradient lies in its own column
    and the head's bias alone, whatever the tuning trains: the same Dirac canary for full and selective tuning."""

    def __init__(self, model: nn.Module, canaries: int, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.model, self.canaries, self.shape = model, canaries, shape
        head = model.blocks[-1]
        self.width = head.proj.in_features
        head.proj = widened(head.proj, canaries)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """The model's forward (pytorchvideo ``Net``: each block in turn; the head's pool, then its projection: the
        dropout is off for DP-SGD and the output pool of a 1×1×1 map is the identity), canary columns appended."""
        m = self.canaries
        x = rows[:, : -m - 1].reshape(len(rows), *self.shape)
        for block in self.model.blocks[:-1]:
            x = block(x)
        head = self.model.blocks[-1]
        features = head.pool(x).flatten(1) * (1 - rows[:, -1:])
        return head.proj(torch.cat([features, rows[:, -m - 1 : -1]], dim=1))


def rows_of(shard: Shard, canaries: int) -> Shard:
    """``shard``'s videos as :class:`CanaryRows` rows: flat, their canary values and flag 0."""
    inputs = shard.inputs.flatten(1)
    return Shard(
        torch.cat([inputs, inputs.new_zeros((len(inputs), canaries + 1))], 1), shard.labels
    )


def with_canaries(
    shard: Shard, columns: torch.Tensor, included: torch.Tensor, labels: torch.Tensor, canaries: int
) -> Shard:
    """``shard`` (rows) with canaries after its videos: canary j is :data:`CANARY_INPUT` on canary column
    ``columns[j]`` of ``canaries``, negated when it is "out", its clip 0 and its flag 1."""
    rows = shard.inputs
    canary = rows.new_zeros((len(labels), rows.shape[1]))
    first = rows.shape[1] - canaries - 1
    canary[torch.arange(len(labels)), first + columns] = torch.where(
        included, CANARY_INPUT, -CANARY_INPUT
    ).to(rows)
    canary[:, -1] = 1.0
    return Shard(torch.cat([rows, canary]), torch.cat([shard.labels, labels]))


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
    """One audited federation of ``tail`` (the module the clients train, on ``shards``) with ``canaries`` canaries,
    each "in" with probability ½ from ``stream``, at the clients :func:`placement` gives (or ``clients``); ε̂ at
    ``confidence`` against the largest ε of a client that holds canaries (its rounds taken part in)."""
    included = draw_included(stream, canaries)
    recipe = federation.recipe
    if clients is None:
        clients = placement([len(shard.labels) for shard in shards], recipe.batch_size, canaries)
    wide = CanaryRows(copy.deepcopy(tail), canaries, tuple(shards[0].inputs.shape[1:]))
    labels = torch.arange(canaries) % head_of(wide.model).out_features
    inputs = [rows_of(shard, canaries) for shard in shards]
    for k in range(len(shards)):
        mine = torch.nonzero(clients == k).flatten()
        inputs[k] = with_canaries(inputs[k], mine, included[mine], labels[mine], canaries)
    name = f"model.{head_name(wide.model)}"
    recorded: list[tuple[int, Iterates]] = []

    def transport(
        round_index: int, selected: list[int], broadcast: Tensors, seeds: list[int]
    ) -> list[ClientResult]:
        results = []
        for k, seed in zip(selected, seeds):
            seen = Iterates(broadcast[f"{name}.weight"], broadcast[f"{name}.bias"], wide.width)
            recorded.append((k, seen))
            on_step = lambda local, seen=seen: seen.record(head_of(local.model))  # noqa: E731
            results.append(client_round(wide, broadcast, inputs[k], recipe, seed, on_step))
        return results

    own = dataclasses.replace(federation, seed=derive_seed(federation.seed, "audit"))
    counts = [len(shard.labels) for shard in inputs]
    result = run_rounds(wide, own, counts, transport, rows_of(test, canaries), full_model_bytes)
    scores, share = _scores(recorded, clients, included, labels, counts, recipe)
    # composed Gaussian steps, no amplification claimed (tasks/privacy/federated_accounting.py): the f-DP bound applies
    found = audit(scores, included.numpy(), federation.delta, confidence, gaussian=True)
    epochs = [result.participations[k] * recipe.local_epochs for k in set(clients.tolist())]
    claimed = max(epsilon_of(recipe.noise_multiplier, e, federation.delta) for e in epochs)
    return RunAudit(found, claimed, share)


def _scores(
    recorded: list[tuple[int, Iterates]],
    clients: torch.Tensor,
    included: torch.Tensor,
    labels: torch.Tensor,
    counts: list[int],
    recipe: LocalRecipe,
) -> tuple[np.ndarray, float]:
    """Each canary's score summed over the rounds its client took part in, from that client's local iterates; the
    share of the included canaries' steps whose gradient reached C (:attr:`RunAudit.clipped_share`)."""
    scores, clipped = np.zeros(len(labels)), []
    for k, seen in recorded:
        mine = torch.nonzero(clients == k).flatten()
        if not len(mine):
            continue
        batch = min(recipe.batch_size, counts[k])
        steps = math.ceil(counts[k] / batch)  # an epoch's; one of them holds a given canary
        mechanism = StepMechanism(
            recipe.learning_rate,
            recipe.momentum,
            recipe.max_grad_norm,
            recipe.noise_multiplier,
            1 / steps,
            int(
                counts[k] / steps
            ),  # Opacus's expected batch size, what it divides the noised sum by
            REPLACE_ONE,
        )
        seen.weights = [weight[:, mine] for weight in seen.weights]  # this client's canary columns
        round_scores, round_clipped = canary_scores(seen, labels[mine], mechanism)
        scores[mine.numpy()] += round_scores
        clipped.append(round_clipped[:, included[mine]].flatten())
    return scores, float(torch.cat(clipped).double().mean()) if clipped else 0.0
