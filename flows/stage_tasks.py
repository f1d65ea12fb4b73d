"""Prefect tasks that bring one DVC stage up to date.

A stage DVC reports unchanged is not run: its task ends in a ``Skipped`` (completed)
state. Otherwise:

- an ordinary stage runs as ``dvc repro --single-item NAME``: DVC removes its old outputs,
  may restore them from its run cache, runs the command and records ``dvc.lock``. DVC
  releases its repository lock while the command runs, so independent stages overlap.
- with ``orchestrate.task_runner: dask``, a *sharded* stage (``orchestrate.sharded_stages``, the per-video ones)
  runs its command from ``dvc.yaml`` in this process, with its videos split into shard tasks sent to the Dask
  cluster (prefect-dask); ``dvc commit`` then records its outputs exactly as ``dvc repro`` would have. On one
  machine (``local``) every stage is ``dvc repro``'s process and spreads its videos over its own worker pool
  (``base.workers``): no stage's work runs on the flow's threads, whose parses of Python's AST CPython 3.11.7
  does not keep apart (gh-106905).

Every line a stage prints goes to the task's log, so it shows in the Prefect UI; a failing
stage fails its task with the stage's own one-line error.
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, State

from flows.dag import DagStage
from flows.pipeline import dvc_command, error_line, running_dvc, tool_environment
from tasks.core.errors import PrivharError
from tasks.core.parallel import installed_mapper
from tasks.core.params import OrchestrateParams
from tasks.core.tracking import running_dvc_stage


class StageFailed(Exception):
    """A stage exited with an error; the message is the stage's own one line."""


def stage_is_up_to_date(name: str) -> bool:
    """Ask DVC (``dvc status --json NAME``): no changed dependency, param, command or output."""
    shown = subprocess.run(
        dvc_command("status", "--json", name),
        env=tool_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        raise StageFailed(f"dvc status {name} failed: {error_line(shown.stderr)}")
    return not json.loads(shown.stdout or "{}")


# what `dvc repro` prints after every stage about git and remotes: the flow's job, not the stage's log
DVC_GIT_HINTS = (
    "To track the changes with git",
    "git add dvc.lock",
    "To enable auto staging",
    "dvc config core.autostage",
    "Use `dvc push`",
)


# what `dvc repro --single-item NAME` prints when the stage is up to date (DVC 3: "Stage 'NAME' didn't change, skipping")
DVC_UNCHANGED = "didn't change, skipping"


def run_through_dvc(name: str, force: bool, logger: logging.LoggerAdapter) -> bool:
    """``dvc repro --single-item NAME``, its output streamed line by line into the task log; False when DVC found
    the stage up to date and ran nothing.

    No ``dvc status`` first: ``dvc repro`` checks the stage itself, and a second DVC process cost each stage 1.2 s.
    """
    command = dvc_command("repro", "--single-item", *(["--force"] if force else []), name)
    lines, unchanged = [], False
    with running_dvc(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip()
            if line and not line.strip().startswith(DVC_GIT_HINTS):
                lines.append(line)
                logger.info(line)
                unchanged |= line.startswith(f"Stage '{name}' ") and DVC_UNCHANGED in line
    if process.wait() != 0:
        raise StageFailed(f"stage {name} failed: {error_line(chr(10).join(lines))}")
    return not unchanged


# set when the run is interrupted or terminated: a sharded stage stops waiting for its shards at the next one back
STOPPING = threading.Event()


def stop_shards(stop: bool = True) -> None:
    """Stop (or, for a new run, let run) the sharded stage of this process. Functions, not the event, are what the
    flow names: Prefect pickles a flow's function with the globals it names (the served runner), and an event holds a
    lock. The shards already on the Dask cluster run to their end."""
    if stop:
        STOPPING.set()
    else:
        STOPPING.clear()


@task(name="shard", task_run_name="{stage}[{index}]", cache_policy=NO_CACHE)
def process_shard(
    function: Callable[[Any], Any], items: list[Any], stage: str, index: int
) -> list[Any]:
    """One shard of a per-video stage: ``function`` on each item, in order.

    A failure names the shard's videos and the one that failed; the stage then fails as a whole
    (its output folder is only moved into place once every shard has come back).
    """
    results = []
    for item in items:
        try:
            results.append(function(item))
        except Exception as error:  # noqa: BLE001 — re-raised as one line naming the videos
            failed = (
                error if isinstance(error, PrivharError) else f"{type(error).__name__}: {error}"
            )
            raise PrivharError(
                f"{stage} shard {index} (videos {video_names(items)}) failed at "
                f"{video_names([item])}: {failed}"
            ) from None
    get_run_logger().info(f"{stage} shard {index}: {len(items)} videos done")
    return results


def video_names(items: Sequence[Any]) -> str:
    """The videos of a shard, by ``video_id`` where the items are manifest rows."""
    names = [
        str(item["video_id"]) if isinstance(item, dict) and "video_id" in item else repr(item)[:40]
        for item in items
    ]
    return ", ".join(names) if len(names) <= 4 else f"{names[0]} .. {names[-1]} ({len(names)})"


def shard_task_runner(settings: OrchestrateParams) -> Any:
    """The Dask cluster at ``orchestrate.dask_address`` as a Prefect task runner (prefect-dask)."""
    if not settings.dask_address:
        raise PrivharError(
            "params.yaml: orchestrate.dask_address is required when orchestrate.task_runner is dask"
        )
    from prefect_dask import DaskTaskRunner

    return DaskTaskRunner(address=settings.dask_address)


def shard_mapper(
    stage: str, settings: OrchestrateParams, logger: logging.LoggerAdapter
) -> Callable[..., list[Any]]:
    """A ``map_ordered`` replacement that sends ``shard_size`` items per task to the shard runner."""

    def mapper(function: Callable[[Any], Any], items: Sequence[Any], desc: str) -> list[Any]:
        shards = [
            list(items[start : start + settings.shard_size])
            for start in range(0, len(items), settings.shard_size)
        ]
        results: list[Any] = []
        with shard_task_runner(settings) as runner:
            futures = [
                runner.submit(
                    process_shard,
                    {"function": function, "items": shard, "stage": stage, "index": k},
                )
                for k, shard in enumerate(shards)
            ]
            for k, future in enumerate(futures):
                if STOPPING.is_set():
                    raise PrivharError(f"{stage}: the run was stopped before shard {k}")
                results.extend(future.result())
                logger.info(f"{desc}: {len(results)}/{len(items)} videos")
        return results

    return mapper


# One in-process stage at a time: its shards already fill the task runner.
_IN_PROCESS = threading.Lock()


def run_sharded(
    stage: DagStage, settings: OrchestrateParams, logger: logging.LoggerAdapter
) -> None:
    """Run the stage's own ``privhar stage ...`` command here, shards on the task runner, then ``dvc commit``."""
    from flows.stage_commands import stage as stage_group

    words = shlex.split(stage.cmd)
    if words[:2] != ["privhar", "stage"]:
        raise PrivharError(
            f"orchestrate.sharded_stages: stage {stage.name}'s command is not 'privhar stage ...': {stage.cmd}"
        )
    # the stage logs through logging.getLogger("tasks.…"): Prefect's PREFECT_LOGGING_EXTRA_LOGGERS=tasks
    # (flows/prefect_server.py) puts those lines in this task run's log
    logging.getLogger("tasks").setLevel(logging.INFO)
    try:
        with (
            _IN_PROCESS,
            installed_mapper(shard_mapper(stage.name, settings, logger)),
            running_dvc_stage(stage.name),  # the time table joins the stage's run on it
        ):
            stage_group(words[2:], standalone_mode=False)
    except PrivharError as error:
        raise StageFailed(f"stage {stage.name} failed: {error}") from None
    committed = subprocess.run(
        dvc_command("commit", "--force", stage.name),
        env=tool_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    if committed.returncode != 0:
        raise StageFailed(f"dvc commit {stage.name} failed: {error_line(committed.stderr)}")


# wall seconds of each stage a task of this process ran (not the skipped ones), for the flow's time table
STAGE_WALLS: dict[str, float] = {}


@task(name="stage", task_run_name="{stage.name}", cache_policy=NO_CACHE)
def run_stage(stage: DagStage, force: bool, settings: OrchestrateParams) -> State:
    """Bring one stage up to date; ``Skipped`` if DVC says it already is."""
    logger = get_run_logger()
    started = time.monotonic()
    # foreach stages: dprp@2.0, dprp@5.0, ...
    sharded = settings.task_runner == "dask" and stage.name.split("@")[0] in settings.sharded_stages
    if sharded and not force and stage_is_up_to_date(stage.name):
        ran = False
    elif sharded:
        logger.info(
            f"stage {stage.name}: shards of {settings.shard_size} videos on the Dask cluster at {settings.dask_address}"
        )
        run_sharded(stage, settings, logger)
        ran = True
    else:
        ran = run_through_dvc(stage.name, force, logger)
    if not ran:
        logger.info(f"stage {stage.name} is up to date (DVC): skipped")
        return Completed(name="Skipped", message=f"{stage.name} is up to date")
    STAGE_WALLS[stage.name] = time.monotonic() - started
    return Completed(message=f"{stage.name} ran")
