"""What a private training run records of its releases: ε after each epoch of the learning curve, the guarantee a
model claims (its unit and relation), each person's ε under person-level DP, the training record and its log lines."""

from __future__ import annotations

import math
from typing import Any

from tasks.core.guarantee import PrivacyGuarantee
from tasks.core.private_catalogue import CATALOGUE
from tasks.core.tracking import StageRun
from tasks.private.accounting import SgdPrivacy
from tasks.private.methods import Outcome, Recipe

CURVE_POINTS = (
    4  # ε is drawn at this many epochs: each point is one accountant call (Opacus PRV: 0.55 s here)
)


def curve_epochs(epochs: int, points: int = CURVE_POINTS) -> list[int]:
    """The epochs after which a model's ε curve is computed: ``points`` of them, evenly spaced, the last epoch
    included. Every epoch's ε cost 16 accountant calls per model at 16 epochs, 30 s of the first DP-SGD stage.

    >>> curve_epochs(16), curve_epochs(2), curve_epochs(6)
    ([4, 8, 12, 16], [1, 2], [2, 3, 5, 6])
    """
    return sorted({math.ceil(epochs * point / points) for point in range(1, points + 1)})


def epsilon_by_epoch(privacy: SgdPrivacy, epochs: int) -> dict[int, float]:
    """{epoch: ε spent after it} at :func:`curve_epochs`, by the model's own accountant."""
    per_epoch = privacy.steps // epochs
    return {
        epoch: SgdPrivacy(
            privacy.noise_multiplier,
            privacy.sample_rate,
            per_epoch * epoch,
            privacy.delta,
            privacy.accountant,
            privacy.relation,
        ).epsilon()
        for epoch in curve_epochs(epochs)
    }


def claimed_guarantee(
    method: str, privacy: SgdPrivacy, unit: str, randomness: str
) -> PrivacyGuarantee:
    entry = CATALOGUE[method]
    # ε holds for the background tokens only; the real person is public
    if entry.masked and entry.learns_from == "raw":
        spent = privacy.guarantee(f"{unit} (masked adjacency)", randomness)
        return PrivacyGuarantee(
            spent.epsilon,
            spent.delta,
            spent.accountant + "; the real person is NOT protected",
            spent.unit,
            spent.relation,
            randomness,
        )
    return privacy.guarantee(
        f"{unit} (masked adjacency, labels public)" if entry.masked else unit, randomness
    )


def person_epsilons(
    guarantee: PrivacyGuarantee, privacy: SgdPrivacy, units_per_person: dict[int, int]
) -> dict[int, float]:
    """Each person's ε: group privacy over the units holding them (1 unit: the model's own ε)."""
    if not math.isfinite(guarantee.epsilon):
        return {person: math.inf for person in units_per_person}
    if guarantee.epsilon == 0:
        return {person: 0.0 for person in units_per_person}
    groups = {
        units: (guarantee.epsilon if units == 1 else privacy.group_epsilon(units))
        for units in set(units_per_person.values())
    }
    return {person: round(groups[units], 6) for person, units in units_per_person.items()}


def training_record(
    method: str,
    key: str,
    target: float,
    guarantee: PrivacyGuarantee,
    outcome: Outcome,
    trainable: int,
    recipe: Recipe,
    epsilon_person_max: float,
) -> dict[str, Any]:
    paper = (
        outcome.privacy.paper_epsilon()
        if CATALOGUE[method].masked and math.isfinite(guarantee.epsilon)
        else None
    )
    return {
        "model": key,
        "method": method,
        "target_epsilon": target,
        "epsilon": round(guarantee.epsilon, 6),
        "delta": guarantee.delta,
        "unit": guarantee.unit,
        "relation": guarantee.relation,
        "epsilon_person_max": epsilon_person_max,
        "paper_epsilon": "" if paper is None else round(paper, 6),
        "randomness": guarantee.randomness,
        "noise_multiplier": round(outcome.privacy.noise_multiplier, 6),
        "sample_rate": round(outcome.privacy.sample_rate, 6),
        "steps": outcome.privacy.steps,
        "max_grad_norm": recipe.max_grad_norm,
        "accountant": guarantee.accountant,
        "trainable_parameters": trainable,
        "final_loss": round(outcome.history[-1]["loss"], 6),
    }


def log_mechanism(
    run: StageRun, outcome: Outcome, recipe: Recipe, seeds: int, guarantee: PrivacyGuarantee
) -> None:
    """The DP-SGD parameters and the guarantee as the model run's params (its ε and δ are its curves already)."""
    run.log_mechanism(
        {
            "noise_multiplier": outcome.privacy.noise_multiplier,
            "sample_rate": outcome.privacy.sample_rate,
            "steps": outcome.privacy.steps,
            "max_grad_norm": recipe.max_grad_norm,
            "seeds": seeds,
        },
        guarantee,
    )


def log_release(run: StageRun, outcome: Outcome, recipe: Recipe, target: float) -> None:
    """One model's run: its loss after each epoch, the ε spent at :func:`curve_epochs`, and the DP-SGD parameters."""
    finite = not math.isinf(target)
    spent = (
        epsilon_by_epoch(outcome.privacy, recipe.epochs)
        if finite and outcome.privacy.noise_multiplier > 0
        else {}
    )
    history = [
        (
            record["epoch"],
            {
                "loss": record["loss"],
                **({"epsilon": spent[record["epoch"]]} if record["epoch"] in spent else {}),
            },
        )
        for record in outcome.history
    ]
    if finite:
        history.append(
            (
                None,
                {
                    "noise_multiplier": outcome.privacy.noise_multiplier,
                    "sample_rate": outcome.privacy.sample_rate,
                    "steps": outcome.privacy.steps,
                    "max_grad_norm": recipe.max_grad_norm,
                    "delta": recipe.delta,
                },
            )
        )
    run.log_history(history)
