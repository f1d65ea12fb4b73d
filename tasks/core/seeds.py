"""Training seeds: where each seed's model lives, and the key it is scored under.

One training run is one draw: CPU kernels differ between machines, and a model trained again from
another seed scores differently by more than the gaps the papers claim. So every trained row is
trained ``report.seeds`` times (issue 19) and reported as the mean with a Student-t 95 % confidence
interval over the seeds (:mod:`tasks.core.intervals`). Seed 0 is the model the pipeline registers and serves, at
``<key>/model.pt``; seed i ≥ 1 lives at ``<key>/seed<i>/model.pt`` and is scored under the key ``<key>-seed<i>``.

A private model trained again is a second release of the same people: every seed of a DP method
is a release in the privacy budget and the ledger (:mod:`tasks.privacy.budget`).
"""

from __future__ import annotations

import re
from pathlib import Path

from tasks.core.dp_params import FederatedParams, PrivateParams
from tasks.core.params import ReportParams

SEED_FOLDER = re.compile(r"seed([1-9][0-9]*)")


def seed_suffix(seed: int) -> str:
    """The key suffix of seed ``seed`` ("" for seed 0, the registered model).

    >>> seed_suffix(0), seed_suffix(2)
    ('', '-seed2')
    """
    return "" if seed == 0 else f"-seed{seed}"


def seed_keys(seed: int) -> tuple[object, ...]:
    """What a training seed adds to the keys its randomness is derived from: nothing for seed 0, so the registered
    model keeps the seeds it had before seeds existed.

    >>> seed_keys(0), seed_keys(2)
    ((), ('seed', 2))
    """
    return () if seed == 0 else ("seed", seed)


def seed_folder(folder: Path, seed: int) -> Path:
    """Where seed ``seed`` of the model in ``folder`` is saved."""
    return folder if seed == 0 else folder / f"seed{seed}"


def checkpoint_key(checkpoint: Path) -> str:
    """The key a checkpoint is scored under: its folder's name, with ``-seed<i>`` for a seed's sub-folder.

    >>> checkpoint_key(Path("data/train/baseline/model.pt")), checkpoint_key(Path("data/train/baseline/seed2/model.pt"))
    ('baseline', 'baseline-seed2')
    """
    folder = checkpoint.parent
    found = SEED_FOLDER.fullmatch(folder.name)
    return f"{folder.parent.name}-seed{found.group(1)}" if found else folder.name


def base_key(key: str) -> tuple[str, int]:
    """(the model's key, the seed) of a scored key.

    >>> base_key("dp_sgd-eps2.0-seed1"), base_key("baseline")
    (('dp_sgd-eps2.0', 1), ('baseline', 0))
    """
    found = re.fullmatch(r"(.+)-seed([1-9][0-9]*)", key)
    return (found.group(1), int(found.group(2))) if found else (key, 0)


def seed_scores(metrics: dict[str, dict[str, float]], key: str, score: str) -> list[float]:
    """``score`` of the model ``key`` and of each of its seeds in evaluate's metrics (seed 0 first)."""
    found = [(0, metrics[key][score])] if score in metrics.get(key, {}) else []
    found += sorted(
        (seed, scores[score])
        for other, scores in metrics.items()
        for name, seed in [base_key(other)]
        if seed and name == key and score in scores
    )
    return [value for _, value in found]


def private_seeds(private: PrivateParams, report: ReportParams, epsilon: float) -> int:
    """Training seeds of the private rows at ``epsilon``: ``private.seeds_at_epsilon[epsilon]``, else ``private.seeds``,
    else ``report.seeds`` (the stage and the budget plan both count each seed as a release, so they read it here)."""
    return private.seeds_at_epsilon.get(epsilon) or private.seeds or report.seeds


def federated_seeds(federated: FederatedParams, report: ReportParams, tuning: str) -> int:
    """Training seeds of the federated rows of ``tuning`` (a row of ``federated.tunings``):
    ``federated.seeds_per_tuning[tuning]``, else ``report.seeds`` (the stage and the budget plan both read it here)."""
    return federated.seeds_per_tuning.get(tuning) or report.seeds


def federated_reference_seeds(federated: FederatedParams, report: ReportParams, tuning: str) -> int:
    """Seeds of the ε = ∞ reference rows of ``tuning``: ``federated.reference_seeds[tuning]``, at most the tuning's
    own seeds (seeds 0 … n − 1 of the DP rows get a reference; the references are no release, so no budget)."""
    seeds = federated_seeds(federated, report, tuning)
    return min(federated.reference_seeds.get(tuning) or seeds, seeds)


def family_seeds(report: ReportParams, family: str, default: int) -> int:
    """Training seeds of the train stage's models of ``family``: ``report.seeds_per_family[family]``, else ``default``
    (what the pipeline passes: ``report.seeds``). Seeds of a model trained on a released copy cost no privacy."""
    return report.seeds_per_family.get(family) or default
