"""``privhar bench stages``: each stage's fixed cost when it starts its own interpreter and when it is forked from
the warm stage server (flows/stage_server.py), on a fresh copy of the project under a small profile.

The fixed cost of a stage is its wall time as ``dvc repro`` runs it (flows/stage_times.py) less its work, the
``stage_seconds`` of its MLflow run (from the stage function's call): interpreter start and imports, params,
MLflow's store and run, DVC's hashing and caching. It hardly depends on the data, so a small profile measures
it in minutes; the pipeline is run twice from scratch, ``privhar run --cold`` then ``privhar run``, each in its
own fresh git + DVC copy with its own MLflow store, so neither finds the other's cache. Issue 31's target: at
most 2 s a stage.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flows.pipeline import tool_environment
from flows.profiles import apply_profile
from tasks.core.errors import PrivharError
from tasks.core.storage import atomic_write_bytes
from tasks.core.tables import markdown_of

LOG = logging.getLogger("tasks.bench.stages")
TARGET_S = 2.0
COPIED = ("dvc.yaml", "params.yaml", "tasks", "profiles")


def fresh_copy(project: Path, folder: Path, profile: str) -> Path:
    """The project's pipeline (dvc.yaml, params.yaml, its stage code) in a new git + DVC repository, the profile on."""
    for name in COPIED:
        source = project / name
        if not source.exists():
            raise PrivharError(
                f"{source}: missing (run privhar bench stages from the project folder)"
            )
        if source.is_dir():
            shutil.copytree(source, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, folder / name)
    (folder / ".gitignore").write_text(".privhar/\nmlflow.db\nmlartifacts/\n")
    apply_profile(folder, profile)
    env = tool_environment()
    for command in (
        ["git", "init", "-q"],
        ["dvc", "init", "-q"],
        ["git", "add", "-A"],
        [
            "git",
            "-c",
            "user.email=bench@privhar.invalid",
            "-c",
            "user.name=privhar bench",
            "commit",
            "-qm",
            "bench",
        ],
    ):
        subprocess.run(command, cwd=folder, env=env, check=True, capture_output=True)
    return folder


def timed_run(copy: Path, cold: bool) -> dict[str, Any]:
    """``privhar run`` (``--cold``) in ``copy``, DVC's stage lines as progress; the rows it logged (stage_times.json)."""
    import mlflow

    env = tool_environment() | {
        "MLFLOW_TRACKING_URI": f"sqlite:///{copy / 'mlflow.db'}",
        "PRIVHAR_EXPERIMENT": "bench",
    }
    env.pop("PRIVHAR_PARENT_RUN_ID", None)
    log = copy / "run.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "privhar"), "run", *(["--cold"] if cold else [])],
            cwd=copy,
            env=env,
            stdout=subprocess.PIPE,
            stderr=output,
            text=True,
            bufsize=1,
        )
        assert process.stdout is not None
        for line in process.stdout:
            output.write(line)
            if line.startswith("Running stage"):
                LOG.info("bench stages (%s): %s", "cold" if cold else "warm", line.strip())
    if process.wait() != 0:
        tail = log.read_text().strip().splitlines()[-5:]
        raise PrivharError(
            f"privhar run{' --cold' if cold else ''} failed in {copy}: {' / '.join(tail)}"
        )
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    parent = mlflow.search_runs(
        experiment_names=["bench"],
        filter_string="tags.`privhar.pipeline` = 'true'",
        output_format="list",
        max_results=1,
    )[0]
    return mlflow.artifacts.load_dict(f"{parent.info.artifact_uri}/stage_times.json")


def compare(cold: dict[str, Any], warm: dict[str, Any]) -> list[dict[str, Any]]:
    """Per stage: work and fixed cost of each run (None where the stage logs no MLflow run), slowest fixed first.

    >>> rows = compare({"stages": [{"stage": "a", "wall_s": 9.0, "work_s": 2.0, "fixed_s": 7.0}]},
    ...                {"stages": [{"stage": "a", "wall_s": 2.5, "work_s": 2.0, "fixed_s": 0.5}]})
    >>> rows[0]["fixed_cold_s"], rows[0]["fixed_warm_s"]
    (7.0, 0.5)
    """
    before = {row["stage"]: row for row in cold["stages"]}
    rows = [
        {
            "stage": row["stage"],
            "work_cold_s": before.get(row["stage"], {}).get("work_s"),
            "work_warm_s": row["work_s"],
            "wall_cold_s": before.get(row["stage"], {}).get("wall_s"),
            "wall_warm_s": row["wall_s"],
            "fixed_cold_s": before.get(row["stage"], {}).get("fixed_s"),
            "fixed_warm_s": row["fixed_s"],
        }
        for row in warm["stages"]
    ]
    return sorted(
        rows,
        key=lambda row: (
            -(row["fixed_warm_s"] if row["fixed_warm_s"] is not None else row["wall_warm_s"])
        ),
    )


def markdown(
    rows: list[dict[str, Any]], cold: dict[str, Any], warm: dict[str, Any], profile: str
) -> str:
    def cell(value: float | None) -> str:
        return "—" if value is None else f"{value:.2f}"

    table = markdown_of(
        [
            "stage",
            "work, cold (s)",
            "work, warm (s)",
            "fixed cost, cold (s)",
            "fixed cost, warm (s)",
        ],
        [
            [
                row["stage"],
                cell(row["work_cold_s"]),
                cell(row["work_warm_s"]),
                cell(row["fixed_cold_s"]),
                cell(row["fixed_warm_s"]),
            ]
            for row in rows
        ],
    )
    fixed_warm = [row["fixed_warm_s"] for row in rows if row["fixed_warm_s"] is not None]
    fixed_cold = [row["fixed_cold_s"] for row in rows if row["fixed_cold_s"] is not None]
    over = [
        row["stage"]
        for row in rows
        if row["fixed_warm_s"] is not None and row["fixed_warm_s"] > TARGET_S
    ]
    return (
        f"# Fixed cost per stage: cold interpreter against a fork of the warm stage server\n\n"
        f"Profile `{profile}`, {len(rows)} stages, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}. "
        f"`privhar run --cold`: {cold['run_s']:.0f} s; `privhar run`: {warm['run_s']:.0f} s. "
        f"Fixed cost per stage, median (max): cold {statistics.median(fixed_cold):.2f} s ({max(fixed_cold):.2f}), "
        f"warm {statistics.median(fixed_warm):.2f} s ({max(fixed_warm):.2f}); "
        f"warm stages above {TARGET_S:g} s: {', '.join(over) or 'none'}. "
        f"scan and budget log no MLflow run (—): their wall time is all there is.\n\n{table}\n"
    )


def bench_stages(project: Path, profile: str, out: Path) -> dict[str, Any]:
    """Run the pipeline cold then warm on fresh copies; write ``out`` (JSON) and its Markdown beside it."""
    runs = {}
    for mode in ("cold", "warm"):
        with tempfile.TemporaryDirectory(prefix=f"privhar-bench-{mode}-") as folder:
            LOG.info(
                "bench stages: a fresh copy under profile %s, privhar run%s",
                profile,
                " --cold" if mode == "cold" else "",
            )
            runs[mode] = timed_run(
                fresh_copy(Path(project).resolve(), Path(folder), profile), cold=mode == "cold"
            )
    rows = compare(runs["cold"], runs["warm"])
    result = {
        "profile": profile,
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "target_s": TARGET_S,
        "run_cold_s": runs["cold"]["run_s"],
        "run_warm_s": runs["warm"]["run_s"],
        "stages": rows,
    }
    atomic_write_bytes(out, (json.dumps(result, indent=2) + "\n").encode())
    atomic_write_bytes(
        out.with_suffix(".md"), markdown(rows, runs["cold"], runs["warm"], profile).encode()
    )
    return result
