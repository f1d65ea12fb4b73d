"""A federation as the stage configures it: the clients' recipe and noise, the model key of each (aggregation,
tuning, ε), when FedNova is FedAvg, and one federated training through the chosen transport (paper 003, Algorithm 1)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tasks.core.dp_params import FederatedParams
from tasks.core.dp_randomness import DpRandomness
from tasks.core.errors import PrivharError
from tasks.core.guarantee import check_delta
from tasks.core.item_randomness import derive_seed
from tasks.core.params import BaseParams
from tasks.core.seeds import seed_keys
from tasks.federated.client import LocalRecipe
from tasks.federated.inputs import Split
from tasks.federated.rounds import Federation, FederationResult, in_process, run_rounds
from tasks.video_models.device import resolve_device

MB = 1e6


def federation_of(
    base: BaseParams,
    params: FederatedParams,
    noise_multiplier: float,
    aggregation: str,
    randomness: DpRandomness,
    seed: int = 0,
) -> Federation:
    recipe = LocalRecipe(
        params.local_epochs,
        params.batch_size,
        params.learning_rate,
        params.momentum,
        params.max_grad_norm,
        noise_multiplier,
        params.grad_sample_mode,
        device=str(resolve_device(base.device)),
    )
    return Federation(
        params.clients,
        params.rounds,
        params.client_fraction,
        aggregation,
        params.delta,
        derive_seed(base.seed, "federated", *seed_keys(seed)),
        recipe,
        secure=randomness.private,
    )


def federated_model(aggregation: str, tuning: str, epsilon: float, private_epsilon: float) -> str:
    """A federated model's key: ``fedavg-selective`` at ``federated.epsilon``, ``fedavg-selective-epsinf`` for its
    reference without noise (when ``federated.epsilon`` itself is finite).

    >>> federated_model("fedavg", "full", 1.33, 1.33), federated_model("fedavg", "full", math.inf, 1.33)
    ('fedavg-full', 'fedavg-full-epsinf')
    """
    reference = math.isinf(epsilon) and math.isfinite(private_epsilon)
    return f"{aggregation}-{tuning}" + ("-epsinf" if reference else "")


def fednova_is_fedavg(params: FederatedParams, shards: list[list[int]]) -> bool:
    """True when every client takes the same local steps τ_k = E·⌈N_k / B⌉: FedNova's normalisation is then the identity
    (tasks/federated/aggregation.py), so its model at each ε is FedAvg's and is trained once (here: one step each)."""
    return (
        len({math.ceil(len(shard) / min(params.batch_size, len(shard))) for shard in shards}) == 1
    )


def check_inputs(params: FederatedParams, shards: list[list[int]]) -> None:
    smallest = min(len(shard) for shard in shards)
    counted = f"the smallest client holds {smallest} videos"
    check_delta("federated.delta", params.delta, smallest, "N_k", counted)
    for name in params.tunings:
        if not name.replace("_", "").isalnum():
            raise PrivharError(
                f"federated.tunings: name {name!r} is invalid: expected letters, digits and '_'"
            )


def federate(
    transport: str,
    split: Split,
    federation: Federation,
    counts: list[int],
    on_round: Callable[[dict[str, Any]], None],
) -> FederationResult:
    """Algorithm 1 in this process, or as Flower apps on Flower's simulation engine (``federated.transport``)."""
    if transport == "flower":
        from tasks.federated.flower_app import simulate

        return simulate(
            split.tail,
            split.shards,
            split.test,
            federation,
            counts,
            split.full_model_bytes,
            on_round,
        )
    return run_rounds(
        split.tail,
        federation,
        counts,
        in_process(split.tail, split.shards, federation.recipe),
        split.test,
        split.full_model_bytes,
        on_round,
    )
