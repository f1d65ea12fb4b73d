"""What the flow's run shares with its stage tasks: DVC commands under the run's guard, its session, its scores.

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

from flows.group_guard import guarded
from flows.project_lock import check_project, held_lock_fds, project_lock
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


_RUNNING: set[subprocess.Popen] = set()  # this process's dvc commands at work, on any thread


def end_running_dvc() -> None:
    """SIGTERM to every dvc command of this process still at work (its guard ends dvc and its stage): what the
    thread that waits on it cannot do when the run is interrupted or terminated in another thread."""
    for process in list(_RUNNING):
        if process.poll() is None:
            process.terminate()


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
    _RUNNING.add(process)
    try:
        yield process
    finally:
        _RUNNING.discard(process)
        if process.poll() is None:
            process.terminate()  # the guard: SIGTERM to dvc and its stages, SIGKILL after its grace
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


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
