"""The server's side (paper 003 eq. 13, Algorithm 1 lines 3 and 16): who trains this round, and how updates merge.

Masked updates Δ_k = Mask_θt(w_k − w_t) (eq. 12) are dicts holding the trainable tensors only;
the server adds the aggregate to those tensors and leaves every other one untouched.

    FedAvg   w_{t+1} = w_t + Σ_k p_k Δ_k,                       p_k = n_k / Σ_{j∈S_t} n_j   (eq. 13)
    FedNova  w_{t+1} = w_t + τ_eff Σ_k p_k Δ_k / ‖a_k‖₁,        τ_eff = Σ_k p_k ‖a_k‖₁

FedNova is Wang et al. 2020 (paper 003's ref. [15]), eq. 6-7 and §4: Δ_k / ‖a_k‖₁ is client k's
normalised average gradient, and τ_eff re-scales it to a common effective step count. With local
SGD, a_k = (1, …, 1) over τ_k steps, so ‖a_k‖₁ = τ_k; with momentum ρ (reset every round)
‖a_k‖₁ = [τ_k − ρ(1 − ρ^τ_k)/(1 − ρ)] / (1 − ρ) (Wang et al. §4, "momentum SGD"). Paper 003's
eq. 13 prints A(Δ_k) = Δ_k / τ_k without τ_eff: that shrinks every step by about τ — a defect we
do not copy. With equal τ_k FedNova equals FedAvg (a test checks it).
"""

from __future__ import annotations

import numpy as np
import torch

from tasks.core.errors import PrivharError

Tensors = dict[str, torch.Tensor]
RULES = ("fedavg", "fednova")


def select_clients(clients: int, fraction: float, generator: np.random.Generator) -> list[int]:
    """S_t: max(1, round(fraction · K)) clients drawn without replacement (Algorithm 1 line 3)."""
    if not 0 < fraction <= 1:
        raise PrivharError(
            f"federated.client_fraction = {fraction} is invalid: expected a value in (0, 1]"
        )
    count = max(1, round(fraction * clients))
    return sorted(int(k) for k in generator.choice(clients, size=count, replace=False))


def weights(counts: list[int]) -> list[float]:
    """p_k = n_k / Σ_j n_j over the clients of the round."""
    total = sum(counts)
    if total <= 0 or min(counts) <= 0:
        raise PrivharError(f"federated: every client of a round needs data, got n_k = {counts}")
    return [count / total for count in counts]


def local_step_norm(steps: int, momentum: float) -> float:
    """‖a_k‖₁ of Wang et al.: τ for SGD, [τ − ρ(1 − ρ^τ)/(1 − ρ)] / (1 − ρ) for momentum ρ."""
    if momentum == 0:
        return float(steps)
    return (steps - momentum * (1 - momentum**steps) / (1 - momentum)) / (1 - momentum)


def aggregate(
    global_state: Tensors,
    updates: list[Tensors],
    counts: list[int],
    steps: list[int],
    rule: str,
    momentum: float = 0.0,
) -> Tensors:
    """w_{t+1} from w_t and the round's masked updates, by ``rule`` (fedavg | fednova)."""
    if rule not in RULES:
        raise PrivharError(
            f"federated.aggregation = {rule!r} is invalid: expected one of {', '.join(RULES)}"
        )
    if not updates:
        raise PrivharError("federated: a round with no client update")
    p = weights(counts)
    if rule == "fedavg":
        scales = p
    else:
        norms = [local_step_norm(tau, momentum) for tau in steps]
        if min(norms) <= 0:
            raise PrivharError(
                f"federated: FedNova needs at least one local step per client, got τ = {steps}"
            )
        effective = sum(pk * a for pk, a in zip(p, norms))
        scales = [effective * pk / a for pk, a in zip(p, norms)]
    new_state = dict(global_state)
    for name in updates[0]:
        change = sum(scale * update[name] for scale, update in zip(scales, updates))
        new_state[name] = global_state[name] + change
    return new_state
