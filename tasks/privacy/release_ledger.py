"""The DP releases actually made, kept in the MLflow store: what ``privacy.max_epsilon`` counts across runs.

A run's plan (:mod:`tasks.privacy.budget`) sees only the releases its params call for. Each run with secret
randomness releases the same people again — a second ``make run``, a ``dvc exp run`` with another ε — so the
cap also counts every earlier release of the same budget. Each DP stage, once its output is complete, records
its release here: one MLflow run in the experiment ``<experiment>-releases`` (the store's, so ``dvc exp``
experiments share it), tagged with the release's name and ``privacy.budget``, its artifact ``persons.parquet`` a table of
each person's id and the ε they spent (a table, not a metric per person: the store's metric keys name quantities,
not people; runs recorded before 2026-11-29 hold ``person.<id>`` metrics, still counted). A stage that makes many releases at once (a private method's training seeds)
enters them as one run, tagged with their names (``privhar.releases``, a JSON list) and each person's ε summed
over them: the cap composes releases sequentially (sums), so the run counts exactly what its releases would
one by one, at one store transaction instead of hundreds. A new ``privacy.budget`` name starts a fresh budget
(new data, new people).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from tasks.core.errors import PrivharError
from tasks.core.tracking import DEFAULT_EXPERIMENT, EXPERIMENT_ENV, configure

RELEASE_TAG, BUDGET_TAG, RANDOMNESS_TAG = "privhar.release", "privhar.budget", "privhar.randomness"
RELEASES_TAG = "privhar.releases"  # a run entering several releases: their names, a JSON list
PERSON_PREFIX = "person."  # the metric keys of runs recorded before the table
PERSONS_FILE = "persons.parquet"
NAMES_PER_TAG = 5000  # characters of release names a run's tag holds (MLflow keeps 8000)


def _experiment_id() -> str:
    """The releases' experiment beside the pipeline's, its artifacts (each release's table) beside the pipeline's
    (created on first use)."""
    import mlflow

    main = mlflow.get_experiment(configure())
    name = os.environ.get(EXPERIMENT_ENV, DEFAULT_EXPERIMENT) + "-releases"
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return mlflow.create_experiment(name, artifact_location=main.artifact_location)


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
    import tempfile
    from pathlib import Path

    import polars as pl
    from mlflow import MlflowClient

    client = MlflowClient()
    run = client.create_run(
        _experiment_id(),
        run_name=run_name,
        tags={**names, BUDGET_TAG: budget, RANDOMNESS_TAG: randomness},
    )
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / PERSONS_FILE
        ordered = sorted(persons.items())
        pl.DataFrame(
            {"person": [person for person, _ in ordered], "epsilon": [eps for _, eps in ordered]},
            schema={"person": pl.Int64, "epsilon": pl.Float64},
        ).write_parquet(table)
        client.log_artifact(run.info.run_id, str(table))
    client.set_terminated(run.info.run_id)


def _persons(run: Any) -> dict[int, float]:
    """Each person's ε under one recorded run: its table, or the metrics of a run recorded before the table."""
    import tempfile

    import polars as pl
    from mlflow.artifacts import download_artifacts

    older = {
        int(key.removeprefix(PERSON_PREFIX)): epsilon
        for key, epsilon in run.data.metrics.items()
        if key.startswith(PERSON_PREFIX)
    }
    if older:
        return older
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as folder:
        try:
            table = pl.read_parquet(
                download_artifacts(
                    run_id=run.info.run_id, artifact_path=PERSONS_FILE, dst_path=folder
                )
            )
        except (MlflowException, OSError, pl.exceptions.PolarsError) as error:
            # fail closed: a release whose ε cannot be read cannot be counted as nothing
            raise PrivharError(
                f"the release ledger's run {run.info.run_id} ({run.info.run_name}) has no readable {PERSONS_FILE} "
                f"({type(error).__name__}): its stage was stopped while recording it; if its release was never "
                "used, delete the run (mlflow runs delete --run-id ...)"
            ) from None
    return dict(zip(table["person"].to_list(), table["epsilon"].to_list(), strict=True))


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
            for person, epsilon in _persons(run).items():
                spent[person] = spent.get(person, 0.0) + epsilon
        token = page.token
        if not token:
            return names, spent
