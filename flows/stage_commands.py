"""``privhar stage <name>``: the commands dvc.yaml calls, one per stage, each importing its stage's module lazily.

Their own group, below the command line (flows/cli.py adds it as ``privhar stage``): the Prefect tasks run a sharded
stage through it in-process (flows/stage_tasks.py) and each stage's code fingerprint follows its commands' imports
(flows/code_deps.py) — neither imports the command line, so no import circle runs through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from flows.entry import log_stages_to_stderr
from tasks.core.anonymize_catalogue import ANONYMIZE_METHODS
from tasks.core.parallel import use_stage_cores
from tasks.core.private_catalogue import PRIVATE_METHODS

PARAMS = click.option(
    "--params",
    "params_path",
    type=click.Path(path_type=Path),
    default=Path("params.yaml"),
    show_default=True,
    help="The params file.",
)


def _writable(
    context: click.Context, parameter: click.Parameter, value: Path | None
) -> Path | None:
    """An output folder or file is checked before the stage does any work (read-only, /proc, below a file)."""
    from tasks.core.storage import check_writable

    if value is not None:
        check_writable(value, f"--{parameter.name} path")
    return value


def _dir(name: str, help_text: str, exists: bool = False) -> click.Option:
    return click.option(
        name,
        required=True,
        type=click.Path(path_type=Path, file_okay=False, exists=exists),
        help=help_text,
        callback=None if exists else _writable,
    )


def section(params_path: Path, name: str, **overrides: Any) -> Any:
    """One typed, checked section of the params file (``overrides``: command-line values in place first): the command
    layer reads params, the stages take sections."""
    from tasks.core.params import SECTIONS, load_section

    return load_section(params_path, name, SECTIONS[name], overrides=overrides or None)


def show_raw(params_path: Path) -> bool:
    """Whether raw frames may appear in a stage's pictures (report.show_raw, data.source)."""
    from tasks.core.params import raw_frames_allowed

    return raw_frames_allowed(section(params_path, "report"), section(params_path, "data"))


def plan_for(params_path: Path, budget: Path | None) -> Any:
    """A DP stage's budget plan: the budget stage's file ``budget``, or (a stage run on its own) derived from the
    params."""
    from tasks.core.params import load_plan
    from tasks.privacy.budget import derived_plan, read_plan

    return read_plan(budget) if budget is not None else derived_plan(load_plan(params_path))


def dprp_from(params_path: Path, budget: Path | None = None, **arguments: Any) -> Any:
    """:func:`tasks.dprp.stage.dprp` with its sections from ``params_path`` (``privhar stage dprp``)."""
    from tasks.dprp.stage import dprp

    return dprp(
        base=section(params_path, "base"),
        params=section(params_path, "dprp"),
        privacy=section(params_path, "privacy"),
        budget=plan_for(params_path, budget),
        show_raw=show_raw(params_path),
        **arguments,
    )


def train_private_from(
    params_path: Path, nproc: int | None = None, budget: Path | None = None, **arguments: Any
) -> Any:
    """:func:`tasks.private.stage.train_private` with its sections from ``params_path`` (``privhar stage
    train-private``); ``nproc`` replaces private.nproc."""
    from tasks.private.stage import train_private

    return train_private(
        base=section(params_path, "base"),
        params=section(params_path, "private", **({} if nproc is None else {"nproc": nproc})),
        seeds_from=section(params_path, "report"),
        privacy=section(params_path, "privacy"),
        budget=plan_for(params_path, budget),
        **arguments,
    )


def train_federated_from(params_path: Path, budget: Path | None = None, **arguments: Any) -> Any:
    """:func:`tasks.federated.stage.train_federated` with its sections from ``params_path`` (``privhar stage
    train-federated``)."""
    from tasks.federated.stage import train_federated

    return train_federated(
        base=section(params_path, "base"),
        params=section(params_path, "federated"),
        seeds_from=section(params_path, "report"),
        privacy=section(params_path, "privacy"),
        budget=plan_for(params_path, budget),
        **arguments,
    )


def ldp_video_from(params_path: Path, budget: Path | None = None, **arguments: Any) -> Any:
    """:func:`tasks.ldp.video.ldp_video` with its sections from ``params_path`` (``privhar stage ldp``)."""
    from tasks.ldp.video import ldp_video

    return ldp_video(
        base=section(params_path, "base"),
        params=section(params_path, "ldp"),
        privacy=section(params_path, "privacy"),
        budget=plan_for(params_path, budget),
        **arguments,
    )


def synthesize_from(params_path: Path, public: bool = False, **arguments: Any) -> Any:
    """:func:`tasks.synthesize.synthesize` with its sections from ``params_path`` (``privhar stage synthesize``);
    ``public``: the public pretraining set (section public) instead, without the dataset checks."""
    from tasks.core.params import load_dataset_sections
    from tasks.synthesize import synthesize

    return synthesize(
        base=section(params_path, "base"),
        data=section(params_path, "data"),
        params=section(params_path, "synthesize"),
        show_raw=show_raw(params_path),
        public=section(params_path, "public") if public else None,
        checks=None if public else load_dataset_sections(params_path),
        **arguments,
    )


def decode_from(params_path: Path, **arguments: Any) -> Any:
    """:func:`tasks.decode.decode` with its sections from ``params_path`` (``privhar stage decode``)."""
    from tasks.core.params import load_decode
    from tasks.decode import decode

    return decode(base=section(params_path, "base"), params=load_decode(params_path), **arguments)


def anonymize_from(params_path: Path, **arguments: Any) -> Any:
    """:func:`tasks.anonymize.stage.anonymize` with its sections from ``params_path`` (``privhar stage anonymize``)."""
    from tasks.anonymize.stage import anonymize
    from tasks.core.params import load_decode

    return anonymize(
        base=section(params_path, "base"),
        params=section(params_path, "anonymize"),
        decode=load_decode(params_path),
        data=section(params_path, "data"),
        privacy=section(params_path, "privacy"),
        **arguments,
    )


def train_from(params_path: Path, epochs: int | None = None, **arguments: Any) -> Any:
    """:func:`tasks.train.train` with its sections from ``params_path`` (``privhar stage train``). ``epochs`` replaces
    train.epochs before it is checked (pretrain does not depend on train.epochs); 0 keeps model.weights as it is."""
    from tasks.core.errors import PrivharError
    from tasks.core.params import load_train
    from tasks.train import train

    if epochs is not None and epochs < 0:
        raise PrivharError(f"train: --epochs = {epochs} is invalid: expected an integer >= 0")
    return train(
        base=section(params_path, "base"),
        model_params=section(params_path, "model"),
        params=load_train(params_path, overrides=None if not epochs else {"epochs": epochs}),
        seeds_from=section(params_path, "report"),
        privacy=section(params_path, "privacy"),
        as_loaded=epochs == 0,
        **arguments,
    )


def report_from(params_path: Path, **arguments: Any) -> Any:
    """:func:`tasks.report.stage.report` with its sections from ``params_path`` (``privhar stage report``)."""
    from tasks.report.stage import report

    return report(
        anonymize_params=section(params_path, "anonymize"),
        dprp_params=section(params_path, "dprp"),
        private=section(params_path, "private"),
        privacy=section(params_path, "privacy"),
        federated=section(params_path, "federated"),
        train=section(params_path, "train"),
        data=section(params_path, "data"),
        **arguments,
    )


@click.group("stage")
def stage() -> None:
    """Run one stage of the pipeline (the commands dvc.yaml calls)."""
    log_stages_to_stderr()  # as privhar's own group does: the flow runs this group alone (sharded stages)
    use_stage_cores()  # its share of the cores where the flow runs stages at once (orchestrate.stage_workers)


@stage.command("scan")
@PARAMS
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    callback=_writable,
    help="Where to write the listing (CSV).",
)
def scan_command(params_path: Path, **arguments: Any) -> None:
    """List the files of the real dataset (path, size, time): what the index stage depends on."""
    from tasks.scan import scan

    scan(data=section(params_path, "data"), **arguments)


@stage.command("code")
@_dir("--out", "Where to write one fingerprint per stage command.")
def code_command(out: Path) -> None:
    """Fingerprint each stage command's code (SHA-256 of every project file it imports): what a stage reruns on.
    The code is the one that runs, where privhar is installed, which need not be the DVC project's folder."""
    from flows.code_deps import write_fingerprints

    count = write_fingerprints(out)
    click.echo(f"code: {count} stage commands fingerprinted in {out}", err=True)


@stage.command("synthesize")
@PARAMS
@_dir("--out", "Where to write the source videos and their manifest.")
@click.option(
    "--report",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    callback=_writable,
    help="Where to write preview.png.",
)
@click.option(
    "--public",
    is_flag=True,
    help="Render the public pretraining set (params section public) instead.",
)
def synthesize_command(params_path: Path, **arguments: Any) -> None:
    """Render the embedded dataset, or index the real one data.source names."""
    rows = synthesize_from(params_path, **arguments)
    click.echo(f"synthesize: {len(rows)} videos in {arguments['out']}", err=True)


@stage.command("decode")
@PARAMS
@_dir("--source", "Folder of the source manifest (the synthesize stage's output).", exists=True)
@_dir("--out", "Where to write the decoded clips and their manifest.")
@click.option(
    "--run-name",
    default="decode",
    show_default=True,
    help="The stage's MLflow run name (decode-public for the public set).",
)
def decode_command(params_path: Path, **arguments: Any) -> None:
    """Decode, resample, resize and store clips losslessly."""
    decode_from(params_path, **arguments)


COPIES = click.option(
    "--copies",
    "copies",
    multiple=True,
    required=True,
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="A folder of protected copies (data/anonymize, data/dprp); repeatable.",
)
SPEED = click.option(
    "--speed",
    "speed_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    callback=_writable,
    help="Where to write the measured frames/s (JSON; assess reads it for f_speed).",
)


BUDGET = click.option(
    "--budget",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="This stage's budget plan (the budget stage's data/budget/<stage>.json); default: planned here.",
)


@stage.command("budget")
@PARAMS
@_dir("--frames", "Folder of the decoded clips (who is in which video).", exists=True)
@_dir("--out", "Where to write one <stage>.json per DP stage.")
def budget_command(params_path: Path, **arguments: Any) -> None:
    """Plan every DP release: each person's ε, per DP stage (what privacy.max_epsilon is checked against)."""
    from tasks.budget_plan import budget_plan
    from tasks.core.parallel import worker_count
    from tasks.core.params import load_plan

    workers = worker_count(section(params_path, "base").workers)
    budget_plan(params=load_plan(params_path), workers=workers, **arguments)


@stage.command("dprp")
@PARAMS
@_dir("--frames", "Folder of the decoded clips.", exists=True)
@click.option("--epsilon", type=float, required=True, help="Total ε (one of dprp.epsilons).")
@_dir("--out", "Where to write the protected clips, their manifest and the privacy ledger.")
@click.option(
    "--report",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    callback=_writable,
    help="Where to write eps<ε>.png (raw and protected test frames).",
)
@SPEED
@BUDGET
def dprp_stage_command(params_path: Path, **arguments: Any) -> None:
    """Video-DPRP on every decoded clip (both splits) at one ε."""
    dprp_from(params_path, **arguments)


@stage.command("anonymize")
@PARAMS
@_dir("--frames", "Folder of the decoded clips (with their ground-truth annotations).", exists=True)
@click.option(
    "--method", required=True, help=f"One of anonymize.methods: {', '.join(ANONYMIZE_METHODS)}."
)
@_dir("--out", "Where to write the protected clips, public masks and manifest.")
@SPEED
def anonymize_stage_command(params_path: Path, **arguments: Any) -> None:
    """Obfuscate every decoded clip with one method (paper 000 §4.2 baselines)."""
    anonymize_from(params_path, **arguments)


@stage.command("preview")
@PARAMS
@_dir("--frames", "Folder of the decoded (raw) clips.", exists=True)
@COPIES
@_dir("--out", "Where to write protections.png.")
def preview_command(params_path: Path, **arguments: Any) -> None:
    """The same test frames under every protection, as one PNG grid."""
    from tasks.preview import preview

    written = preview(
        report=section(params_path, "report"), show_raw=show_raw(params_path), **arguments
    )
    click.echo(f"preview: {written}", err=True)


@stage.command("train")
@PARAMS
@_dir("--frames", "Folder of the clips to learn from: decoded (raw) or protected.", exists=True)
@_dir(
    "--out",
    "Where to write the trained model; its folder name is the model's key (data/train/<key>).",
)
@_dir(
    "--report", "Where to write the training metrics and history (<key>.json, <key>_history.csv)."
)
@click.option(
    "--family", default=None, help="Registered model privhar-<family> [default: train.method]."
)
@click.option("--epochs", type=int, default=None, help="Override train.epochs.")
@click.option(
    "--init",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="Folder of a model to fine-tune (the pretrain stage's data/pretrain/public) [default: from scratch].",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Training seeds (the pipeline passes report.seeds): seed i >= 1 is saved in <out>/seed<i>.",
)
def train_command(params_path: Path, **arguments: Any) -> None:
    """Train the video classifier with the method train.method names."""
    final = train_from(params_path, **arguments)
    click.echo(
        f"train: final loss {final['loss']:.4f}, train accuracy {final['train_accuracy']:.4f}"
        if "loss" in final
        else "train: --epochs 0: the model.weights checkpoint kept as it is",
        err=True,
    )


@stage.command("train-private")
@PARAMS
@click.option(
    "--method", required=True, type=click.Choice(PRIVATE_METHODS), help="One of private.methods."
)
@_dir("--frames", "Folder of the decoded (raw) clips.", exists=True)
@click.option(
    "--avatar",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="The avatar copy (anonymize@avatar): maskdp learns from it, both MaskDP methods use its public masks.",
)
@_dir(
    "--init", "Folder of the public model to fine-tune (the pretrain stage's output).", exists=True
)
@_dir("--out", "Where to write one <method>-eps<ε>/model.pt per ε.")
@_dir("--report", "Where to write <method>.csv (ε, δ, σ, q, steps, C, accountant per model).")
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    default=None,
    help="Processes per dp_sgd model (Opacus DPDDP), instead of private.nproc.",
)
@BUDGET
def private_command(params_path: Path, **arguments: Any) -> None:
    """Fine-tune the public model privately at every ε of private.epsilons (and ∞)."""
    rows = train_private_from(params_path, **arguments)
    click.echo(
        f"train-private: {arguments['method']}: {len(rows)} models in {arguments['out']}", err=True
    )


@stage.command("train-federated")
@PARAMS
@_dir("--frames", "Folder of the decoded (raw) clips.", exists=True)
@_dir(
    "--init", "Folder of the public model to fine-tune (the pretrain stage's output).", exists=True
)
@_dir("--out", "Where to write one <aggregation>-<tuning>/model.pt per run.")
@_dir(
    "--report",
    "Where to write federated.md / .csv, rounds.csv, accuracy_by_round.png and metrics.json.",
)
@BUDGET
def federated_command(params_path: Path, **arguments: Any) -> None:
    """Federated DP training (paper 003): every federated.aggregations × federated.tunings at federated.epsilon."""
    rows = train_federated_from(params_path, **arguments)
    click.echo(
        f"train-federated: {len(rows)} models in {arguments['out']}; table in "
        f"{arguments['report'] / 'federated.md'}",
        err=True,
    )


@stage.command("private-table")
@PARAMS
@click.option(
    "--metrics",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="The evaluate stage's metrics.json.",
)
@_dir("--ledgers", "Folder of the train-private stages' <method>.csv.", exists=True)
@_dir(
    "--train-reports",
    "Folder of the train stages' <key>.json (baseline, dprp-eps<ε>: their privacy claims).",
    exists=True,
)
@_dir("--out", "Where to write private.md, private.csv and accuracy_vs_epsilon.png.")
def private_table_command(params_path: Path, **arguments: Any) -> None:
    """Top-1 of every private method at every ε: paper 000 / 001 Table 2 as Markdown + CSV, and a plot."""
    from tasks.private.table import private_table

    records = private_table(
        private=section(params_path, "private"), dprp=section(params_path, "dprp"), **arguments
    )
    click.echo(
        f"private-table: {len(records)} models in {arguments['out'] / 'private.md'}", err=True
    )


@stage.command("assess")
@PARAMS
@_dir(
    "--frames",
    "Folder of the decoded (raw) clips with their annotations: the ground truth.",
    exists=True,
)
@COPIES
@_dir("--speeds", "Folder of the protecting stages' <copy>.json (measured frames/s).", exists=True)
@_dir("--out", "Where to write signature.json and signature.csv.")
def assess_command(params_path: Path, **arguments: Any) -> None:
    """Privacy attributes (cMAP, F1) and paper 004's evaluator functions for the raw data and every protected copy."""
    from tasks.assess.stage import assess

    results = assess(
        base=section(params_path, "base"), params=section(params_path, "assess"), **arguments
    )
    click.echo(f"assess: {len(results)} copies in {arguments['out'] / 'signature.json'}", err=True)


@stage.command("report")
@PARAMS
@click.option(
    "--metrics",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The evaluate stage's metrics.json (missing: its rows say 'not run').",
)
@click.option(
    "--signature",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The assess stage's signature.json (missing: its rows say 'not run').",
)
@_dir("--ledgers", "Folder of the train-private stages' <method>.csv.", exists=True)
@_dir("--train-reports", "Folder of the train stages' <key>.json.", exists=True)
@_dir("--dprp", "Folder of the DPRP copies (their ledger.parquet).", exists=True)
@_dir("--anonymize", "Folder of the anonymized copies.", exists=True)
@_dir("--frames", "Folder of the decoded clips (the data subjects of each split).", exists=True)
@click.option(
    "--ldp-ledger",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The ldp stage's ledger.csv (missing: no LDP release yet).",
)
@click.option(
    "--federated-table",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The train-federated stage's federated.csv (missing: no federated release yet).",
)
@click.option(
    "--predictions",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The evaluate stage's predictions.csv: where each row's spread over seeds comes from (missing: not run).",
)
@_dir("--out", "Where to write results.md and report/.")
def report_command(params_path: Path, **arguments: Any) -> None:
    """results.md: paper 000 Table 1, paper 004 signatures, plots and the privacy ledger per method and subject."""
    table = report_from(params_path, **arguments)
    click.echo(f"report: {len(table)} methods in {arguments['out'] / 'results.md'}", err=True)


@stage.command("register")
@PARAMS
@click.option(
    "--metrics",
    "metrics",
    multiple=True,
    required=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A metrics.json of model scores (evaluate's Top-1, the report's cMAP / F1); repeat for several.",
)
@click.option(
    "--scored",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="evaluate's scored.json: the SHA-256 of each model file it scored.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    callback=_writable,
    help="Where to write registered.json (model key: version described).",
)
def register_command(params_path: Path, **arguments: Any) -> None:
    """Score the MLflow registry: each model's newest version gets its scores and provenance; champion aliases move."""
    from tasks.register import register

    registered = register(
        registry=section(params_path, "registry"), project=params_path.resolve().parent, **arguments
    )
    scored = sum(value["version"] is not None for value in registered.values())
    click.echo(f"register: {scored} versions scored in {arguments['out']}", err=True)


@stage.command("ldp")
@PARAMS
@_dir(
    "--frames",
    "Folder of the decoded clips (with their annotations: the person's box).",
    exists=True,
)
@_dir(
    "--public",
    "Folder of the decoded public clips: the DCAConv filters are fitted on them, never on private videos.",
    exists=True,
)
@_dir(
    "--out",
    "Where to write the fitted DCAConv filters and the released (perturbed) training codes.",
)
@_dir("--report", "Where to write video.csv, metrics.json and ledger.csv.")
@BUDGET
def ldp_command(params_path: Path, **arguments: Any) -> None:
    """Local DP for video: randomized DCAConv codes of each clip's person-centred motion image, learners per ε."""
    rows = ldp_video_from(params_path, **arguments)
    click.echo(f"ldp: {len(rows)} results in {arguments['report'] / 'video.csv'}", err=True)


@stage.command("ldp-digits")
@PARAMS
@_dir("--out", "Where to write digits.md, digits.csv and digits.png.")
def ldp_digits_command(params_path: Path, **arguments: Any) -> None:
    """Paper 002's check on scikit-learn's digits: NB / KNN / NCC on randomized DCAConv codes against ε, d = 16 and 2."""
    from tasks.ldp.digits import ldp_digits

    rows = ldp_digits(
        base=section(params_path, "base"), params=section(params_path, "ldp"), **arguments
    )
    click.echo(f"ldp-digits: {len(rows)} cells in {arguments['out'] / 'digits.md'}", err=True)


@stage.command("evaluate")
@PARAMS
@_dir("--frames", "Folder of the decoded clips.", exists=True)
@click.option(
    "--models",
    "models",
    multiple=True,
    required=True,
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="A folder of trained models (<key>/model.pt at any depth); repeat for several.",
)
@_dir("--out", "Where to write metrics, predictions and plots.")
def evaluate_command(params_path: Path, **arguments: Any) -> None:
    """Top-1 / Top-5 and a confusion matrix for every trained model."""
    from tasks.evaluate import evaluate

    evaluate(
        base=section(params_path, "base"), params=section(params_path, "evaluate"), **arguments
    )
