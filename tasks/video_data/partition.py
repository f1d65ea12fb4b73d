"""Which training videos each client holds (paper 003 §2.2: client k holds D_k, disjoint shards).

``federated.partition``:

    iid           videos shuffled and dealt round-robin: every client sees every action
    by_identity   every video of one person on one client (cameras in different homes: a
                  person never appears at two clients); identities dealt round-robin after a shuffle
    dirichlet     per action, client shares drawn from Dirichlet(α) (Hsu et al. 2019): small α,
                  skewed label mixes and unequal shard sizes

A shard is a list of row indices into the training split. An empty shard is refused: a client
with no data has no update to send and no n_k to weigh it by. A person is a video's primary subject
(:func:`tasks.video_data.subjects.people_in`): a video that names nobody is its own person, as in the ledger.
It lives below the stages: train-federated deals the shards, the index checks the params against them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks.core.errors import PrivharError
from tasks.video_data.subjects import people_in

SCHEMES = ("iid", "by_identity", "dirichlet")


def partition(
    rows: list[dict[str, Any]], clients: int, scheme: str, alpha: float, seed: int
) -> list[list[int]]:
    """Disjoint shards of ``rows`` (indices), one per client; one-line errors for impossible requests."""
    if clients < 1:
        raise PrivharError(f"federated.clients = {clients} is invalid: expected an integer >= 1")
    if clients > len(rows):
        raise PrivharError(
            f"federated.clients = {clients} is more than the {len(rows)} training videos: "
            "every client needs at least one"
        )
    generator = np.random.default_rng(seed)
    if scheme == "iid":
        order = generator.permutation(len(rows))
        shards = [sorted(int(i) for i in order[k::clients]) for k in range(clients)]
    elif scheme == "by_identity":
        shards = _by_identity(rows, clients, generator)
    elif scheme == "dirichlet":
        if not alpha > 0:
            raise PrivharError(
                f"federated.alpha = {alpha} is invalid: expected α > 0 (Dirichlet concentration)"
            )
        shards = _dirichlet(rows, clients, alpha, generator)
    else:
        raise PrivharError(
            f"federated.partition = {scheme!r} is invalid: expected one of {', '.join(SCHEMES)}"
        )
    for k, shard in enumerate(shards):
        if not shard:
            raise PrivharError(
                f"federated.partition = {scheme}: client {k} of {clients} got no training video "
                f"({_why_empty(scheme, rows, clients)}); use fewer clients or another partition"
            )
    return shards


def _by_identity(
    rows: list[dict[str, Any]], clients: int, generator: np.random.Generator
) -> list[list[int]]:
    owners = [people_in(row, index)[0] for index, row in enumerate(rows)]
    people = sorted(set(owners))
    order = [people[i] for i in generator.permutation(len(people))]
    home = {person: index % clients for index, person in enumerate(order)}
    shards: list[list[int]] = [[] for _ in range(clients)]
    for index, owner in enumerate(owners):
        shards[home[owner]].append(index)
    return shards


def _dirichlet(
    rows: list[dict[str, Any]], clients: int, alpha: float, generator: np.random.Generator
) -> list[list[int]]:
    shards: list[list[int]] = [[] for _ in range(clients)]
    for label in sorted({int(row["label"]) for row in rows}):
        members = [i for i, row in enumerate(rows) if int(row["label"]) == label]
        members = [members[i] for i in generator.permutation(len(members))]
        shares = generator.dirichlet([alpha] * clients)
        cuts = (np.cumsum(shares)[:-1] * len(members)).round().astype(int)
        for k, part in enumerate(np.split(np.array(members, dtype=int), cuts)):
            shards[k].extend(int(i) for i in part)
    return [sorted(shard) for shard in shards]


def _why_empty(scheme: str, rows: list[dict[str, Any]], clients: int) -> str:
    if scheme == "by_identity":
        return f"{len({people_in(row, index)[0] for index, row in enumerate(rows)})} people for {clients} clients"
    if scheme == "dirichlet":
        return "the Dirichlet draw gave it no share of any action; raise federated.alpha"
    return f"{len(rows)} videos for {clients} clients"
