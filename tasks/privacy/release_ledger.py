"""The DP releases actually made, kept in the MLflow store: what ``privacy.max_epsilon`` counts across runs.

A run's plan (:mod:`tasks.privacy.budget`) sees only the releases its params call for. Each run with secret
randomness releases the same people again — a second ``make run``, a ``dvc exp run`` with another ε — so the
cap also counts every earlier release of the same budget. Each DP stage, once its output is complete, records
its release here: one MLflow run in the experiment ``<experiment>-releases`` (the store's, so ``dvc exp``
experiments share it), tagged with the release's name and ``privacy.budget``, one metric ``person.<id>`` per
person with the ε they spent. A stage that makes many releases at once (a private method's training seeds)
enters them as one run, tagged with their names (``privhar.releases``, a JSON list) and each person's ε summed
over them: the cap composes releases sequentially (sums), so the run counts exactly what its releases would
one by one, at one store transaction instead of hundreds. A new ``privacy.budget`` name starts a fresh budget
(new data, new people).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from tasks.core.tracking import DEFAULT_EXPERIMENT, EXPERIMENT_ENV, configure

RELEASE_TAG, BUDGET_TAG, RANDOMNESS_TAG = "privhar.release", "privhar.budget", "privhar.randomness"
RELEASES_TAG = "privhar.releases"  # a run entering several releases: their names, a JSON list
PERSON_PREFIX = "person."
NAMES_PER_TAG = 5000  # characters of release names a run's tag holds (MLflow keeps 8000)


def _experiment_id() -> str:
    """The releases' experiment beside the pipeline's (created on first use)."""
    import mlflow

    configure()
    name = os.environ.get(EXPERIMENT_ENV, DEFAULT_EXPERIMENT) + "-releases"
    experiment = mlflow.get_experiment_by_name(name)
    return experiment.experiment_id if experiment is not None else mlflow.create_experiment(name)


def record_release(budget: str, release: str, persons: dict[int, float], randomness: str) -> None:
    """Enter one release made: each person's ε under it, in the budget ``budget``."""
    _enter(budget, release, {RELEASE_TAG: release}, persons, randomness)


def record_releases(
    budget: str, releases: Mapping[str, Mapping[int, float]], randomness: str
) -> None:
    """Enter several releases made at once (each person's ε under each), a run per ~5000 characters of their names."""
    for batch in _name_batches(list(releases)):
        if len(batch) == 1:
            record_release(budget, batch[0], dict(releases[batch[0]]), randomness)
            continue
        summed: dict[int, float] = {}
        for release in batch:
            for person, epsilon in releases[release].items():
                summed[person] = summed.get(person, 0.0) + epsilon
        name = f"{batch[0]} … {batch[-1]} ({len(batch)} releases)"
        _enter(budget, name, {RELEASES_TAG: json.dumps(batch)}, summed, randomness)


def _name_batches(names: list[str]) -> list[list[str]]:
    """Consecutive ``names`` in batches whose JSON fits one tag (``NAMES_PER_TAG`` characters).

    >>> [len(batch) for batch in _name_batches(["x" * 2000] * 5)]
    [2, 2, 1]
    """
    batches: list[list[str]] = []
    for name in names:
        if batches and len(json.dumps([*batches[-1], name])) <= NAMES_PER_TAG:
            batches[-1].append(name)
        else:
            batches.append([name])
    return batches


def _enter(
    budget: str, run_name: str, names: dict[str, str], persons: Mapping[int, float], randomness: str
) -> None:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient()
    run = client.create_run(
        _experiment_id(),
        run_name=run_name,
        tags={**names, BUDGET_TAG: budget, RANDOMNESS_TAG: randomness},
    )
    metrics = [
        Metric(f"{PERSON_PREFIX}{person}", float(epsilon), 0, 0)
        for person, epsilon in sorted(persons.items())
    ]
    for start in range(0, len(metrics), 1000):  # MLflow's batch limit
        client.log_batch(run.info.run_id, metrics=metrics[start : start + 1000])
    client.set_terminated(run.info.run_id)


def recorded(budget: str) -> tuple[set[str], dict[int, float]]:
    """(names of the releases made, each person's ε summed over them) in the budget ``budget`` (sequential composition)."""
    from mlflow import MlflowClient

    client = MlflowClient()
    names: set[str] = set()
    spent: dict[int, float] = {}
    token = None
    while True:
        page = client.search_runs(
            [_experiment_id()],
            filter_string=f"tags.`{BUDGET_TAG}` = '{budget}'",
            max_results=1000,
            page_token=token,
        )
        for run in page:
            tags = run.data.tags
            names.update(
                json.loads(tags[RELEASES_TAG]) if RELEASES_TAG in tags else [tags[RELEASE_TAG]]
            )
            for key, epsilon in run.data.metrics.items():
                if key.startswith(PERSON_PREFIX):
                    person = int(key.removeprefix(PERSON_PREFIX))
                    spent[person] = spent.get(person, 0.0) + epsilon
        token = page.token
        if not token:
            return names, spent
