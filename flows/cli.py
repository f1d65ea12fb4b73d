"""The ``privhar`` command line: run one stage (what dvc.yaml calls) or the whole pipeline."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import click

from tasks.core.errors import ERROR_PREFIX, PrivharError
from tasks.core.params import ANONYMIZE_METHODS
from tasks.core.private_catalogue import PRIVATE_METHODS

PARAMS = click.option("--params", "params_path", type=click.Path(path_type=Path), default=Path("params.yaml"),
                      show_default=True, help="The params file.")


def _writable(context: click.Context, parameter: click.Parameter, value: Path | None) -> Path | None:
    """An output folder or file is checked before the stage does any work (read-only, /proc, below a file)."""
    from tasks.core.storage import check_writable

    if value is not None:
        check_writable(value, f"--{parameter.name} path")
    return value


def _dir(name: str, help_text: str, exists: bool = False) -> click.Option:
    return click.option(name, required=True, type=click.Path(path_type=Path, file_okay=False, exists=exists), help=help_text,
                        callback=None if exists else _writable)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="privhar", prog_name="privhar")
def main() -> None:
    """privhar: privacy-preserving video human-activity recognition, end to end."""
    # the stages log through logging.getLogger(__name__): their progress and privacy lines on stderr
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    tasks_logger = logging.getLogger("tasks")
    if not tasks_logger.handlers:
        tasks_logger.addHandler(handler)
        tasks_logger.setLevel(logging.INFO)
        tasks_logger.propagate = False  # once on stderr, not again through a root handler another library set up


@main.group()
def stage() -> None:
    """Run one stage of the pipeline (the commands dvc.yaml calls)."""


@stage.command("scan")
@PARAMS
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False), callback=_writable,
              help="Where to write the listing (CSV).")
def scan_command(params_path: Path, out: Path) -> None:
    """List the files of the real dataset (path, size, time): what the index stage depends on."""
    from tasks.scan import scan

    scan(params_path=params_path, out=out)


@stage.command("synthesize")
@PARAMS
@_dir("--out", "Where to write the source videos and their manifest.")
@click.option("--report", type=click.Path(path_type=Path, file_okay=False), default=None, callback=_writable,
              help="Where to write preview.png.")
@click.option("--public", is_flag=True, help="Render the public pretraining set (params section public) instead.")
def synthesize_command(params_path: Path, out: Path, report: Path | None, public: bool) -> None:
    """Render the embedded dataset, or index the real one data.source names."""
    from tasks.synthesize import synthesize

    rows = synthesize(params_path=params_path, out=out, report=report, public=public)
    click.echo(f"synthesize: {len(rows)} videos in {out}", err=True)


@stage.command("decode")
@PARAMS
@_dir("--source", "Folder of the source manifest (the synthesize stage's output).", exists=True)
@_dir("--out", "Where to write the decoded clips and their manifest.")
@click.option("--run-name", default="decode", show_default=True, help="The stage's MLflow run name (decode-public for the public set).")
def decode_command(params_path: Path, source: Path, out: Path, run_name: str) -> None:
    """Decode, resample, resize and store clips losslessly."""
    from tasks.decode import decode

    decode(params_path=params_path, source=source, out=out, run_name=run_name)


COPIES = click.option("--copies", "copies", multiple=True, required=True,
                      type=click.Path(path_type=Path, file_okay=False, exists=True),
                      help="A folder of protected copies (data/anonymize, data/dprp); repeatable.")
SPEED = click.option("--speed", type=click.Path(path_type=Path, dir_okay=False), default=None, callback=_writable,
                     help="Where to write the measured frames/s (JSON; assess reads it for f_speed).")


BUDGET = click.option("--budget", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None,
                      help="This stage's budget plan (the budget stage's data/budget/<stage>.json); default: planned here.")


@stage.command("budget")
@PARAMS
@_dir("--frames", "Folder of the decoded clips (who is in which video).", exists=True)
@_dir("--out", "Where to write one <stage>.json per DP stage.")
def budget_command(params_path: Path, frames: Path, out: Path) -> None:
    """Plan every DP release: each person's ε, per DP stage (what privacy.max_epsilon is checked against)."""
    from tasks.budget_plan import budget_plan

    budget_plan(params_path=params_path, frames=frames, out=out)


@stage.command("dprp")
@PARAMS
@_dir("--frames", "Folder of the decoded clips.", exists=True)
@click.option("--epsilon", type=float, required=True, help="Total ε (one of dprp.epsilons).")
@_dir("--out", "Where to write the protected clips, their manifest and the privacy ledger.")
@click.option("--report", type=click.Path(path_type=Path, file_okay=False), default=None, callback=_writable,
              help="Where to write eps<ε>.png (raw and protected test frames).")
@SPEED
@BUDGET
def dprp_stage_command(params_path: Path, frames: Path, epsilon: float, out: Path, report: Path | None,
                       speed: Path | None, budget: Path | None) -> None:
    """Video-DPRP on every decoded clip (both splits) at one ε."""
    from tasks.dprp.stage import dprp

    dprp(params_path=params_path, frames=frames, epsilon=epsilon, out=out, report=report, speed_path=speed, budget=budget)


@stage.command("anonymize")
@PARAMS
@_dir("--frames", "Folder of the decoded clips (with their ground-truth annotations).", exists=True)
@click.option("--method", required=True, help=f"One of anonymize.methods: {', '.join(ANONYMIZE_METHODS)}.")
@_dir("--out", "Where to write the protected clips, public masks and manifest.")
@SPEED
def anonymize_stage_command(params_path: Path, frames: Path, method: str, out: Path, speed: Path | None) -> None:
    """Obfuscate every decoded clip with one method (paper 000 §4.2 baselines)."""
    from tasks.anonymize.stage import anonymize

    anonymize(params_path=params_path, frames=frames, method=method, out=out, speed_path=speed)


@stage.command("preview")
@PARAMS
@_dir("--frames", "Folder of the decoded (raw) clips.", exists=True)
@COPIES
@_dir("--out", "Where to write protections.png.")
def preview_command(params_path: Path, frames: Path, copies: tuple[Path, ...], out: Path) -> None:
    """The same test frames under every protection, as one PNG grid."""
    from tasks.preview import preview

    click.echo(f"preview: {preview(params_path=params_path, frames=frames, copies=list(copies), out=out)}", err=True)


@stage.command("train")
@PARAMS
@_dir("--frames", "Folder of the clips to learn from: decoded (raw) or protected.", exists=True)
@_dir("--out", "Where to write the trained model; its folder name is the model's key (data/train/<key>).")
@_dir("--report", "Where to write the training metrics and history (<key>.json, <key>_history.csv).")
@click.option("--family", default=None, help="Registered model privhar-<family> [default: train.method].")
@click.option("--epochs", type=int, default=None, help="Override train.epochs.")
@click.option("--init", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="Folder of a model to fine-tune (the pretrain stage's data/pretrain/public) [default: from scratch].")
@click.option("--seeds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Training seeds (the pipeline passes report.seeds): seed i >= 1 is saved in <out>/seed<i>.")
def train_command(params_path: Path, frames: Path, out: Path, report: Path, family: str | None, epochs: int | None,
                  init: Path | None, seeds: int) -> None:
    """Train the video classifier with the method train.method names."""
    from tasks.train import train

    final = train(params_path=params_path, frames=frames, out=out, report=report, family=family, epochs=epochs, init=init,
                  seeds=seeds)
    click.echo(f"train: final loss {final['loss']:.4f}, train accuracy {final['train_accuracy']:.4f}", err=True)


@stage.command("private")
@PARAMS
@click.option("--method", required=True, type=click.Choice(PRIVATE_METHODS), help="One of private.methods.")
@_dir("--frames", "Folder of the decoded (raw) clips.", exists=True)
@click.option("--avatar", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="The avatar copy (anonymize@avatar): maskdp learns from it, both MaskDP methods use its public masks.")
@_dir("--init", "Folder of the public model to fine-tune (the pretrain stage's output).", exists=True)
@_dir("--out", "Where to write one <method>-eps<ε>/model.pt per ε.")
@_dir("--report", "Where to write <method>.csv (ε, δ, σ, q, steps, C, accountant per model).")
@click.option("--nproc", type=click.IntRange(min=1), default=None,
              help="Processes per dp_sgd model (Opacus DPDDP), instead of private.nproc.")
@BUDGET
def private_command(params_path: Path, method: str, frames: Path, avatar: Path | None, init: Path, out: Path,
                    report: Path, nproc: int | None, budget: Path | None) -> None:
    """Fine-tune the public model privately at every ε of private.epsilons (and ∞)."""
    from tasks.private.stage import train_private

    rows = train_private(params_path=params_path, method=method, frames=frames, init=init, out=out, report=report,
                         avatar=avatar, nproc=nproc, budget=budget)
    click.echo(f"train-private: {method}: {len(rows)} models in {out}", err=True)


@stage.command("federated")
@PARAMS
@_dir("--frames", "Folder of the decoded (raw) clips.", exists=True)
@_dir("--init", "Folder of the public model to fine-tune (the pretrain stage's output).", exists=True)
@_dir("--out", "Where to write one <aggregation>-<tuning>/model.pt per run.")
@_dir("--report", "Where to write federated.md / .csv, rounds.csv, accuracy_by_round.png and metrics.json.")
@BUDGET
def federated_command(params_path: Path, frames: Path, init: Path, out: Path, report: Path, budget: Path | None) -> None:
    """Federated DP training (paper 003): every federated.aggregations × federated.tunings at federated.epsilon."""
    from tasks.federated.stage import train_federated

    rows = train_federated(params_path=params_path, frames=frames, init=init, out=out, report=report, budget=budget)
    click.echo(f"train-federated: {len(rows)} models in {out}; table in {report / 'federated.md'}", err=True)


@stage.command("private-table")
@PARAMS
@click.option("--metrics", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True,
              help="The evaluate stage's metrics.json.")
@_dir("--ledgers", "Folder of the train-private stages' <method>.csv.", exists=True)
@_dir("--train-reports", "Folder of the train stages' <key>.json (baseline, dprp-eps<ε>: their privacy claims).",
      exists=True)
@_dir("--out", "Where to write private.md, private.csv and accuracy_vs_epsilon.png.")
def private_table_command(params_path: Path, metrics: Path, ledgers: Path, train_reports: Path, out: Path) -> None:
    """Top-1 of every private method at every ε: paper 000 / 001 Table 2 as Markdown + CSV, and a plot."""
    from tasks.private.table import private_table

    records = private_table(params_path=params_path, metrics=metrics, ledgers=ledgers, train_reports=train_reports, out=out)
    click.echo(f"private-table: {len(records)} models in {out / 'private.md'}", err=True)


@stage.command("assess")
@PARAMS
@_dir("--frames", "Folder of the decoded (raw) clips with their annotations: the ground truth.", exists=True)
@COPIES
@_dir("--speeds", "Folder of the protecting stages' <copy>.json (measured frames/s).", exists=True)
@_dir("--out", "Where to write signature.json and signature.csv.")
def assess_command(params_path: Path, frames: Path, copies: tuple[Path, ...], speeds: Path, out: Path) -> None:
    """Privacy attributes (cMAP, F1) and paper 004's evaluator functions for the raw data and every protected copy."""
    from tasks.assess.stage import assess

    results = assess(params_path=params_path, frames=frames, copies=list(copies), speeds=speeds, out=out)
    click.echo(f"assess: {len(results)} copies in {out / 'signature.json'}", err=True)


@stage.command("report")
@PARAMS
@click.option("--metrics", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The evaluate stage's metrics.json (missing: its rows say 'not run').")
@click.option("--signature", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The assess stage's signature.json (missing: its rows say 'not run').")
@_dir("--ledgers", "Folder of the train-private stages' <method>.csv.", exists=True)
@_dir("--train-reports", "Folder of the train stages' <key>.json.", exists=True)
@_dir("--dprp", "Folder of the DPRP copies (their ledger.parquet).", exists=True)
@_dir("--anonymize", "Folder of the anonymized copies.", exists=True)
@_dir("--frames", "Folder of the decoded clips (the data subjects of each split).", exists=True)
@click.option("--ldp-ledger", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="The ldp stage's ledger.csv (missing: no LDP release yet).")
@click.option("--federated-table", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="The train-federated stage's federated.csv (missing: no federated release yet).")
@click.option("--predictions", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="The evaluate stage's predictions.csv: where each row's spread over seeds comes from (missing: not run).")
@_dir("--out", "Where to write results.md and report/.")
def report_command(params_path: Path, metrics: Path, signature: Path, ledgers: Path, train_reports: Path, dprp: Path,
                   anonymize: Path, frames: Path, out: Path, ldp_ledger: Path | None, federated_table: Path | None,
                   predictions: Path | None) -> None:
    """results.md: paper 000 Table 1, paper 004 signatures, plots and the privacy ledger per method and subject."""
    from tasks.report.stage import report

    table = report(params_path=params_path, metrics=metrics, signature=signature, ledgers=ledgers,
                   train_reports=train_reports, dprp=dprp, anonymize=anonymize, frames=frames, out=out, ldp_ledger=ldp_ledger,
                   federated_table=federated_table, predictions=predictions)
    click.echo(f"report: {len(table)} methods in {out / 'results.md'}", err=True)


@stage.command("register")
@PARAMS
@click.option("--metrics", "metrics", multiple=True, required=True, type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="A metrics.json of model scores (evaluate's Top-1, the report's cMAP / F1); repeat for several.")
@click.option("--scored", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True,
              help="evaluate's scored.json: the SHA-256 of each model file it scored.")
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False), callback=_writable,
              help="Where to write registered.json (model key: version described).")
def register_command(params_path: Path, metrics: tuple[Path, ...], scored: Path, out: Path) -> None:
    """Score the MLflow registry: each model's newest version gets its scores and provenance; champion aliases move."""
    from tasks.register import register

    registered = register(params_path=params_path, metrics=list(metrics), scored=scored, out=out)
    click.echo(f"register: {sum(v['version'] is not None for v in registered.values())} versions scored in {out}", err=True)


@stage.command("ldp")
@PARAMS
@_dir("--frames", "Folder of the decoded clips (with their annotations: the person's box).", exists=True)
@_dir("--public", "Folder of the decoded public clips: the DCAConv filters are fitted on them, never on private videos.",
      exists=True)
@_dir("--out", "Where to write the fitted DCAConv filters and the released (perturbed) training codes.")
@_dir("--report", "Where to write video.csv, metrics.json and ledger.csv.")
@BUDGET
def ldp_command(params_path: Path, frames: Path, public: Path, out: Path, report: Path, budget: Path | None) -> None:
    """Local DP for video: randomized DCAConv codes of each clip's person-centred motion image, learners per ε."""
    from tasks.ldp.video import ldp_video

    rows = ldp_video(params_path=params_path, frames=frames, public=public, out=out, report=report, budget=budget)
    click.echo(f"ldp: {len(rows)} results in {report / 'video.csv'}", err=True)


@stage.command("ldp-digits")
@PARAMS
@_dir("--out", "Where to write digits.md, digits.csv and digits.png.")
def ldp_digits_command(params_path: Path, out: Path) -> None:
    """Paper 002's check on scikit-learn's digits: NB / KNN / NCC on randomized DCAConv codes against ε, d = 16 and 2."""
    from tasks.ldp.digits import ldp_digits

    rows = ldp_digits(params_path=params_path, out=out)
    click.echo(f"ldp-digits: {len(rows)} cells in {out / 'digits.md'}", err=True)


@stage.command("evaluate")
@PARAMS
@_dir("--frames", "Folder of the decoded clips.", exists=True)
@click.option("--models", "models", multiple=True, required=True, type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="A folder of trained models (<key>/model.pt at any depth); repeat for several.")
@_dir("--out", "Where to write metrics, predictions and plots.")
def evaluate_command(params_path: Path, frames: Path, models: tuple[Path, ...], out: Path) -> None:
    """Top-1 / Top-5 and a confusion matrix for every trained model."""
    from tasks.evaluate import evaluate

    evaluate(params_path=params_path, frames=frames, models=list(models), out=out)


@main.command("dprp")
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--epsilon", type=float, required=True, help="Total ε of the video.")
@click.option("--delta", type=float, required=True, help="Total δ of the video.")
@click.option("--k", "k", default="32x32x3", show_default=True, help="Projection dimension: an integer or HxWxC.")
@click.option("--budget-split", type=float, default=0.8, show_default=True, help="b: share of (ε, δ) for P.")
@click.option("--rank", default="1.0", show_default=True, help="Reconstruction rank r: an integer, or a fraction of k.")
@click.option("--seed", type=int, default=None,
              help="Seed of R and of the noise: reproducible, and then NOT private (tests, reproducing a result). "
                   "Without it R and the noise come from OS entropy and are never stored.")
@click.option("--calibration", type=click.Choice(["paper", "gaussian"]), default="paper", show_default=True)
@click.option("--neighbour", type=click.Choice(["frame", "pixel"]), default="frame", show_default=True,
              help="Neighbouring videos for --calibration gaussian.")
def dprp_command(source: Path, target: Path, epsilon: float, delta: float, k: str, budget_split: float, rank: str,
                 seed: int | None, calibration: str, neighbour: str) -> None:
    """Protect one video with Video-DPRP and print its privacy report as JSON."""
    import json

    from tasks.core.storage import check_video_output
    from tasks.dprp.single_video import protect_file

    check_video_output(target)
    report = protect_file(source, target, epsilon=epsilon, delta=delta, k=k, budget_split=budget_split, rank=rank,
                          seed=seed, calibration=calibration, neighbour=neighbour)  # type: ignore[arg-type]
    click.echo(json.dumps(report, indent=2))


BENCH_DEVICE = click.option("--device", default="auto", show_default=True,
                            help="auto | cpu | cuda | cuda:N (as base.device); the JSON names the device and its matmul rate.")


@main.group()
def bench() -> None:
    """Benchmarks: timings on this machine, written as JSON (never part of the tests)."""


@bench.command("dprp")
@click.option("--frames", type=int, default=180, show_default=True, help="T (a 7 s UCF101 clip at 25 fps).")
@click.option("--size", type=(int, int), default=(240, 320), show_default=True, help="Frame height and width.")
@click.option("--k", "k", default="32x32x3", show_default=True, help="Projection dimension: an integer or HxWxC.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("reports/bench/dprp.json"), show_default=True,
              callback=_writable)
@BENCH_DEVICE
def bench_dprp_command(frames: int, size: tuple[int, int], k: str, out: Path, device: str) -> None:
    """Per-video seconds of Video-DPRP (both projection modes), its GFLOP/s and the device's matmul rate."""
    import json

    from tasks.core.device import resolve_device
    from tasks.dprp.bench import run_bench
    from tasks.dprp.single_video import parse_k

    record = run_bench(frames=frames, height=size[0], width=size[1], k=parse_k(k), epsilon=8.0, delta=1e-4,
                       budget_split=0.8, out=out, device=resolve_device(device, "--device"))
    click.echo(json.dumps(record, indent=2))


@bench.command("private")
@click.option("--batch", type=int, default=16, show_default=True, help="Logical batch (train.batch_size).")
@click.option("--frames", type=int, default=8, show_default=True, help="Frames per clip (decode.frames).")
@click.option("--size", type=(int, int), default=(96, 128), show_default=True, help="Frame height and width (train.input_size).")
@click.option("--width", type=int, default=16, show_default=True, help="Model width (train.width).")
@click.option("--repeats", type=int, default=5, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("reports/bench/private.json"), show_default=True,
              callback=_writable)
@BENCH_DEVICE
def bench_private_command(batch: int, frames: int, size: tuple[int, int], width: int, repeats: int, out: Path,
                          device: str) -> None:
    """Seconds per logical batch: non-private SGD, DP-SGD (each Opacus per-sample gradient mode), selective DP-SGD."""
    import json

    from tasks.core.device import resolve_device
    from tasks.private.bench import run_bench

    record = run_bench(batch=batch, frames=frames, height=size[0], width=size[1], model_width=width, warmup=2,
                       repeats=repeats, out=out, device=resolve_device(device, "--device"))
    click.echo(json.dumps(record, indent=2))


@bench.command("stages")
@click.option("--profile", default="smoke", show_default=True, help="profiles/<name>.yaml: the data the stages run on.")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=Path("reports/bench/stages.json"),
              show_default=True, callback=_writable, help="Where to write the result (JSON; a Markdown table beside it).")
def bench_stages_command(profile: str, out: Path) -> None:
    """Each stage's fixed cost (wall time less its work) started cold and forked from the warm stage server."""
    from flows.stage_bench import bench_stages

    result = bench_stages(Path.cwd(), profile, out)
    click.echo(out.with_suffix(".md").read_text().split("\n\n")[1], err=True)
    click.echo(f"privhar: {len(result['stages'])} stages measured, written to {out}", err=True)


@bench.command("anonymize")
@click.option("--root", type=click.Path(path_type=Path, file_okay=False, exists=True), default=Path("data/footage/vtest"),
              show_default=True, help="A UCF101-shaped folder of real footage (make footage cuts one).")
@PARAMS
@click.option("--out", type=click.Path(path_type=Path), default=Path("reports/bench/anonymize.json"), show_default=True,
              callback=_writable)
def bench_anonymize_command(root: Path, params_path: Path, out: Path) -> None:
    """Coverage of the moving pixels and frames/s of each people source (and the ensemble) on real footage."""
    import json

    from tasks.anonymize.bench import run_bench

    click.echo(json.dumps(run_bench(root=root, params_path=params_path, out=out), indent=2))


@main.command("footage")
@click.argument("recording", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("out", type=click.Path(path_type=Path, file_okay=False), callback=_writable)
@click.option("--action", default="Walking", show_default=True, help="The class folder the clips go in.")
@click.option("--seconds", type=float, default=4.0, show_default=True, help="Length of each clip.")
@click.option("--size", type=(int, int), default=None, help="Resize to height width (default: as recorded).")
@click.option("--test-every", type=click.IntRange(min=2), default=4, show_default=True,
              help="Every n-th clip goes to the test split.")
def footage_command(recording: Path, out: Path, action: str, seconds: float, size: tuple[int, int] | None,
                    test_every: int) -> None:
    """Cut a long camera RECORDING into a UCF101-shaped folder OUT (set data.source: ucf101, data.root: OUT)."""
    from tasks.footage import cut_recording

    clips = cut_recording(recording, out, action=action, seconds=seconds, size=size, test_every=test_every)
    click.echo(f"footage: {len(clips)} clips of {seconds:g} s in {out}", err=True)


@main.command("run")
@click.option("--force", is_flag=True, help="Rerun every stage even if it is up to date.")
@click.option("--cold", is_flag=True, help="Start each stage in its own interpreter instead of forking it from the warm "
                                           "stage server (slower by seconds per stage; for comparison and debugging).")
@click.argument("targets", nargs=-1)
def run_command(force: bool, cold: bool, targets: tuple[str, ...]) -> None:
    """Run the pipeline (dvc repro) under one MLflow parent run and print Top-1."""
    from flows.pipeline import run_pipeline

    _print_scores(run_pipeline(Path.cwd(), force=force, targets=targets, warm=not cold))


@main.command("flow")
@click.option("--profile", default="default", show_default=True, help="profiles/<name>.yaml to overlay on params.yaml.")
@click.option("--force", is_flag=True, help="Rerun every stage even if it is up to date.")
@click.argument("stages", nargs=-1)
def flow_command(profile: str, force: bool, stages: tuple[str, ...]) -> None:
    """Run the pipeline once as the Prefect flow (on the project's Prefect server if it is up)."""
    from flows.project_lock import check_unlocked
    from flows.prefect_server import use_project_server

    check_unlocked(Path.cwd())  # before a temporary Prefect server is started for nothing
    use_project_server(Path.cwd())
    from flows.flow_logging import tracebacks_to_file
    from flows.pipeline_flow import failure_message, pipeline_flow

    log = tracebacks_to_file(Path.cwd())
    state = pipeline_flow(project=str(Path.cwd()), profile=profile, stages=list(stages), force=force, return_state=True)
    if not state.is_completed():
        raise PrivharError(f"{failure_message(state, str(state.message))} (Prefect's log and tracebacks: {log})")
    _print_scores(state.result())


@main.command("serve")
@click.option("--host", default=None, help="Address to listen on [default: orchestrate.host, 127.0.0.1].")
@click.option("--port", type=int, default=None, help="Port of the Prefect server [default: orchestrate.prefect_port].")
@click.option("--stop", is_flag=True, help="Stop a running 'privhar serve' of this project and its server.")
@click.argument("action", required=False, type=click.Choice(["stop"]))
def serve_command(host: str | None, port: int | None, stop: bool, action: str | None) -> None:
    """Serve the scheduled pipeline deployment on the project's Prefect server until interrupted.

    `privhar serve stop` (as `prefect server stop`) is `privhar serve --stop`."""
    from flows.deployment import serve, stop_serving

    if stop or action == "stop":
        stopped = stop_serving(Path.cwd())
        click.echo(f"privhar: stopped {', '.join(stopped)}" if stopped else "privhar: nothing was serving", err=True)
        return
    serve(Path.cwd(), host=host, port=port)


@main.command("ui")
@click.option("--host", default=None, help="Address to listen on [default: orchestrate.host, 127.0.0.1].")
@click.option("--port", type=int, default=None, help="Port [default: orchestrate.mlflow_port].")
@click.option("--stop", is_flag=True, help="Stop this project's MLflow UI on --port (every one without --port).")
@click.argument("action", required=False, type=click.Choice(["stop"]))
def ui_command(host: str | None, port: int | None, stop: bool, action: str | None) -> None:
    """The MLflow UI (runs, metrics, model registry) over the project's store, until Ctrl-C (`privhar ui stop`: --stop)."""
    from flows.mlflow_ui import run_ui, stop_uis
    from tasks.core.params import OrchestrateParams, load_section

    if stop or action == "stop":
        ports = stop_uis(Path.cwd(), port)
        click.echo(f"privhar: stopped the MLflow UI on port {', '.join(map(str, ports))}" if ports
                   else "privhar: no MLflow UI of this project was running", err=True)
        return

    settings = load_section(Path("params.yaml"), "orchestrate", OrchestrateParams)
    run_ui(Path.cwd(), host or settings.host, port or settings.mlflow_port)


@main.command("models")
def models_command() -> None:
    """Registered models: every version with its aliases, privacy guarantee and Top-1."""
    from tasks.core.registry import format_epsilon, list_versions
    from tasks.core.tracking import configure

    configure()
    rows = list_versions()
    if not rows:
        click.echo("privhar: no registered models yet (run the pipeline first)", err=True)
        return
    header = f"{'model':<22} {'version':>7}  {'aliases':<18} {'epsilon':>8} {'delta':>8}  {'Top-1':>6}  accountant"
    click.echo(header)
    click.echo("-" * len(header))
    for row in rows:
        top1 = f"{row.top1:.4f}" if row.top1 is not None else "-"
        click.echo(f"{row.name:<22} {row.version:>7}  {','.join(row.aliases) or '-':<18} {format_epsilon(row.epsilon):>8} "
                   f"{row.delta:>8.2g}  {top1:>6}  {row.accountant}")


@main.command("deps")
@click.option("--write", is_flag=True, help="Rewrite dvc.yaml's code deps instead of listing the stages that differ.")
def deps_command(write: bool) -> None:
    """dvc.yaml's code deps against each stage's imports (flows/code_deps.py): list what differs, or --write them."""
    from flows.code_deps import differences, write_code_deps

    if write:
        changed = write_code_deps(Path.cwd())
        click.echo(f"privhar: code deps rewritten for {', '.join(changed)}" if changed else "privhar: code deps up to date",
                   err=True)
        return
    found = differences(Path.cwd())
    for stage, (missing, extra) in found.items():
        click.echo(f"{stage}: missing {', '.join(missing) or '-'}; not imported {', '.join(extra) or '-'}")
    if found:
        raise PrivharError(f"dvc.yaml: the code deps of {len(found)} stage(s) differ from their imports "
                           "(privhar deps --write)")
    click.echo("privhar: code deps match the stages' imports", err=True)


def _print_scores(metrics: dict) -> None:
    """One line per registered model (seed 0), with its row's mean ± 95 % over the training seeds."""
    from tasks.core.seeds import base_key

    for key, values in sorted(metrics.items()):
        if base_key(key)[1]:
            continue
        second = f"  protocol 2 Top-1 {values['top1_protocol2']:.4f}" if "top1_protocol2" in values else ""
        row = (f"  row {values['top1_mean']:.4f} ± {values['top1_ci95']:.4f} over {int(values['seeds'])} seeds"
               if "top1_ci95" in values else "")
        click.echo(f"{key:>14}  Top-1 {values['top1']:.4f}  Top-5 {values['top5']:.4f}{second}{row}  "
                   f"({values['test_videos']} test videos)")


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (dvc, Prefect, kill) unwinds like an error: staging folders go, the MLflow run ends as FAILED."""
    raise SystemExit(128 + signum)


def entry_point() -> None:
    """Console script: a failed stage or bad input is one line on stderr and exit status 1, never a traceback; a usage
    error (an unknown option, a missing argument) is click's message and status 2."""
    signal.signal(signal.SIGTERM, _terminated)
    try:
        main(standalone_mode=False)
    except PrivharError as error:
        click.echo(f"{ERROR_PREFIX}{error}", err=True)
        sys.exit(1)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("privhar: interrupted", err=True)
        sys.exit(130)
    except OSError as error:  # a file-system fault the stage could not check up front: still one line
        where = f"{error.filename}: " if error.filename else ""
        click.echo(f"{ERROR_PREFIX}{where}{error.strerror or error}", err=True)
        sys.exit(1)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
