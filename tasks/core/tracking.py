"""MLflow tracking: one parent run per pipeline execution, one nested run per stage.

The store defaults to SQLite inside the project (``mlflow.db``, artifacts in
``mlartifacts/``); ``MLFLOW_TRACKING_URI`` overrides it. The flow opens the parent
run and passes its id to the stages (run by DVC as separate processes) through
``PRIVHAR_PARENT_RUN_ID``; a stage run on its own opens a top-level run.

A run records the host and process that own it. A process killed outright (SIGKILL, power) cannot
end its run, which would stay RUNNING forever: the next stage or pipeline run ends every RUNNING
run on this host whose process is gone (a stage's, a pipeline's, or a model's nested under one) as KILLED. SIGTERM is turned into an exception
by the command line, so a terminated stage ends its own run as FAILED.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from tasks.core.environ import exported

LOG = logging.getLogger(__name__)
PARENT_ENV = "PRIVHAR_PARENT_RUN_ID"
EXPERIMENT_ENV = "PRIVHAR_EXPERIMENT"
DEFAULT_EXPERIMENT = "privhar"
DVC_STAGE_TAG = "privhar.dvc_stage"
# the DVC stage a stage function runs for when no ``dvc repro`` started it (the flow's sharded stages run in-process,
# on the task's thread, where DVC_STAGE is not set and os.environ is shared with the other stage tasks)
_dvc_stage: contextvars.ContextVar[str | None] = contextvars.ContextVar("dvc_stage", default=None)


@contextlib.contextmanager
def running_dvc_stage(name: str) -> Iterator[None]:
    """Tag the stage runs opened in this block (on this thread) with DVC stage ``name``, as DVC_STAGE would."""
    token = _dvc_stage.set(name)
    try:
        yield
    finally:
        _dvc_stage.reset(token)


P = ParamSpec("P")
R = TypeVar("R")


def tracking_uri(project: Path | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` or the project's SQLite store."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    folder = Path(project or Path.cwd()).resolve()
    return f"sqlite:///{folder / 'mlflow.db'}"


# MLflow 3 opens an experiment without this tag on its GenAI overview ("0 traces"); with it, on the runs list
EXPERIMENT_TAGS = {
    "mlflow.experimentKind": "custom_model_development",
    "mlflow.note.content": (
        "privhar: privacy-preserving video action recognition. A run per pipeline (the Prefect flow), "
        "a nested run per DVC stage, a leaf run per model with its Top-1 and its ε, δ, unit and relation. "
        "Trained models are in the registry as privhar-<method>; docs/operations.md says how to browse them."
    ),
}


def configure(project: Path | None = None) -> str:
    """Point MLflow at the store and select the experiment (a model-training experiment with its description);
    return the experiment id."""
    import mlflow

    # the release ledger reads a small table per release: no progress bar per file on the stage's stderr
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # MLflow logs a store error with its traceback before raising it; the command reports it in one line (issue 82:
    # a read-only mlflow.db gave 85 lines)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    mlflow.set_tracking_uri(tracking_uri(project))
    name = os.environ.get(EXPERIMENT_ENV, DEFAULT_EXPERIMENT)
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        artifacts = (Path(project or Path.cwd()).resolve() / "mlartifacts").as_uri()
        experiment_id = mlflow.create_experiment(
            name, artifact_location=artifacts, tags=EXPERIMENT_TAGS
        )
    else:
        experiment_id = experiment.experiment_id
        for key, value in EXPERIMENT_TAGS.items():  # an experiment made before the tags were set
            if experiment.tags.get(key) != value:
                mlflow.MlflowClient().set_experiment_tag(experiment_id, key, value)
    mlflow.set_experiment(name)
    return experiment_id


def flatten(sections: Mapping[str, Any]) -> dict[str, str]:
    """``{"decode": DecodeParams(fps=8)}`` -> ``{"decode.fps": "8"}`` for MLflow params."""
    flat: dict[str, str] = {}
    for section, values in sections.items():
        items = values.model_dump() if hasattr(values, "model_dump") else dict(values)
        for key, value in items.items():
            flat[f"{section}.{key}"] = str(value)
    return flat


def readable(metrics: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """Metrics as people read them, and tags for what MLflow cannot show: a float to 12 significant digits (δ
    0.00014, not 0.00014000000000000001); an infinite or undefined value (ε = ∞ of a non-private model, which MLflow
    would show as 1.79769e308) is not logged but tagged (``privhar.epsilon: inf``)."""
    shown, tags = {}, {}
    for key, value in metrics.items():
        number = float(value)
        if math.isfinite(number):
            shown[key] = float(f"{number:.12g}")
        else:
            tags[f"privhar.{key}"] = str(number)
    return shown, tags


def _log_readable(metrics: Mapping[str, Any], step: int | None = None) -> None:
    """:func:`readable` metrics to the active run, what they cannot show as its tags."""
    import mlflow

    shown, tags = readable(metrics)
    mlflow.log_metrics(shown, step=step)
    if tags:
        mlflow.set_tags(tags)


class StageRun:
    """What a stage may log to its run (by id, through the client: a seed's run is not the active one)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    @contextlib.contextmanager
    def seed_run(self, seed: int) -> Iterator[StageRun]:
        """Where training seed ``seed`` of this run's model logs: seed 0 (the registered model) here, every other seed
        in a run nested under this one (``fit dp_sgd ε=2 seed 3``, tag ``privhar.seed``) under the same metric names,
        so the experiment keeps one key per quantity however many seeds a row trains (MLflow's tree folds them)."""
        if seed == 0:
            yield self
            return
        from mlflow import MlflowClient
        from mlflow.entities import RunStatus

        client = MlflowClient()
        experiment, name, model = self._seed_parent
        run = client.create_run(
            experiment,
            run_name=f"{name} seed {seed}",
            tags={
                "mlflow.parentRunId": self.run_id,
                "privhar.seed": str(seed),
                **_owner_tags(),
                **model,
            },
        )
        status = RunStatus.FAILED
        try:
            yield StageRun(run.info.run_id)
            status = RunStatus.FINISHED
        finally:
            client.set_terminated(run.info.run_id, RunStatus.to_string(status))

    @functools.cached_property
    def _seed_parent(self) -> tuple[str, str, dict[str, str]]:
        """(experiment, run name, its ``privhar.model`` tag) of this run, read once for all of its seeds' runs: a row's
        seeds asked the store for them once each, 2 000 times a make run."""
        from mlflow import MlflowClient

        parent = MlflowClient().get_run(self.run_id)
        model = {key: value for key, value in parent.data.tags.items() if key == "privhar.model"}
        return parent.info.experiment_id, parent.info.run_name, model

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Metrics at one step (None: step 0); what MLflow cannot show (an infinite ε) as tags."""
        from mlflow import MlflowClient

        self.log_history([(step, metrics)])
        for key, value in readable(metrics)[1].items():
            MlflowClient().set_tag(self.run_id, key, value)

    def log_history(self, history: Sequence[tuple[int | None, Mapping[str, float]]]) -> None:
        """Metrics at many steps (``(step, {name: value})``; None: step 0) in one store transaction, where one
        ``log_metrics`` call per step costs a round trip each (hundreds per training seed)."""
        from mlflow import MlflowClient
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(key, value, now, step or 0)
            for step, values in history
            for key, value in readable(values)[0].items()
        ]
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            MlflowClient().log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def log_mechanism(
        self, parameters: Mapping[str, Any], guarantee: Any, metrics: Sequence[str] = ()
    ) -> None:
        """A DP model's mechanism parameters (σ, C, q, steps, ...) and its guarantee (ε, δ, accountant, unit, relation,
        randomness) as this run's params, the same fields for every DP method, whether or not the run is still active
        (a federated model's run has ended when its guarantee is known); ``metrics`` (``epsilon``, ``delta``) those
        of the guarantee its training did not log as curves. An infinite ε is tagged (``privhar.epsilon: inf``)."""
        from mlflow import MlflowClient
        from mlflow.entities import Metric, Param

        values = {**{key: str(value) for key, value in parameters.items()}, **guarantee.as_tags()}
        shown, unshown = readable({"epsilon": guarantee.epsilon, "delta": guarantee.delta})
        shown = {key: value for key, value in shown.items() if key in metrics}
        now = int(time.time() * 1000)
        client = MlflowClient()
        client.log_batch(
            self.run_id,
            params=[Param(key, value) for key, value in values.items()],
            metrics=[Metric(key, value, now, 0) for key, value in shown.items()],
        )
        for key, value in unshown.items():
            client.set_tag(self.run_id, key, value)

    def log_summary(self, values: Mapping[str, Any]) -> None:
        """A stage's counts and speeds (videos, quarantined, frames per second, ...) as its ``summary.json``: read per
        run, not compared across models, so not metric keys (the experiment keeps one key per compared quantity)."""
        from mlflow import MlflowClient

        MlflowClient().log_dict(
            self.run_id,
            {
                key: (float(value) if isinstance(value, float) else value)
                for key, value in values.items()
            },
            "summary.json",
        )

    def log_dict(self, content: Mapping[str, Any], name: str) -> None:
        """A JSON artifact of this run (a summary too wide for metrics)."""
        import mlflow

        mlflow.log_dict(dict(content), name)

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        import mlflow

        mlflow.log_artifact(str(path), artifact_path=folder)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        import mlflow

        mlflow.set_tags({key: str(value) for key, value in tags.items()})

    def log_dataset(self, folder: Path, split: str, context: str) -> str:
        """``mlflow.log_input`` of a stage folder's manifest rows of ``split``: source the folder, digest the first 12
        hex digits of the manifest's SHA-256 (the runs table shows which data a model saw); return the digest."""
        import hashlib
        import warnings

        import mlflow
        import polars as pl

        from tasks.core.manifest import MANIFEST_NAME, scan_manifest

        manifest = Path(folder) / MANIFEST_NAME
        digest = hashlib.sha256(manifest.read_bytes()).hexdigest()[:12]
        rows = scan_manifest(manifest).filter(pl.col("split") == split).collect()
        with (
            warnings.catch_warnings()
        ):  # a local folder "can be interpreted in multiple ways" by MLflow: it is local
            warnings.simplefilter("ignore", UserWarning)
            dataset = mlflow.data.from_polars(
                rows,
                source=str(Path(folder).resolve()),
                targets="label",
                name=f"{Path(folder).name}/{split}",
                digest=digest,
            )
        mlflow.log_input(
            dataset, context=context, tags={"split": split, "videos": str(rows.height)}
        )
        return digest

    @contextlib.contextmanager
    def model_run(
        self, key: str, role: str, tags: Mapping[str, Any] | None = None
    ) -> Iterator[StageRun]:
        """A run nested under this stage's for one trained model (``key``): its curves and scores under plain names,
        so MLflow's runs table and compare view line models up; the model is registered from it (:meth:`resumed`).
        Named ``role`` + :func:`run_label` (``fit dp_sgd ε=2``), so a model's training run, test run and summary
        run are told apart in MLflow's charts and tree."""
        import mlflow

        with mlflow.start_run(
            run_name=f"{role} {run_label(key)}",
            nested=True,
            parent_run_id=self.run_id,
            tags={
                "privhar.model": key,
                **_owner_tags(),
                **{name: str(value) for name, value in (tags or {}).items()},
            },
        ) as run:
            yield StageRun(run.info.run_id)

    @contextlib.contextmanager
    def resumed(self) -> Iterator[StageRun]:
        """This run active for the block: a finished model run resumed (its registered model is logged once the stage's
        outputs are complete), or, if it is the active run already, left as it is."""
        import mlflow

        active = mlflow.active_run()
        if active is not None and active.info.run_id == self.run_id:
            yield self
            return
        with mlflow.start_run(run_id=self.run_id, nested=True):
            yield self

    def child(
        self,
        name: str,
        metrics: Mapping[str, float],
        tags: Mapping[str, Any],
        details: Mapping[str, Any] | None = None,
    ) -> str:
        """A run nested under this one (one per method, so the MLflow UI compares them in one table); its id.
        ``details``: what the row holds beyond its compared metrics, as the run's ``details.json``."""
        import mlflow

        with mlflow.start_run(
            run_name=run_label(name),
            nested=True,
            tags={**_owner_tags(), **{key: str(value) for key, value in tags.items()}},
        ) as run:
            _log_readable(metrics)
            if details:
                mlflow.log_dict(dict(details), "details.json")
            return run.info.run_id


def run_label(key: str) -> str:
    """A model key as a short MLflow run name: ``dp_sgd-eps2.0`` → ``dp_sgd ε=2``, ``-epsinf`` → ``ε=∞``, seeds kept.

    >>> run_label("fedavg-selective-epsinf-seed39"), run_label("anonymize-low_res_32x24")
    ('fedavg-selective ε=∞ seed39', 'anonymize-low_res_32x24')
    """
    words, rest = [], []
    for part in key.split("-"):
        value = part.removeprefix("eps")
        if part.startswith("eps") and (value == "inf" or _is_number(value)):
            words.append("ε=∞" if value == "inf" else f"ε={float(value):g}")
        elif part.startswith("seed") and part[4:].isdigit():
            words.append(part)
        else:
            rest.append(part)
    return " ".join(["-".join(rest), *words])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _owner_tags() -> dict[str, str]:
    return {"privhar.host": socket.gethostname(), "privhar.pid": str(os.getpid())}


THIS_HOST = f"tags.`privhar.host` = '{socket.gethostname()}'"


def end_orphaned_runs(filter_string: str = THIS_HOST) -> list[str]:
    """End as KILLED the RUNNING runs matching ``filter_string`` whose owning process on this host is gone: a
    stage's run and the model runs nested under it alike (each is tagged with the process that opened it)."""
    import psutil
    from mlflow import MlflowClient
    from mlflow.entities import RunStatus

    client = MlflowClient()
    ended = []
    host = socket.gethostname()
    experiment = configure()
    for run in client.search_runs(
        [experiment], f"{filter_string} and attributes.status = 'RUNNING'", max_results=1000
    ):
        tags = run.data.tags
        pid = tags.get("privhar.pid", "")
        if (
            tags.get("privhar.host") == host
            and pid.isdigit()
            and int(pid) != os.getpid()
            and not psutil.pid_exists(int(pid))
        ):
            client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.KILLED))
            ended.append(run.info.run_id)
    if ended:
        LOG.warning(
            "mlflow: %d run(s) of a killed process ended as KILLED (%s)",
            len(ended),
            ", ".join(ended),
        )
    return ended


_work_started: float | None = None


def stage_work(function: Callable[P, R]) -> Callable[P, R]:
    """Mark a stage's entry function: its work is timed from the call (its imports done), so the ``stage_seconds``
    of its MLflow run covers what it computes before opening the run too; the rest of a stage's wall time
    (interpreter start, imports, DVC's hashing) is its fixed cost (flows/stage_times.py)."""

    @functools.wraps(function)
    def timed(*args: P.args, **kwargs: P.kwargs) -> R:
        global _work_started
        _work_started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _work_started = None  # a stage that failed before its run times nothing after it

    timed.stage_work = True  # type: ignore[attr-defined]
    return timed


@contextlib.contextmanager
def stage_run(stage: str, sections: Mapping[str, Any]) -> Iterator[StageRun]:
    """A (nested) MLflow run for one stage: params as given; ``stage_seconds`` from the stage function's call (else
    this run's start) to this run's end; tagged with the DVC stage
    that ran it (``DVC_STAGE``), which the time table joins on."""
    import mlflow

    started = _work_started if _work_started is not None else time.perf_counter()
    configure()
    end_orphaned_runs(THIS_HOST)
    parent = os.environ.get(PARENT_ENV)
    named = os.environ.get("DVC_STAGE") or _dvc_stage.get()
    dvc_stage = {DVC_STAGE_TAG: named} if named else {}
    with mlflow.start_run(
        run_name=stage,
        parent_run_id=parent or None,
        nested=bool(parent),
        tags={"privhar.stage": stage, **dvc_stage, **_owner_tags()},
    ) as run:
        mlflow.log_params(flatten(sections))
        yield StageRun(run.info.run_id)
        mlflow.log_metric("stage_seconds", time.perf_counter() - started)


@contextlib.contextmanager
def pipeline_run(name: str, tags: Mapping[str, Any] | None = None) -> Iterator[str]:
    """The parent run of one pipeline execution; its id is exported for the stages."""
    import mlflow

    configure()
    end_orphaned_runs(THIS_HOST)
    with mlflow.start_run(
        run_name=name, tags={"privhar.pipeline": "true", **_owner_tags(), **(tags or {})}
    ) as run:
        with exported(PARENT_ENV, run.info.run_id):
            yield run.info.run_id
