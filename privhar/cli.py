"""The ``privhar`` command line: run one stage (what dvc.yaml calls) or the whole pipeline."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import click

from benchmarks.commands import bench
from flows.click_options import PROJECTION_K, writable
from flows.flow_logging import log_stages_to_stderr
from flows.stage_commands import stage
from privhar.entry import Terminated, run_as_process
from privhar.protect_cli import protect_command
from tasks.core.errors import PrivharError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="privhar", prog_name="privhar")
def main() -> None:
    """privhar: privacy-preserving video human-activity recognition, end to end."""
    log_stages_to_stderr()


main.add_command(stage)
main.add_command(bench)
main.add_command(protect_command)


@main.command("dprp")
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--epsilon", type=float, required=True, help="Total ε of the video.")
@click.option("--delta", type=float, required=True, help="Total δ of the video.")
@PROJECTION_K
@click.option(
    "--budget-split", type=float, default=0.8, show_default=True, help="b: share of (ε, δ) for P."
)
@click.option(
    "--rank",
    default="1.0",
    show_default=True,
    help="Reconstruction rank r: an integer, or a fraction of k.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed of R and of the noise: reproducible, and then NOT private (tests, reproducing a result). "
    "Without it R and the noise come from OS entropy and are never stored.",
)
@click.option(
    "--calibration", type=click.Choice(["paper", "gaussian"]), default="paper", show_default=True
)
@click.option(
    "--neighbour",
    type=click.Choice(["frame", "pixel"]),
    default="frame",
    show_default=True,
    help="Neighbouring videos for --calibration gaussian.",
)
def dprp_command(source: Path, target: Path, **arguments: Any) -> None:
    """Protect one video with Video-DPRP and print its privacy report as JSON."""
    import json

    from tasks.core.storage import check_video_output
    from tasks.dprp.single_video import protect_file

    check_video_output(target)
    click.echo(json.dumps(protect_file(source, target, **arguments), indent=2))


# a TCP port to listen on (0, "any free port", would leave the address unknown)
PORT = click.IntRange(1, 65535)


@main.command("footage")
@click.argument("recording", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("out", type=click.Path(path_type=Path, file_okay=False), callback=writable)
@click.option(
    "--action", default="Walking", show_default=True, help="The class folder the clips go in."
)
@click.option("--seconds", type=float, default=4.0, show_default=True, help="Length of each clip.")
@click.option(
    "--size", type=(int, int), default=None, help="Resize to height width (default: as recorded)."
)
@click.option(
    "--test-every",
    type=click.IntRange(min=2),
    default=4,
    show_default=True,
    help="Every n-th clip goes to the test split.",
)
def footage_command(recording: Path, out: Path, **arguments: Any) -> None:
    """Cut a long camera RECORDING into a UCF101-shaped folder OUT (set data.source: ucf101, data.root: OUT)."""
    from tasks.footage import cut_recording

    clips = cut_recording(recording, out, **arguments)
    click.echo(f"footage: {len(clips)} clips of {arguments['seconds']:g} s in {out}", err=True)


@main.command("flow")
@click.option(
    "--profile",
    default="default",
    show_default=True,
    help="profiles/<name>.yaml to overlay on params.yaml.",
)
@click.option("--force", is_flag=True, help="Rerun every stage even if it is up to date.")
@click.argument("stages", nargs=-1)
def flow_command(profile: str, force: bool, stages: tuple[str, ...]) -> None:
    """Run the pipeline once as a run of the Prefect deployment (`make run` does): on the runner of `privhar serve`
    if it is up, else here, on the project's Prefect database either way, so the Prefect UI shows the run."""
    from flows.dag import read_dag
    from flows.prefect_server import project_server
    from flows.preflight import check_named_files
    from flows.profiles import check_profile
    from flows.project_lock import check_project, check_unlocked

    # before a temporary Prefect server is started for nothing: params.yaml with the profile overlaid (in memory),
    # and the files it names
    check_unlocked(check_project(Path.cwd()))
    check_named_files(Path.cwd(), check_profile(Path.cwd(), profile))
    # and the pipeline DVC reads: a stage named here that dvc.yaml lacks, or a damaged dvc.lock, was found 47-62 s in,
    # after a Prefect server and a failed MLflow run were made (issue 82)
    read_dag(Path.cwd(), stages, named_by="privhar flow")
    parameters = {
        "project": str(Path.cwd()),
        "profile": profile,
        "stages": list(stages),
        "force": force,
    }
    with project_server(Path.cwd()):
        from prefect.events.worker import EventsWorker
        from prefect.exceptions import TerminationSignal
        from prefect.logging.handlers import APILogWorker

        from flows.deployment import run_as_deployment
        from flows.flow_logging import tracebacks_to_file
        from flows.pipeline_flow import failure_message

        log = tracebacks_to_file(Path.cwd())
        try:
            state = run_as_deployment(Path.cwd(), parameters)
        # Prefect's own SIGTERM handler in the flow run (which it marks crashed)
        except TerminationSignal:
            raise Terminated(128 + signal.SIGTERM) from None
        finally:
            # the run's last logs and events reach the server before a temporary one stops: sent at exit instead,
            # they found it gone and retried for a minute
            APILogWorker.drain_all(timeout=15)
            EventsWorker.drain_all(timeout=15)
        if not state.is_completed():
            raise PrivharError(
                f"{failure_message(state, str(state.message))} (Prefect's log and tracebacks: {log})"
            )
        _print_scores(_flow_scores(state, stages))


def _flow_scores(state: Any, stages: tuple[str, ...]) -> dict:
    """The flow's scores: its result where it ran here, else (the served runner keeps it) read again from DVC."""
    try:
        return state.result()
    except Exception:  # noqa: BLE001 - Prefect's MissingResult: the run's result stayed with the runner
        from flows.dag import read_dag, runs_scoring
        from flows.pipeline import method_metrics

        scored = runs_scoring(stage.name for stage in read_dag(Path.cwd(), stages))
        return method_metrics() if scored else {}


@main.command("serve")
@click.option(
    "--host", default=None, help="Address to listen on [default: orchestrate.host, 127.0.0.1]."
)
@click.option(
    "--port",
    type=PORT,
    default=None,
    help="Port of the Prefect server [default: orchestrate.prefect_port].",
)
@click.option(
    "--stop", is_flag=True, help="Stop a running 'privhar serve' of this project and its server."
)
@click.argument("action", required=False, type=click.Choice(["stop"]))
def serve_command(host: str | None, port: int | None, stop: bool, action: str | None) -> None:
    """Serve the scheduled pipeline deployment on the project's Prefect server until interrupted.

    `privhar serve stop` (as `prefect server stop`) is `privhar serve --stop`."""
    from flows.deployment import serve, stop_serving

    if stop or action == "stop":
        stopped = stop_serving(Path.cwd())
        click.echo(
            f"privhar: stopped {', '.join(stopped)}" if stopped else "privhar: nothing was serving",
            err=True,
        )
        return
    serve(Path.cwd(), host=host, port=port)


@main.command("ui")
@click.option(
    "--host", default=None, help="Address to listen on [default: orchestrate.host, 127.0.0.1]."
)
@click.option("--port", type=PORT, default=None, help="Port [default: orchestrate.mlflow_port].")
@click.option(
    "--stop",
    is_flag=True,
    help="Stop this project's MLflow UI on --port (every one without --port).",
)
@click.argument("action", required=False, type=click.Choice(["stop"]))
def ui_command(host: str | None, port: int | None, stop: bool, action: str | None) -> None:
    """The MLflow UI (runs, metrics, model registry) over the project's store, until Ctrl-C (`privhar ui stop`: --stop)."""
    from flows.stage_readers import orchestrate
    from privhar.mlflow_ui import run_ui, stop_uis

    if stop or action == "stop":
        ports = stop_uis(Path.cwd(), port)
        click.echo(
            f"privhar: stopped the MLflow UI on port {', '.join(map(str, ports))}"
            if ports
            else "privhar: no MLflow UI of this project was running",
            err=True,
        )
        return

    settings = orchestrate(Path.cwd())
    run_ui(Path.cwd(), host or settings.host, settings.mlflow_port if port is None else port)


@main.command("plots")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("build/plots"),
    show_default=True,
    help="Folder of the page (index.html).",
)
def plots_command(out: Path) -> None:
    """DVC's plots (Top-1 against ε, learning curves, confusion matrices, federated rounds) as one page that renders
    offline, grouped by stage: vega inlined from build/vega (make install), `dvc plots show` with that template."""
    from flows.project_lock import check_project
    from privhar.plots_page import show_plots

    # outside a project it asked for an npm install (issue 82): say it is not one
    click.echo(show_plots(check_project(Path.cwd()), out))


@main.command("screenshots")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("build/screenshots"),
    show_default=True,
    help="Folder of the PNG files.",
)
def screenshots_command(out: Path) -> None:
    """After make run: the MLflow runs, Top-1 against ε, the champion, the Prefect runs and DVC's plots (offline),
    each page saved as a PNG by headless Chromium (the servers are started and stopped for it)."""
    from privhar.screenshots import take_screenshots

    for path in take_screenshots(Path.cwd(), out):
        click.echo(path)


@main.command("models")
def models_command() -> None:
    """Registered models: every version with its aliases, privacy guarantee and Top-1."""
    from tasks.core.tracking import configure, tracking_uri
    from tasks.video_models.model_registry import format_epsilon, list_versions

    store = tracking_uri()
    if store.startswith("sqlite:///") and not Path(store.removeprefix("sqlite:///")).is_file():
        # read, never create: a store made only to say it is empty (issue 61: 954 KB) would be mistaken for a run's
        click.echo(f"privhar: no registered models yet (no MLflow store at {store})", err=True)
        return
    configure()
    rows = list_versions()
    if not rows:
        click.echo("privhar: no registered models yet (run the pipeline first)", err=True)
        return
    # Top-1: the row's mean ± 95 % interval over its seeds, as the champion is chosen (issue 82: seed 0's alone made
    # a champion look like the worst version); ε̂: the one-run audit's lower bound (Steinke et al.; f-DP where the
    # mechanism's trade-off is Gaussian); unit: what ε protects
    header = (
        f"{'model':<22} {'version':>7}  {'aliases':<18} {'epsilon':>8} {'delta':>8} {'eps_hat':>7} {'fdp_hat':>7}  "
        f"{'Top-1 (mean ± 95%)':<18}  unit; accountant"
    )
    click.echo(header)
    click.echo("-" * len(header))
    for row in rows:
        audited = f"{row.epsilon_audited:.2f}" if row.epsilon_audited is not None else "-"
        fdp = f"{row.epsilon_audited_fdp:.2f}" if row.epsilon_audited_fdp is not None else "-"
        click.echo(
            f"{row.name:<22} {row.version:>7}  {','.join(row.aliases) or '-':<18} {format_epsilon(row.epsilon):>8} "
            f"{row.delta:>8.2g} {audited:>7} {fdp:>7}  {row.top1_shown():<18}  {row.unit}; {row.accountant}"
        )


@main.command("deps")
@click.option(
    "--write",
    is_flag=True,
    help="Rewrite dvc.yaml's code deps instead of listing the stages that differ.",
)
def deps_command(write: bool) -> None:
    """dvc.yaml's code deps: each stage its command's fingerprint (data/code/<command>.sha256, flows/code_deps.py) and
    no source file by hand; list the stages that differ, or --write them."""
    from flows.code_deps import differences, write_code_deps

    if write:
        changed = write_code_deps(Path.cwd())
        click.echo(
            f"privhar: code deps rewritten for {', '.join(changed)}"
            if changed
            else "privhar: code deps up to date",
            err=True,
        )
        return
    found = differences(Path.cwd())
    for name, (missing, extra) in found.items():
        click.echo(f"{name}: missing {', '.join(missing) or '-'}; extra {', '.join(extra) or '-'}")
    if found:
        raise PrivharError(
            f"dvc.yaml: the code deps of {len(found)} stage(s) are not their command's fingerprint "
            "(privhar deps --write)"
        )
    click.echo("privhar: each stage depends on its command's code fingerprint", err=True)


def _print_scores(metrics: dict) -> None:
    """One line per registered model (seed 0), with its row's mean ± 95 % over the training seeds."""
    from tasks.core.seeds import base_key

    for key, values in sorted(metrics.items()):
        if base_key(key)[1]:
            continue
        second = (
            f"  protocol 2 Top-1 {values['top1_protocol2']:.4f}"
            if "top1_protocol2" in values
            else ""
        )
        row = (
            f"  row {values['top1_mean']:.4f} ± {values['top1_ci95']:.4f} over {int(values['seeds'])} seeds"
            if "top1_ci95" in values
            else ""
        )
        click.echo(
            f"{key:>14}  Top-1 {values['top1']:.4f}  Top-5 {values['top5']:.4f}{second}{row}  "
            f"({values['test_videos']} test videos)"
        )


def entry_point() -> None:
    """Console script: ``privhar`` with one-line errors (privhar/entry.py)."""
    run_as_process(main)
