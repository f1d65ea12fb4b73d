"""``privhar stage <name>``: the commands dvc.yaml calls, one per stage, each built when it is called.

A command is its stage function's signature: the function's own arguments (annotated with
:mod:`tasks.core.stage_options`) become its options, and its params sections are read here, from ``--params``, by the
stage's reader (``<stage>_from``). So an argument is written in dvc.yaml's ``cmd`` and in the stage's signature only.
A command imports its stage's module when it is called: ``privhar stage scan`` imports no torch.

Their own group, below the command line (privhar/cli.py adds it as ``privhar stage``): the Prefect tasks run a sharded
stage through it in-process (flows/stage_tasks.py) and each stage's code fingerprint follows :data:`COMMANDS` and its
readers' imports (flows/code_deps.py) — neither imports the command line, so no import circle runs through it.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from flows.flow_logging import log_stages_to_stderr
from tasks.core.parallel import use_stage_cores
from tasks.core.stage_options import Option

PARAMS_DECLS = ["--params", "params_path"]
PARAMS_ATTRS: dict[str, Any] = {
    "type": click.Path(path_type=Path),
    "default": Path("params.yaml"),
    "show_default": True,
    "help": "The params file.",
}
PARAMS = click.option(*PARAMS_DECLS, **PARAMS_ATTRS)
# Video-DPRP's projection dimension, as `privhar dprp` and `privhar bench dprp` take it
PROJECTION_K = click.option(
    "--k",
    "k",
    default="32x32x3",
    show_default=True,
    help="Projection dimension: an integer or HxWxC.",
)
# where and how often `privhar protect` (and `privhar bench protect`) searches for people
DETECT_SCALE = click.option(
    "--detect-scale",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="People are found on frames scaled by this (deface's --scale); masks and boxes map back up. "
    "0: frames of at most 240 rows.",
)
DETECTORS = click.option(
    "--detectors",
    default="centerface,mediapipe,motion",
    show_default=True,
    help="People finders, united (anonymize.ensemble): centerface, mediapipe, hog, motion, faces. CenterFace finds "
    "the faces; the gate's judge is BlazeFace beside it (OpenCV's Haar cascade without mediapipe).",
)
DETECT_EVERY = click.option(
    "--detect-every",
    type=click.IntRange(0, 64),
    default=0,
    show_default=True,
    help="Detectors run on every k-th frame; tracks carry people through the frames between. 0: four times a second.",
)


def _writable(
    context: click.Context, parameter: click.Parameter, value: Path | None
) -> Path | None:
    """An output folder or file is checked before the stage does any work (read-only, /proc, below a file)."""
    from tasks.core.storage import check_writable

    if value is not None:
        check_writable(value, f"{parameter.opts[0] if parameter.opts else parameter.name} path")
    return value


def section(params_path: Path, name: str, **overrides: Any) -> Any:
    """One typed, checked section of the params file (``overrides``: command-line values in place first): the command
    layer reads params, the stages take sections."""
    from tasks.core.params_files import AUDITED_SECTIONS, SECTIONS, load_section

    loaded = load_section(params_path, name, SECTIONS[name], overrides=overrides or None)
    if name in AUDITED_SECTIONS:
        from tasks.privacy.one_run_audit import check_audit_size

        check_audit_size(name, loaded)
    return loaded


def show_raw(params_path: Path) -> bool:
    """Whether raw frames may appear in a stage's pictures (report.show_raw, data.source)."""
    from tasks.core.params import raw_frames_allowed

    return raw_frames_allowed(section(params_path, "report"), section(params_path, "data"))


def plan_for(params_path: Path, budget: Path | None) -> Any:
    """A DP stage's budget plan: the budget stage's file ``budget``, or (a stage run on its own) derived from the
    params."""
    from tasks.core.params_files import load_plan
    from tasks.privacy.budget import derived_plan, read_plan

    return read_plan(budget) if budget is not None else derived_plan(load_plan(params_path))


# The readers: a stage function called with its sections from ``params_path`` and its own ``arguments``.


def base_and(name: str) -> Callable[..., Any]:
    """The reader of a stage that takes the base section and its own section ``name`` as ``params``."""

    def reader(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
        return function(
            base=section(params_path, "base"), params=section(params_path, name), **arguments
        )

    return reader


def scan_from(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    return function(data=section(params_path, "data"), **arguments)


def synthesize_from(
    function: Callable[..., Any], params_path: Path, public: bool = False, **arguments: Any
) -> Any:
    """``public``: the public pretraining set (section public) instead, without the dataset checks."""
    from tasks.core.params_files import load_dataset_sections

    return function(
        base=section(params_path, "base"),
        data=section(params_path, "data"),
        params=section(params_path, "synthesize"),
        show_raw=show_raw(params_path),
        public=section(params_path, "public") if public else None,
        checks=None if public else load_dataset_sections(params_path),
        **arguments,
    )


def decode_from(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    from tasks.core.params_files import load_decode

    return function(base=section(params_path, "base"), params=load_decode(params_path), **arguments)


def budget_from(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    from tasks.core.parallel import worker_count
    from tasks.core.params_files import load_plan

    workers = worker_count(section(params_path, "base").workers)
    return function(params=load_plan(params_path), workers=workers, **arguments)


def dp_from(own: str, seeds: bool = False, raw: bool = False) -> Callable[..., Any]:
    """The reader of a DP stage: base, its own section ``own`` as ``params`` (``--nproc`` in place of its nproc),
    privacy and its budget plan (``--budget``'s file, or derived); the training seeds (``report``) where ``seeds``;
    whether raw frames may be shown where ``raw``."""

    def reader(
        function: Callable[..., Any],
        params_path: Path,
        budget: Path | None = None,
        nproc: int | None = None,
        **arguments: Any,
    ) -> Any:
        read = {"seeds_from": section(params_path, "report")} if seeds else {}
        read |= {"show_raw": show_raw(params_path)} if raw else {}
        return function(
            base=section(params_path, "base"),
            params=section(params_path, own, **({} if nproc is None else {"nproc": nproc})),
            privacy=section(params_path, "privacy"),
            budget=plan_for(params_path, budget),
            **read,
            **arguments,
        )

    return reader


def anonymize_from(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    from tasks.core.params_files import load_decode

    return function(
        base=section(params_path, "base"),
        params=section(params_path, "anonymize"),
        decode=load_decode(params_path),
        data=section(params_path, "data"),
        privacy=section(params_path, "privacy"),
        **arguments,
    )


def preview_from(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    return function(
        report=section(params_path, "report"), show_raw=show_raw(params_path), **arguments
    )


def train_from(
    function: Callable[..., Any], params_path: Path, epochs: int | None = None, **arguments: Any
) -> Any:
    """``epochs`` replaces train.epochs before it is checked (pretrain does not depend on train.epochs); 0 keeps
    model.weights as it is. Without it, the family's ``train.epochs_per_family`` entry does."""
    from tasks.core.errors import PrivharError
    from tasks.core.params_files import load_train

    if epochs is not None and epochs < 0:
        raise PrivharError(f"train: --epochs = {epochs} is invalid: expected an integer >= 0")
    params = load_train(params_path, overrides=None if not epochs else {"epochs": epochs})
    return function(
        base=section(params_path, "base"),
        model_params=section(params_path, "model"),
        params=params if epochs else params.of_family(arguments.get("family") or params.method),
        seeds_from=section(params_path, "report"),
        privacy=section(params_path, "privacy"),
        as_loaded=epochs == 0,
        **arguments,
    )


def private_table_from(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    return function(
        private=section(params_path, "private"), dprp=section(params_path, "dprp"), **arguments
    )


def report_from(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    return function(
        anonymize_params=section(params_path, "anonymize"),
        dprp_params=section(params_path, "dprp"),
        private=section(params_path, "private"),
        privacy=section(params_path, "privacy"),
        federated=section(params_path, "federated"),
        train=section(params_path, "train"),
        data=section(params_path, "data"),
        **arguments,
    )


def register_from(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    return function(
        registry=section(params_path, "registry"),
        project=params_path.resolve().parent,
        **arguments,
    )


# privhar stage <name>: (its stage function, the reader of its sections, its help)
COMMANDS: dict[str, tuple[str, Callable[..., Any], str]] = {
    "scan": (
        "tasks.scan:scan",
        scan_from,
        "List the files of the real dataset (path, size, time): what the index stage depends on.",
    ),
    "synthesize": (
        "tasks.synthesize:synthesize",
        synthesize_from,
        "Render the embedded dataset, or index the real one data.source names.",
    ),
    "decode": (
        "tasks.decode:decode",
        decode_from,
        "Decode, resample, resize and store clips losslessly.",
    ),
    "budget": (
        "tasks.budget_plan:budget_plan",
        budget_from,
        "Plan every DP release: each person's ε, per DP stage (what privacy.max_epsilon is checked against).",
    ),
    "dprp": (
        "tasks.dprp.stage:dprp",
        dp_from("dprp", raw=True),
        "Video-DPRP on every decoded clip (both splits) at one ε.",
    ),
    "anonymize": (
        "tasks.anonymize.stage:anonymize",
        anonymize_from,
        "Obfuscate every decoded clip with one method (paper 000 §4.2 baselines).",
    ),
    "preview": (
        "tasks.preview:preview",
        preview_from,
        "The same test frames under every protection, as one PNG grid.",
    ),
    "train": (
        "tasks.train.stage:train",
        train_from,
        "Train the video classifier with the method train.method names.",
    ),
    "train-private": (
        "tasks.private.stage:train_private",
        dp_from("private", seeds=True),
        "Fine-tune the public model privately at every ε of private.epsilons (and ∞).",
    ),
    "train-federated": (
        "tasks.federated.stage:train_federated",
        dp_from("federated", seeds=True),
        "Federated DP training (paper 003): every federated.aggregations × federated.tunings at "
        "federated.epsilon.",
    ),
    "private-table": (
        "tasks.private.table:private_table",
        private_table_from,
        "Top-1 of every private method at every ε: paper 000 / 001 Table 2 as Markdown + CSV, and a plot.",
    ),
    "assess": (
        "tasks.assess.stage:assess",
        base_and("assess"),
        "Privacy attributes (cMAP, F1) and paper 004's evaluator functions for the raw data and every "
        "protected copy.",
    ),
    "report": (
        "tasks.report.stage:report",
        report_from,
        "results.md: paper 000 Table 1, paper 004 signatures, plots and the privacy ledger per method and "
        "subject.",
    ),
    "register": (
        "tasks.register:register",
        register_from,
        "Score the MLflow registry: each model's newest version gets its scores and provenance; champion "
        "aliases move.",
    ),
    "ldp": (
        "tasks.ldp.video:ldp_video",
        dp_from("ldp"),
        "Local DP for video: randomized DCAConv codes of each clip's person-centred motion image, learners "
        "per ε.",
    ),
    "ldp-digits": (
        "tasks.ldp.digits:ldp_digits",
        base_and("ldp"),
        "Paper 002's check on scikit-learn's digits: NB / KNN / NCC on randomized DCAConv codes against ε, "
        "d = 16 and 2.",
    ),
    "evaluate": (
        "tasks.evaluate:evaluate",
        base_and("evaluate"),
        "Top-1 / Top-5 and a confusion matrix for every trained model.",
    ),
}

# options of the command layer, not of a stage function: how its sections and its budget plan are read
BUDGET = click.Option(
    ["--budget"],
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="This stage's budget plan (the budget stage's data/budget/<stage>.json); default: planned here.",
)
READER_OPTIONS: dict[str, list[click.Option]] = {
    "synthesize": [
        click.Option(
            ["--public"],
            is_flag=True,
            help="Render the public pretraining set (params section public) instead.",
        )
    ],
    "dprp": [BUDGET],
    "train": [click.Option(["--epochs"], type=int, default=None, help="Override train.epochs.")],
    "train-private": [
        click.Option(
            ["--nproc"],
            type=click.IntRange(min=1),
            default=None,
            help="Processes per dp_sgd model (Opacus DPDDP), instead of private.nproc.",
        ),
        BUDGET,
    ],
    "train-federated": [BUDGET],
    "ldp": [BUDGET],
}


def stage_function(name: str) -> Callable[..., Any]:
    """The stage function of ``privhar stage <name>``, its module imported now."""
    module, _, attribute = COMMANDS[name][0].partition(":")
    return getattr(importlib.import_module(module), attribute)


def stage_call(name: str) -> Callable[..., Any]:
    """``privhar stage <name>`` as a function of the params file and the command's options, as Python names
    (``stage_call("dprp")(params_path, frames=…, epsilon=8.0, out=…)``): what the tests and benchmarks call."""

    def call(params_path: Path, **arguments: Any) -> Any:
        return COMMANDS[name][1](stage_function(name), params_path, **arguments)

    return call


def click_option(name: str, hint: Any, parameter: inspect.Parameter) -> click.Option | None:
    """The option of a stage function's parameter annotated with a :class:`tasks.core.stage_options.Option`; None for
    a section or anything else the reader gives."""
    spec = next(
        (item for item in getattr(hint, "__metadata__", ()) if isinstance(item, Option)), None
    )
    if spec is None:
        return None
    kind = typing.get_args(hint)[0]  # Annotated[kind, spec]
    multiple = typing.get_origin(kind) in (Sequence, list, tuple)
    if multiple or typing.get_origin(kind) in (types.UnionType, typing.Union):
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    if spec.path is not None:
        kind = click.Path(
            path_type=Path,
            file_okay=spec.path == "file",
            dir_okay=spec.path == "folder",
            exists=spec.role == "input",
        )
    elif spec.choices:
        kind = click.Choice(spec.choices)
    elif spec.minimum is not None:
        kind = click.IntRange(min=spec.minimum)
    required = parameter.default is inspect.Parameter.empty
    # no default where required: click 8.5 takes a default of None as a value given
    default = {} if required else {"default": parameter.default}
    return click.Option(
        [spec.flag or f"--{name.replace('_', '-')}", name],
        type=kind,
        multiple=multiple,
        required=required,
        show_default=not required and parameter.default is not None,
        callback=_writable if spec.role == "output" else None,
        help=spec.help,
        **default,
    )


def stage_command(name: str) -> click.Command:
    """``privhar stage <name>``: ``--params``, the reader's options, then the stage function's own."""
    function = stage_function(name)
    hints = typing.get_type_hints(function, include_extras=True)
    own = [
        click_option(key, hints[key], parameter)
        for key, parameter in inspect.signature(function).parameters.items()
    ]

    def run(params_path: Path, **arguments: Any) -> None:
        COMMANDS[name][1](function, params_path, **arguments)
        click.echo(f"{name}: done, written to {arguments['out']}", err=True)  # each has --out

    options = [click.Option(PARAMS_DECLS, **PARAMS_ATTRS), *READER_OPTIONS.get(name, [])]
    return click.Command(
        name, callback=run, params=[*options, *filter(None, own)], help=COMMANDS[name][2]
    )


class StageGroup(click.Group):
    """The stage commands, each built (its stage's module imported) only when it is called."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return (
            stage_command(cmd_name) if cmd_name in COMMANDS else super().get_command(ctx, cmd_name)
        )

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        helps = {name: entry[2] for name, entry in COMMANDS.items()}
        helps |= {name: command.get_short_help_str() for name, command in self.commands.items()}
        limit = formatter.width - 6 - max(map(len, helps))  # as click's own listing
        with formatter.section("Commands"):
            formatter.write_dl(
                [
                    (name, click.utils.make_default_short_help(helps[name], limit))
                    for name in sorted(helps)
                ]
            )


@click.group("stage", cls=StageGroup)
def stage() -> None:
    """Run one stage of the pipeline (the commands dvc.yaml calls)."""
    log_stages_to_stderr()  # as privhar's own group does: the flow runs this group alone (sharded stages)
    use_stage_cores()  # its share of the cores where the flow runs stages at once (orchestrate.stage_workers)


@stage.command("code")
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    callback=_writable,
    help="Where to write one fingerprint per stage command.",
)
def code_command(out: Path) -> None:
    """Fingerprint each stage command's code (SHA-256 of every project file it imports): what a stage reruns on.
    The code is the one that runs, where privhar is installed, which need not be the DVC project's folder."""
    from flows.code_deps import write_fingerprints

    count = write_fingerprints(out)
    click.echo(f"code: {count} stage commands fingerprinted in {out}", err=True)
