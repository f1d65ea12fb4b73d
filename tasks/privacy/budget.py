"""Each person's privacy budget: ``privacy.max_epsilon`` over every DP release, by sequential composition.

The person is the unit (docs/privacy.md): a person in m videos is protected by a release at its *group*
ε over those videos, computed exactly from the composed mechanism where a tighter bound than m·ε
exists — the mixture-of-Gaussians PLD for DP-SGD (:func:`tasks.privacy.accounting.group_epsilon`), Gaussian
DP for Video-DPRP and the federated clients, m·features·ε for pure ε-LDP codes — never the per-video ε
summed. A person's total is the sum of those group ε over the releases that hold them.

The DP releases of the pipeline, in the order the plan makes them: the Video-DPRP copies
(``dprp.epsilons``, each a release of every video, both splits), then each private method's models
(``private.methods`` × ``private.epsilons`` × that ε's seeds: ``private.seeds_at_epsilon``, ``private.seeds`` or
``report.seeds``), each trained on the training split: a model trained again from another seed is another release
of the same people), then the federated models (``federated.aggregations`` × ``federated.tunings`` × that
tuning's seeds: ``federated.seeds_per_tuning`` or ``report.seeds``), then the ldp stage's randomized codes (one
release per finite ``ldp.video_epsilons``, of the training split). A release that would take any
person past the cap refuses before it does any work. Post-processing is free: models trained on a
DPRP copy add nothing.

With a finite cap, releases without a DP guarantee — anonymized copies, models trained on raw or
anonymized clips, the ε = ∞ references, and every release whose randomness is ``seeded`` (reproducible
from params, so not private) — are refused too (:func:`check_unprotected`), unless
``privacy.allow_unprotected_releases`` is true; the report lists them as unbounded.

The cap counts the releases earlier runs made too (:mod:`tasks.privacy.release_ledger`, in the MLflow store, per
``privacy.budget``): each DP stage records its release once its output is complete (:func:`record_made`), and a
release is checked against every release recorded in its budget plus the planned releases before it that have
not been made yet (reserved, so the plan's order decides who gets the budget, whatever order the stages run in).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.core.dp_params import DprpParams, FederatedParams, PrivacyParams, PrivateParams, tuned
from tasks.core.errors import PrivharError
from tasks.core.parallel import map_on_processes
from tasks.core.params_files import PlanParams
from tasks.core.private_catalogue import CATALOGUE
from tasks.core.seeds import federated_seeds, private_seeds, seed_suffix
from tasks.privacy.accounting import calibrate_noise, group_epsilon, poisson_schedule, relation_of
from tasks.privacy.dprp_calibration import dataset_scales
from tasks.privacy.federated_accounting import calibrate, person_epsilon
from tasks.privacy.ldp_codes import baseline_feature_counts, feature_count
from tasks.privacy.release_ledger import record_releases, recorded
from tasks.video_data.subjects import people_in, privacy_units, videos_per_person

# (the rows of the release's splits) -> each person's ε under that release
PersonEpsilons = Callable[[list[dict[str, Any]]], dict[int, float]]


@dataclass(frozen=True)
class PlannedRelease:
    name: str  # dprp-eps2.0, dp_sgd-eps0.5: the key of the copy or model
    epsilon: float  # per unit, as the release claims it
    splits: tuple[str, ...]  # which splits' videos it releases
    person_epsilons: PersonEpsilons
    stage: str  # the DP stage that makes it: its plan file is data/budget/<stage>.json


def federated_release(aggregation: str, tuning: str) -> str:
    """The name of the train-federated stage's model of ``aggregation`` × ``tuning`` as a release."""
    return f"federated-{aggregation}-{tuning}"


def ldp_release(epsilon: float, features: str = "dcaconv") -> str:
    """The name of the ldp stage's release of ``features`` codes (DCAConv, or a paper 002 baseline: raw_pixels,
    hog_bovw) at ε per feature (its ledger row, its budget check)."""
    return f"ldp-eps{epsilon:g}" if features == "dcaconv" else f"ldp-{features}-eps{epsilon:g}"


def _dprp(params: DprpParams, epsilon: float, secret: bool) -> PersonEpsilons:
    def person_epsilons(rows: list[dict[str, Any]]) -> dict[int, float]:
        d = int(rows[0]["height"]) * int(rows[0]["width"]) * 3
        scales = dataset_scales(params, epsilon, d, secret)
        frames = max(int(row["n_frames"]) for row in rows)
        return {
            person: scales.person_epsilon(count, frames)[0]
            for person, count in videos_per_person(rows).items()
        }

    return person_epsilons


def _private(params: PrivateParams, method: str, epsilon: float) -> PersonEpsilons:
    relation = relation_of(method)
    unit = CATALOGUE[method].unit_under(params.unit)

    def person_epsilons(rows: list[dict[str, Any]]) -> dict[int, float]:
        _, count, held = privacy_units(rows, unit)
        rate, steps = poisson_schedule(
            params.public_size.get(unit) or count, params.batch_size, params.epochs
        )
        sigma = calibrate_noise(
            epsilon, params.delta, rate, steps, accountant=params.accountant, relation=relation
        )
        return {
            person: group_epsilon(sigma, rate, steps, params.delta, units, relation=relation)
            for person, units in held.items()
        }

    return person_epsilons


def _federated(params: FederatedParams) -> PersonEpsilons:
    def person_epsilons(rows: list[dict[str, Any]]) -> dict[int, float]:
        epochs = params.rounds * params.local_epochs
        sigma = calibrate(params.epsilon, epochs, params.delta)
        return {
            person: person_epsilon(sigma, epochs, count, params.delta)
            for person, count in videos_per_person(rows).items()
        }

    return person_epsilons


def _ldp(per_video: float) -> PersonEpsilons:
    def person_epsilons(rows: list[dict[str, Any]]) -> dict[int, float]:
        return {
            person: count * per_video for person, count in videos_per_person(rows).items()
        }  # pure ε-LDP: exact sum

    return person_epsilons


def _dprp_releases(params: PlanParams) -> list[PlannedRelease]:
    """One DPRP copy of both splits per dprp.epsilons."""
    secret = params.privacy.randomness == "secure"
    return [
        PlannedRelease(
            f"dprp-eps{epsilon}",
            epsilon,
            ("train", "test"),
            _dprp(params.dprp, epsilon, secret),
            f"dprp-eps{epsilon}",
        )
        for epsilon in params.dprp.epsilons
    ]


def _private_releases(params: PlanParams) -> list[PlannedRelease]:
    """One model per private method, ε and seed; the seeds of one model share its mechanism (check_budget
    computes it once)."""
    private, report = params.private, params.report
    releases = []
    for method in private.methods:
        for epsilon in private.epsilons:
            mechanism = _private(private, method, epsilon)
            releases += [
                PlannedRelease(
                    f"{method}-eps{epsilon}{seed_suffix(seed)}",
                    epsilon,
                    ("train",),
                    mechanism,
                    f"train-private-{method}",
                )
                for seed in range(private_seeds(private, report, epsilon))
            ]
    return releases


def _federated_releases(params: PlanParams) -> list[PlannedRelease]:
    """One federated model per tuning, aggregation and seed, all at federated.epsilon per client."""
    federated, report = params.federated, params.report
    releases = []
    for (
        tuning
    ) in federated.tunings:  # a tuning's own local epochs set its σ (federated.recipe_per_tuning)
        mechanism = _federated(tuned(federated, tuning))
        releases += [
            PlannedRelease(
                federated_release(aggregation, tuning) + seed_suffix(seed),
                federated.epsilon,
                ("train",),
                mechanism,
                "train-federated",
            )
            for aggregation in federated.aggregations
            for seed in range(federated_seeds(federated, report, tuning))
        ]
    return releases


def _ldp_releases(params: PlanParams) -> list[PlannedRelease]:
    """The DCAConv codes and paper 002's baselines: each randomized at every finite ε, each feeding published
    scores."""
    ldp = params.ldp
    counts = {
        "dcaconv": feature_count(ldp.video_first_filters, ldp.video_pool, tuple(ldp.video_crop)),
        **baseline_feature_counts(tuple(ldp.video_crop)),
    }
    return [
        PlannedRelease(
            ldp_release(epsilon, name),
            epsilon * features,
            ("train",),
            _ldp(epsilon * features),
            "ldp",
        )
        for name, features in counts.items()
        for epsilon in ldp.video_epsilons
        if math.isfinite(epsilon)
    ]


def planned_releases(params: PlanParams) -> list[PlannedRelease]:
    """Every DP release of the pipeline, in plan order."""
    return (
        _dprp_releases(params)
        + _private_releases(params)
        + _federated_releases(params)
        + _ldp_releases(params)
    )


def subjects_by_split(rows: Iterable[dict[str, Any]]) -> dict[str, set[int]]:
    """The identities (data subjects) in each split of a manifest; a row naming nobody is its own subject."""
    found: dict[str, set[int]] = {}
    for index, row in enumerate(rows):
        found.setdefault(row["split"], set()).update(people_in(row, index))
    return found


def check_unprotected(privacy: PrivacyParams, what: str) -> None:
    """Refuse a release without a DP guarantee (one line) when the cap is finite and such releases are not allowed."""
    if math.isfinite(privacy.max_epsilon) and not privacy.allow_unprotected_releases:
        raise PrivharError(
            f"privacy.max_epsilon = {privacy.max_epsilon:g} is finite and {what} has no DP guarantee; "
            "set privacy.allow_unprotected_releases: true to release it anyway (the report lists it as unbounded)"
        )


Entry = tuple[str, dict[int, float]]  # a planned release and each person's ε under it


def _entries(
    params: PlanParams,
    rows: list[dict[str, Any]],
    only: Collection[str] | None = None,
    computed: dict[int, dict[int, float]] | None = None,
) -> Iterator[Entry]:
    """The plan's releases in order (those named in ``only``, if given), each with its persons' ε (computed once per
    mechanism: the seeds of a model request the same ε), lazily: a check stops at its release. ``computed``: the
    persons' ε already known, by the mechanism's index in :func:`distinct_mechanisms`."""
    plan = planned_releases(params)
    index_of = {
        id(planned.person_epsilons): k for k, planned in enumerate(distinct_mechanisms(plan))
    }
    computed = dict(computed or {})
    for planned in plan:
        if only is not None and planned.name not in only:
            continue
        index = index_of[id(planned.person_epsilons)]
        if index not in computed:
            computed[index] = _persons(planned, rows)
        yield planned.name, computed[index]


def distinct_mechanisms(plan: Sequence[PlannedRelease]) -> list[PlannedRelease]:
    """The first release of each mechanism of the plan (the seeds of one model share their persons' ε), in plan order."""
    first: dict[int, PlannedRelease] = {}
    for planned in plan:
        first.setdefault(id(planned.person_epsilons), planned)
    return list(first.values())


def _persons(planned: PlannedRelease, rows: list[dict[str, Any]]) -> dict[int, float]:
    """Each person's ε under ``planned``, from the rows of the splits it releases."""
    holding = [row for row in rows if row["split"] in planned.splits]
    return planned.person_epsilons(holding) if holding else {}


def mechanism_persons(
    params: PlanParams, rows: list[dict[str, Any]], index: int
) -> dict[int, float]:
    """:func:`_persons` of the plan's ``index``-th distinct mechanism: a worker process reads the plan again (its
    releases hold closures, which do not pickle) and gets the same one (the plan is a function of the params)."""
    return _persons(distinct_mechanisms(planned_releases(params))[index], rows)


def all_persons(
    params: PlanParams, rows: list[dict[str, Any]], workers: int
) -> dict[int, dict[int, float]]:
    """Every mechanism's persons' ε, the mechanisms spread over ``workers`` processes: the accountants (PRV σ
    calibration, per-person PLD mixtures) are single-threaded Python, 55 s of one core for the default plan."""
    count = len(distinct_mechanisms(planned_releases(params)))
    found = map_on_processes(
        functools.partial(mechanism_persons, params, rows),
        list(range(count)),
        workers=workers,
        desc="budget: each person's ε per mechanism",
        unit="mechanism",
    )
    return dict(enumerate(found))


def plan_files(
    params: PlanParams, rows: list[dict[str, Any]], workers: int = 1
) -> dict[str, list[dict[str, Any]]]:
    """What the budget stage writes, per DP stage: every planned release up to the stage's last, in plan order, with each
    person's ε. A stage's file changes when, and only when, something its verdicts depend on changes: with no cap
    (``privacy.max_epsilon: .inf``) that is its own releases alone (what its ledger records), so a Video-DPRP ablation
    does not retrain the private models."""
    stages = {planned.name: planned.stage for planned in planned_releases(params)}
    entries = [
        {
            "release": name,
            "persons": {str(person): epsilon for person, epsilon in sorted(persons.items())},
        }
        for name, persons in _entries(params, rows, computed=all_persons(params, rows, workers))
    ]
    if math.isinf(params.privacy.max_epsilon):
        return {
            stage: [entry for entry in entries if stages[entry["release"]] == stage]
            for stage in dict.fromkeys(stages.values())
        }
    return {stages[entry["release"]]: entries[: index + 1] for index, entry in enumerate(entries)}


@dataclass(frozen=True)
class BudgetPlan:
    """What a DP stage checks its releases against: the plan's release names in order, and each release's persons'
    ε for the stage's rows. From the budget stage's file (:func:`read_plan`), or derived from the params where a
    stage runs on its own (:func:`derived_plan`: computed lazily, a check stops at its release)."""

    names: tuple[str, ...]
    entries: Callable[[list[dict[str, Any]], Collection[str] | None], Iterator[Entry]]
    source: Path | None  # the plan file; None: derived from the params

    def not_planned(self, release: str) -> str:
        """The one-line error for a release this plan does not hold."""
        if self.source is None:
            return (
                f"privacy budget: {release!r} is not a planned DP release ({', '.join(self.names)})"
            )
        return f"{self.source}: {release} is not in this budget plan; expected the plan of the stage that makes it"


def read_plan(path: Path) -> BudgetPlan:
    """The budget stage's file for one DP stage (``data/budget/<stage>.json``), read once."""
    try:
        loaded = json.loads(path.read_text())
        entries = [
            (
                entry["release"],
                {int(person): float(eps) for person, eps in entry["persons"].items()},
            )
            for entry in loaded
        ]
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        raise PrivharError(
            f"{path}: not a budget plan ({error}); expected the budget stage's output"
        ) from None

    def listed(rows: list[dict[str, Any]], only: Collection[str] | None) -> Iterator[Entry]:
        return (entry for entry in entries if only is None or entry[0] in only)

    return BudgetPlan(tuple(name for name, _ in entries), listed, path)


def derived_plan(params: PlanParams) -> BudgetPlan:
    """The plan computed from the params (a stage run without the budget stage's file)."""
    names = tuple(planned.name for planned in planned_releases(params))
    return BudgetPlan(names, functools.partial(_entries, params), None)


def check_budget(
    privacy: PrivacyParams, release: str, rows: list[dict[str, Any]], plan: BudgetPlan
) -> None:
    """Refuse ``release`` (one line) if it would take a person past ``privacy.max_epsilon``, or if the cap is finite and
    its randomness is seeded (not private)."""
    if release not in plan.names:
        raise PrivharError(plan.not_planned(release))
    if math.isinf(privacy.max_epsilon):
        return
    if privacy.randomness == "seeded":
        check_unprotected(privacy, f"{release} (privacy.randomness: seeded, so not private)")
    made, spent = recorded(
        privacy.budget
    )  # every release made in this budget, by earlier runs included
    for name, requested in plan.entries(rows, None):
        if name != release and name in made:
            continue  # made already (by this plan's stage or an earlier run): counted in ``spent``
        if name == release:
            for person, epsilon in sorted(requested.items()):
                if spent.get(person, 0.0) + epsilon > privacy.max_epsilon:
                    raise PrivharError(
                        f"privacy.max_epsilon = {privacy.max_epsilon:g}: person {person} has spent ε = "
                        f"{spent.get(person, 0.0):.4g} before {release}, which requests ε = {epsilon:.4g} "
                        "more for them (group privacy over their videos, sequential composition; spent: "
                        f"the releases recorded in budget {privacy.budget!r} and this plan's earlier "
                        "ones); raise the cap, drop a release or start a new privacy.budget"
                    )
            return
        for person, epsilon in requested.items():
            spent[person] = spent.get(person, 0.0) + epsilon


def record_made(
    privacy: PrivacyParams,
    releases: str | Sequence[str],
    rows: list[dict[str, Any]],
    plan: BudgetPlan,
) -> None:
    """Enter ``releases`` (planned DP releases whose outputs are now complete) in their budget's persistent ledger."""
    wanted = [releases] if isinstance(releases, str) else list(releases)
    found = dict(plan.entries(rows, wanted))
    missing = [release for release in wanted if release not in found]
    if missing:
        raise PrivharError(f"privacy budget: {missing[0]!r} is not a planned DP release")
    record_releases(
        privacy.budget, {release: found[release] for release in wanted}, privacy.randomness
    )
