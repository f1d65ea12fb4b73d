"""Run the whole DAG of ``dvc.yaml`` under one MLflow parent run.

DVC decides what is stale and runs each stage's command (``privhar stage NAME``); each
stage opens its nested MLflow run under the parent whose id this module exports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tasks.core.errors import PrivharError
from tasks.core.registry import record_scores
from tasks.core.tracking import pipeline_run


def tool_environment() -> dict[str, str]:
    """The environment for DVC and the stages: this interpreter's bin folder first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def dvc_command(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "dvc"), *args]


def run_pipeline(project: Path, *, force: bool = False, targets: tuple[str, ...] = ()) -> dict:
    """``dvc repro`` in ``project``; return the evaluation metrics it produced."""
    if not (project / "dvc.yaml").is_file():
        raise PrivharError(f"{project}: no dvc.yaml here (run privhar from the project folder)")
    os.chdir(project)
    with pipeline_run("pipeline", tags={"privhar.targets": " ".join(targets) or "all"}) as parent:
        print(f"privhar: MLflow parent run {parent}", file=sys.stderr)
        command = dvc_command("repro", *(["--force"] if force else []), *targets)
        result = subprocess.run(command, env=tool_environment(), check=False)
        if result.returncode != 0:
            raise PrivharError(f"dvc repro failed (exit {result.returncode}); the failing stage's message is above")
        import mlflow

        metrics = method_metrics()
        for method, values in metrics.items():
            mlflow.log_metrics({f"{method}.{key}": float(value) for key, value in values.items()})
            # DVC skips evaluate when its committed outputs still match, so describe the model here too.
            record_scores(method, values)
    return metrics


def method_metrics() -> dict[str, dict[str, float]]:
    """``{method: {metric: value}}`` from every metrics file dvc.yaml declares (read through DVC)."""
    shown = subprocess.run(dvc_command("metrics", "show", "--json"), env=tool_environment(), capture_output=True,
                           text=True, check=False)
    if shown.returncode != 0:
        last_line = (shown.stderr.strip().splitlines() or ["no message"])[-1]
        raise PrivharError(f"dvc metrics show failed (exit {shown.returncode}): {last_line}")
    metrics: dict[str, dict[str, float]] = {}
    for revision in json.loads(shown.stdout or "{}").values():
        for content in revision.get("data", {}).values():
            for method, values in content.get("data", {}).items():
                if isinstance(values, dict) and "top1" in values:
                    metrics[method] = values
    return metrics
