"""Each data subject's privacy budget: ``privacy.max_epsilon`` over every DP release, by sequential composition.

The DP releases of the pipeline, in the order the plan makes them: the Video-DPRP copies
(``dprp.epsilons``, each a release of every video, both splits), then each private method's models
(``private.methods`` × ``private.epsilons``, each trained on the training split), then the federated
models (``federated.aggregations`` × ``federated.tunings``, each at ``federated.epsilon`` per client), then the
ldp stage's randomized codes (one release per finite ``ldp.video_epsilons``, of the training split: ε per
feature × features per video, sequential composition over the features). A subject's spend
before a release is the sum of the ε of the releases before it that hold one of their videos;
a release that would take any subject past the cap refuses before it does any work.
Post-processing is free: models trained on a DPRP copy add nothing. Releases without a DP
guarantee (anonymized copies, models trained on them or on raw clips, the ε = ∞ references) are not
capped: the ledger lists them as unbounded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.core.errors import PrivharError
from tasks.core.params import DprpParams, FederatedParams, LdpParams, PrivacyParams, PrivateParams, load_section
from tasks.ldp.dcaconv import feature_count


@dataclass(frozen=True)
class PlannedRelease:
    name: str  # dprp-eps2.0, dp_sgd-eps0.5: the key of the copy or model
    epsilon: float
    splits: tuple[str, ...]  # which splits' videos it releases


def planned_releases(params_path: Path) -> list[PlannedRelease]:
    """Every DP release of the pipeline, in plan order."""
    dprp = load_section(params_path, "dprp", DprpParams)
    private = load_section(params_path, "private", PrivateParams)
    releases = [PlannedRelease(f"dprp-eps{epsilon}", epsilon, ("train", "test")) for epsilon in dprp.epsilons]
    releases += [PlannedRelease(f"{method}-eps{epsilon}", epsilon, ("train",))
                 for method in private.methods for epsilon in private.epsilons]
    federated = load_section(params_path, "federated", FederatedParams)
    releases += [PlannedRelease(federated_release(aggregation, tuning), federated.epsilon, ("train",))
                 for tuning in federated.tunings for aggregation in federated.aggregations]
    ldp = load_section(params_path, "ldp", LdpParams)
    features = feature_count(ldp.video_first_filters, ldp.video_pool, tuple(ldp.video_crop))
    releases += [PlannedRelease(ldp_release(epsilon), epsilon * features, ("train",))
                 for epsilon in ldp.video_epsilons if math.isfinite(epsilon)]
    return releases


def federated_release(aggregation: str, tuning: str) -> str:
    """The name of the train-federated stage's model of ``aggregation`` × ``tuning`` as a release."""
    return f"federated-{aggregation}-{tuning}"


def ldp_release(epsilon: float) -> str:
    """The name of the ldp stage's release at ε per feature (its ledger row, its budget check)."""
    return f"ldp-eps{epsilon:g}"


def subjects_by_split(rows: Iterable[dict[str, Any]]) -> dict[str, set[int]]:
    """The identities (data subjects) in each split of a manifest."""
    found: dict[str, set[int]] = {}
    for row in rows:
        people = row.get("identities")
        people = [row.get("identity")] if people is None else list(people)
        found.setdefault(row["split"], set()).update(int(person) for person in people if person is not None)
    return found


def check_budget(params_path: Path, release: str, rows: list[dict[str, Any]]) -> None:
    """Refuse ``release`` (one line) if it would take a subject past ``privacy.max_epsilon``."""
    cap = load_section(params_path, "privacy", PrivacyParams).max_epsilon
    plan = planned_releases(params_path)
    names = [planned.name for planned in plan]
    if release not in names:
        raise PrivharError(f"privacy budget: {release!r} is not a planned DP release ({', '.join(names)})")
    subjects = subjects_by_split(rows)
    spent: dict[int, float] = {}
    for planned in plan:
        holders = set().union(*(subjects.get(split, set()) for split in planned.splits))
        if planned.name == release:
            for subject in sorted(holders):
                if spent.get(subject, 0.0) + planned.epsilon > cap:
                    raise PrivharError(f"privacy.max_epsilon = {cap:g}: subject {subject} has spent ε = "
                                       f"{spent.get(subject, 0.0):g} before {release}, which requests ε = {planned.epsilon:g} "
                                       f"more (sequential composition); raise the cap or drop a release")
            return
        for subject in holders:
            spent[subject] = spent.get(subject, 0.0) + planned.epsilon
