"""Where a run's time goes: each stage task's wall time, printed and logged to the flow's parent run.

The wall time of a stage is its task's, from start to end: the command's own work, its process start (an
interpreter importing torch and MLflow), and DVC's hashing and caching of its outputs. The stages' MLflow runs measure the work alone (``stage_seconds``, from the stage function's call: tasks.core.tracking.stage_work);
the difference is the fixed cost per stage that issues 21 and 31 ask to find and bound. scan and budget open
no MLflow run: their work is not measured apart.
"""

from __future__ import annotations

from tasks.core.tables import markdown_of
from tasks.core.tracking import DVC_STAGE_TAG


def stage_rows(
    walls: dict[str, float], works: dict[str, float]
) -> list[dict[str, float | str | None]]:
    """One row per stage that ran, slowest first: wall seconds, its work (None where it logs no MLflow run) and the
    fixed cost between them.

    >>> stage_rows({"scan": 3.0, "train": 10.0}, {"train": 7.5})
    [{'stage': 'train', 'wall_s': 10.0, 'work_s': 7.5, 'fixed_s': 2.5}, {'stage': 'scan', 'wall_s': 3.0, 'work_s': None, 'fixed_s': None}]
    """
    return [
        {
            "stage": name,
            "wall_s": seconds,
            "work_s": works.get(name),
            "fixed_s": None if works.get(name) is None else seconds - works[name],
        }
        for name, seconds in sorted(walls.items(), key=lambda item: -item[1])
    ]


def summary(
    walls: dict[str, float],
    total: float,
    work: float,
    works: dict[str, float] | None = None,
    runner: str = "Prefect flow",
) -> str:
    """A Markdown table of :func:`stage_rows`, then the run's totals.

    >>> table = summary({"scan": 3.0, "train": 10.0}, 14.0, 7.5, {"train": 7.5}).splitlines()
    >>> [" ".join(line.replace("|", " ").split()) for line in table[2:5]]
    ['train 10.0 7.5 2.5', 'scan 3.0 — —', 'all stages (wall) 13.0 7.5 5.5']
    """

    def cell(value: float | str | None) -> str:
        return "—" if value is None else value if isinstance(value, str) else f"{value:.1f}"

    lines = [
        [cell(row[key]) for key in ("stage", "wall_s", "work_s", "fixed_s")]
        for row in stage_rows(walls, works or {})
    ]
    spent = sum(walls.values())
    lines += [
        ["all stages (wall)", f"{spent:.1f}", f"{work:.1f}", f"{spent - work:.1f}"],
        [f"the run ({runner})", f"{total:.1f}", "", ""],
    ]
    return markdown_of(["stage", "wall (s)", "work (s)", "fixed cost (s)"], lines)


def stage_works(parent_run_id: str) -> dict[str, float]:
    """``{DVC stage: stage_seconds}`` of the stage runs nested under a pipeline's parent run."""
    from mlflow import MlflowClient

    client = MlflowClient()
    experiment = client.get_run(parent_run_id).info.experiment_id
    children = client.search_runs(
        [experiment], f"tags.mlflow.parentRunId = '{parent_run_id}'", max_results=5000
    )
    works: dict[str, float] = {}
    for run in (
        children
    ):  # joined on the DVC stage that ran the run (``dprp@8.0`` logs the run ``dprp@8``)
        if "stage_seconds" in run.data.metrics:
            name = run.data.tags.get(DVC_STAGE_TAG, run.info.run_name)
            works[name] = works.get(name, 0.0) + run.data.metrics["stage_seconds"]
    return works


def previous_walls(parent_run_id: str, runs: int = 20) -> dict[str, float]:
    """Each stage's wall seconds in the latest of the ``runs`` earlier pipeline runs of this experiment that ran it
    (their ``stage_times.json``): what the time-left estimate counts on; empty on a project's first run."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    experiment = client.get_run(parent_run_id).info.experiment_id
    earlier = client.search_runs(
        [experiment],
        "metrics.pipeline_wall_seconds > 0",
        order_by=["attributes.start_time DESC"],
        max_results=runs,
    )
    walls: dict[str, float] = {}
    for run in earlier:
        try:
            table = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/stage_times.json")
        except (MlflowException, OSError, ValueError):
            continue  # a run without its table (stopped before the end)
        for row in table["stages"]:
            walls.setdefault(row["stage"], float(row["wall_s"]))
    return walls


def progress_line(
    stage: str,
    seconds: float | None,
    order: list[str],
    finished: set[str],
    previous: dict[str, float],
    stopped: dict[str, str] | None = None,
) -> str:
    """One line as a stage ends: which, how many are done and left, and the time left if each stage left takes what
    it took last time (:func:`previous_walls`). ``stopped``: the ended stages that did not complete, by how they ended
    (after Ctrl-C the cancelled stages had each counted as done: "4 of 4 stages done", issue 82).

    >>> print(progress_line("train", 84.0, ["decode", "train", "evaluate"], {"decode", "train"}, {"evaluate": 150.0}))
    train ran in 84 s: 2 of 3 stages done, 1 left; about 2.5 min left by the earlier runs' times
    >>> progress_line("decode", None, ["decode", "train"], {"decode"}, {})
    'decode finished (up to date, or failed): 1 of 2 stages done, 1 left; no earlier run timed them yet'
    >>> progress_line("train", None, ["decode", "train"], {"decode", "train"}, {}, {"train": "Cancelled"})
    'train ended Cancelled: 1 of 2 stages done, 1 stopped, 0 left; none left'
    """
    stopped = stopped or {}
    left = [name for name in order if name not in finished]
    known = [previous[name] for name in left if name in previous]
    if not left:
        estimate = "none left"
    elif not known:
        estimate = "no earlier run timed them yet"
    else:
        untimed = len(left) - len(known)
        estimate = f"about {sum(known) / 60:.1f} min left by the earlier runs' times" + (
            f" ({untimed} never timed)" if untimed else ""
        )
    how = "finished (up to date, or failed)" if seconds is None else f"ran in {seconds:.0f} s"
    if stage in stopped:
        how = f"ended {stopped[stage]}"
    done = len(order) - len(left) - len(stopped)
    halted = f", {len(stopped)} stopped" if stopped else ""
    return (
        f"{stage} {how}: {done} of {len(order)} stages done{halted}, {len(left)} left; {estimate}"
    )


def log_stage_times(
    parent_run_id: str, walls: dict[str, float], total: float, runner: str = "Prefect flow"
) -> str:
    """Log the run's totals as metrics, and each stage's times as the table (``stage_times.md``) and its rows
    (``stage_times.json``: a table, not a metric key per stage) to the parent run; return the table."""
    import mlflow

    works = stage_works(parent_run_id)
    work = sum(works.values())
    mlflow.log_metrics({"pipeline_wall_seconds": total, "stages_work_seconds": work})
    table = summary(walls, total, work, works, runner)
    mlflow.log_text(table + "\n", "stage_times.md")
    mlflow.log_dict({"stages": stage_rows(walls, works), "run_s": total}, "stage_times.json")
    return table
