"""What every pipeline run shares, and ``privhar run``: the whole DAG by ``dvc repro``.

A run holds the project lock, opens one MLflow parent run (the stages, separate
processes, log nested runs under it) and ends by logging every model's scores to it. The
registry (each method's newest version described with its Top-1, ``dvc.lock`` hash and git
commit, the ``champion`` alias) is scored by the DAG's own ``register`` stage.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flows.dag import read_dag, runs_scoring
from flows.group_guard import guarded
from flows.preflight import INDEX_STAGE, check_dataset, check_params
from flows.project_lock import held_lock_fds, project_lock
from flows.stage_times import StageClock, log_stage_times
from tasks.core.errors import ERROR_PREFIX, PrivharError
from tasks.core.tracking import pipeline_run
from tasks.register import merge_scores


def error_line(text: str) -> str:
    r"""The line that explains a failed DVC or stage command: the stage's own error, else DVC's last ERROR.

    >>> error_line("Running stage 'x'\nprivhar: error: params.yaml: x.y = 0 is invalid\nERROR: failed to reproduce 'x'")
    'params.yaml: x.y = 0 is invalid'
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(ERROR_PREFIX):
            return line[len(ERROR_PREFIX) :]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["no message"])[-1]


def tool_environment() -> dict[str, str]:
    """The environment for DVC and the stages: this interpreter's bin folder first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("DVC_NO_ANALYTICS", "1")
    return env


def dvc_command(*args: str) -> list[str]:
    """``dvc`` from this environment; waits for DVC's own repository lock rather than failing."""
    return [str(Path(sys.executable).parent / "dvc"), "--wait-for-lock", *args]


@contextlib.contextmanager
def running_dvc(command: list[str], **popen: Any) -> Iterator[subprocess.Popen]:
    """``dvc`` started as this run's work (issue 35): under :mod:`flows.group_guard`, so it and every stage it
    starts end when this process does, even killed outright, and holding the project lock with it, so a second run
    cannot start while any of that work is left. Leaving the block early (an error, an interrupt, SIGTERM) ends
    them before it returns."""
    process = subprocess.Popen(
        guarded(command),
        env=tool_environment() | popen.pop("env", {}),
        pass_fds=held_lock_fds(),
        start_new_session=True,
        **popen,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()  # the guard: SIGTERM to dvc and its stages, SIGKILL after its grace
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def check_project(project: Path) -> Path:
    project = Path(project).resolve()
    if not (project / "dvc.yaml").is_file():
        raise PrivharError(f"{project}: no dvc.yaml here (run privhar from the project folder)")
    return project


@contextlib.contextmanager
def pipeline_session(
    project: Path, what: str, tags: dict[str, str], name: str = "pipeline"
) -> Iterator[str]:
    """Lock the project, work inside it, and open the MLflow parent run ``name``; yield its id."""
    project = check_project(project)
    with project_lock(project, what):
        previous = Path.cwd()
        os.chdir(project)
        try:
            with pipeline_run(name, tags={"privhar.orchestrator": what, **tags}) as parent:
                print(f"privhar: MLflow parent run {parent}", file=sys.stderr)
                yield parent
        finally:
            os.chdir(previous)


def run_pipeline(project: Path, *, force: bool = False, targets: tuple[str, ...] = ()) -> dict:
    """``dvc repro`` in ``project``; return the evaluation metrics it produced."""
    tags = {"privhar.targets": " ".join(targets) or "all"}
    check_params(check_project(project))
    with pipeline_session(project, "privhar run", tags, " ".join(["pipeline", *targets])) as parent:
        force_flag = ["--force"] if force else []
        clock = StageClock()
        if (
            not targets
        ):  # the index first, and the params checked against the dataset before any other stage
            _repro(dvc_command("repro", *force_flag, INDEX_STAGE), clock)
            check_dataset(project)
        _repro(dvc_command("repro", *force_flag, *targets), clock)
        table = log_stage_times(parent, clock.walls(), clock.ended - clock.started)
        print(
            f"privhar: where the time went (wall seconds per stage, DVC's overhead included)\n{table}",
            file=sys.stderr,
        )
        scored = not targets or runs_scoring(stage.name for stage in read_dag(project, targets))
        return score_models(Path.cwd()) if scored else {}


def _repro(command: list[str], clock: StageClock) -> None:
    """One ``dvc repro``, its lines printed as DVC prints them, each stage's start marked on ``clock``."""
    with running_dvc(command, stdout=subprocess.PIPE, text=True, bufsize=1) as process:
        assert process.stdout is not None
        for line in clock.watch(process.stdout):
            sys.stdout.write(line)
            sys.stdout.flush()
    if process.returncode != 0:
        raise PrivharError(
            f"dvc repro failed (exit {process.returncode}); the failing stage's message is above"
        )


def score_models(project: Path) -> dict[str, dict[str, float]]:
    """Every model's metrics as one artifact of the parent run (``metrics.json``); return them. Not as metrics: a
    flat key per model and score (``anonymize-avatar-seed1.top1_protocol2``) gave the run hundreds of one-bar
    charts; each model's scores are metrics of its own leaf run. The registry itself is scored by the ``register``
    stage (tasks/register.py), so a plain ``dvc repro`` scores it too."""
    import mlflow

    metrics = method_metrics()
    mlflow.log_dict(metrics, "metrics.json")
    mlflow.log_metric("models_scored", len(metrics))
    return metrics


def method_metrics() -> dict[str, dict[str, float]]:
    """``{method: {metric: value}}`` from every metrics file dvc.yaml declares (read through DVC)."""
    shown = subprocess.run(
        dvc_command("metrics", "show", "--json"),
        env=tool_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        raise PrivharError(
            f"dvc metrics show failed (exit {shown.returncode}): {error_line(shown.stderr)}"
        )
    return merge_scores(
        content.get("data", {})
        for revision in json.loads(shown.stdout or "{}").values()
        for content in revision.get("data", {}).values()
    )
