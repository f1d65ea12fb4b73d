"""``privhar bench private-selection``: what choosing the private recipe on the private data would cost (issue 85).

Issue 85 allows two places to choose the recipe: the public set (``privhar bench private-recipe``), or folds of the
private training split with the search accounted by private selection over a random number of trials (Papernot &
Steinke 2022, "Hyperparameter tuning with Rényi differential privacy": Thm 2 for the truncated negative binomial
count of trials — logarithmic, shape 0; geometric, shape 1 — and Thm 6 for a Poisson count). dp-accounting's
``RdpAccountant`` implements both bounds (``RepeatAndSelectDpEvent``). For a total ε per person (add/remove of a
person and all their videos, δ = ``private.delta``) this finds the noise multiplier every trial of the person-level
recipe may use, and the ε a single unselected run at that noise spends (the stage's accountant): the ε the selected
recipe effectively trains at (part of the gap, about 9 % in σ here, is RDP's looseness against PRV: no tighter
accountant of private selection is in these libraries). The held-out validation persons a fold needs are not
counted (they would cost more). Nothing private is read: this is accounting only.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import brentq

from tasks.core.dp_params import PrivateParams
from tasks.core.params_files import load_section
from tasks.core.storage import atomic_write_bytes
from tasks.privacy.accounting import ADD_REMOVE, calibrate_noise, sampled_gaussian_epsilon
from tasks.private.inputs import recipe_of
from tasks.private.methods import Recipe, schedule

TOTALS = (1.0, 2.0)
# (name, dp-accounting's shape, mean number of trials)
SELECTIONS = (
    ("poisson", math.inf, 1.5),
    ("poisson", math.inf, 4.0),
    ("logarithmic", 0.0, 2.5),
    ("geometric", 1.0, 2.0),
    ("geometric", 1.0, 4.0),
)
ORDERS = [*np.linspace(1.01, 10.0, 91), *np.geomspace(10.5, 400.0, 120)]


def selected_epsilon(
    sigma: float, rate: float, steps: int, delta: float, shape: float, mean: float
) -> float:
    """ε (add/remove, RDP accountant) of the best of a random number of runs of the Poisson-sampled Gaussian
    recipe (σ, q, steps), the count of runs of dp-accounting's ``shape`` and ``mean``."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    run = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(sigma)), steps
    )
    accountant = rdp_privacy_accountant.RdpAccountant(orders=ORDERS)
    accountant.compose(dp_event.RepeatAndSelectDpEvent(run, mean, shape))
    return float(accountant.get_epsilon(delta))


def _excess(
    sigma: float, rate: float, steps: int, delta: float, shape: float, mean: float, total: float
) -> float:
    return selected_epsilon(sigma, rate, steps, delta, shape, mean) - total


def selection_rows(recipe: Recipe, persons: int) -> list[dict[str, Any]]:
    """Per total ε and count of trials: each trial's σ, the stage's σ without selection, and the single-run ε of a
    trial (``recipe.accountant``)."""
    rate, steps = schedule(persons, recipe)
    rows = []
    for total in TOTALS:
        alone = calibrate_noise(
            total, recipe.delta, rate, steps, accountant=recipe.accountant, relation=ADD_REMOVE
        )
        for name, shape, mean in SELECTIONS:
            sigma = brentq(
                _excess,
                alone,
                20 * alone,
                args=(rate, steps, recipe.delta, shape, mean, total),
                xtol=1e-4,
            )
            rows.append(
                {
                    "total_epsilon": total,
                    "trials": name,
                    "mean_trials": mean,
                    "sigma_trial": round(sigma, 4),
                    "sigma_alone": round(alone, 4),
                    "sigma_ratio": round(sigma / alone, 3),
                    "trial_epsilon": round(
                        sampled_gaussian_epsilon(
                            sigma,
                            rate,
                            steps,
                            recipe.delta,
                            accountant=recipe.accountant,
                            relation=ADD_REMOVE,
                        ),
                        3,
                    ),
                }
            )
    return rows


def run_bench(params_path: Path, out: Path) -> dict[str, Any]:
    """The cost table for params.yaml's person-level recipe, written to ``out`` (JSON)."""
    started = time.perf_counter()
    params = load_section(params_path, "private", PrivateParams)
    recipe = recipe_of(params, "dp_sgd_person")
    persons = recipe.public_size or 1
    rate, steps = schedule(persons, recipe)
    record = {
        "what": "private selection over a random number of trials (Papernot & Steinke 2022, Thm 2 and 6; "
        "dp-accounting RdpAccountant, RepeatAndSelectDpEvent) of the person-level recipe, at a total ε",
        "unit": "person",
        "relation": ADD_REMOVE,
        "delta": recipe.delta,
        "sample_rate": rate,
        "steps": steps,
        "trial_accountant": recipe.accountant,
        "rows": selection_rows(recipe, persons),
        "seconds": round(time.perf_counter() - started, 1),
    }
    atomic_write_bytes(out, (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode())
    return record
