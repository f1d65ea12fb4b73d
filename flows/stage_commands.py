"""``privhar stage <name>``: the commands dvc.yaml calls, one per stage, each built when it is called.

A command is its stage function's signature: the function's own arguments (:mod:`tasks.core.stage_options`) become its
options; the sections it takes are read from ``--params`` by their annotated types (flows/stage_readers.py); the
command's own options are in its :data:`COMMANDS` entry, whose function imports the stage when it is called (a real
import: ``privhar stage scan`` imports no torch). The Prefect tasks run a sharded stage through this group in-process
(flows/stage_tasks.py); flows/code_deps.py fingerprints each command's code from its entry and reader.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from flows.click_options import (
    BUDGET,
    EPOCHS,
    NPROC,
    PARAMS_ATTRS,
    PARAMS_DECLS,
    PUBLIC,
    click_option,
    writable,
)
from flows.flow_logging import log_stages_to_stderr
from flows.stage_readers import budget_from, dp_sections, sections, synthesize_from, train_from
from tasks.core.parallel import use_stage_cores

# The stage functions, each importing its module when its command is called.


def _scan() -> Callable[..., Any]:
    from tasks.scan import scan

    return scan


def _synthesize() -> Callable[..., Any]:
    from tasks.synthesize import synthesize

    return synthesize


def _decode() -> Callable[..., Any]:
    from tasks.decode import decode

    return decode


def _budget() -> Callable[..., Any]:
    from tasks.budget_plan import budget_plan

    return budget_plan


def _dprp() -> Callable[..., Any]:
    from tasks.dprp.stage import dprp

    return dprp


def _anonymize() -> Callable[..., Any]:
    from tasks.anonymize.stage import anonymize

    return anonymize


def _preview() -> Callable[..., Any]:
    from tasks.preview import preview

    return preview


def _train() -> Callable[..., Any]:
    from tasks.train.stage import train

    return train


def _train_private() -> Callable[..., Any]:
    from tasks.private.stage import train_private

    return train_private


def _train_federated() -> Callable[..., Any]:
    from tasks.federated.stage import train_federated

    return train_federated


def _private_table() -> Callable[..., Any]:
    from tasks.private.table import private_table

    return private_table


def _assess() -> Callable[..., Any]:
    from tasks.assess.stage import assess

    return assess


def _report() -> Callable[..., Any]:
    from tasks.report.stage import report

    return report


def _register() -> Callable[..., Any]:
    from tasks.register import register

    return register


def _ldp() -> Callable[..., Any]:
    from tasks.ldp.video import ldp_video

    return ldp_video


def _ldp_digits() -> Callable[..., Any]:
    from tasks.ldp.digits import ldp_digits

    return ldp_digits


def _evaluate() -> Callable[..., Any]:
    from tasks.evaluate import evaluate

    return evaluate


@dataclass(frozen=True)
class StageCommand:
    """A stage command: its stage function (imported when called), help, reader and the reader's own options."""

    stage: Callable[[], Callable[..., Any]]
    help: str
    reader: Callable[..., Any] = sections
    options: tuple[click.Option, ...] = ()


COMMANDS: dict[str, StageCommand] = {
    "scan": StageCommand(
        _scan,
        "List the files of the real dataset (path, size, time): what the index stage depends on.",
    ),
    "synthesize": StageCommand(
        _synthesize,
        "Render the embedded dataset, or index the real one data.source names.",
        reader=synthesize_from,
        options=(PUBLIC,),
    ),
    "decode": StageCommand(_decode, "Decode, resample, resize and store clips losslessly."),
    "budget": StageCommand(
        _budget,
        "Plan every DP release: each person's ε, per DP stage (what privacy.max_epsilon is checked against).",
        reader=budget_from,
    ),
    "dprp": StageCommand(
        _dprp,
        "Video-DPRP on every decoded clip (both splits) at one ε.",
        reader=dp_sections,
        options=(BUDGET,),
    ),
    "anonymize": StageCommand(
        _anonymize, "Obfuscate every decoded clip with one method (paper 000 §4.2)."
    ),
    "preview": StageCommand(_preview, "The same test frames under every protection, one PNG grid."),
    "train": StageCommand(
        _train,
        "Train the video classifier with the method train.method names.",
        reader=train_from,
        options=(EPOCHS,),
    ),
    "train-private": StageCommand(
        _train_private,
        "Fine-tune the public model privately at every ε of private.epsilons (and ∞).",
        reader=dp_sections,
        options=(NPROC, BUDGET),
    ),
    "train-federated": StageCommand(
        _train_federated,
        "Federated DP training (paper 003): every federated.aggregations × federated.tunings at federated.epsilon.",
        reader=dp_sections,
        options=(BUDGET,),
    ),
    "private-table": StageCommand(
        _private_table,
        "Top-1 of every private method at every ε: paper 000 / 001 Table 2 as Markdown + CSV, and a plot.",
    ),
    "assess": StageCommand(
        _assess,
        "Privacy attributes (cMAP, F1) and paper 004's evaluator functions for the raw data and every protected copy.",
    ),
    "report": StageCommand(
        _report,
        "results.md: paper 000 Table 1, paper 004 signatures, plots and the privacy ledger per method and subject.",
    ),
    "register": StageCommand(
        _register,
        "Score the MLflow registry: each model's newest version gets its scores and provenance; champion aliases move.",
    ),
    "ldp": StageCommand(
        _ldp,
        "Local DP for video: randomized DCAConv codes of each clip's person-centred motion image, learners per ε.",
        reader=dp_sections,
        options=(BUDGET,),
    ),
    "ldp-digits": StageCommand(
        _ldp_digits,
        "Paper 002's check on scikit-learn's digits: NB / KNN / NCC on randomized DCAConv codes against ε, d = 16 and 2.",
    ),
    "evaluate": StageCommand(
        _evaluate, "Top-1 / Top-5 and a confusion matrix of every trained model."
    ),
}


def stage_call(name: str) -> Callable[..., Any]:
    """``privhar stage <name>`` as a function: ``stage_call("dprp")(params_path, frames=…, epsilon=8.0, out=…)``."""

    def call(params_path: Path, **arguments: Any) -> Any:
        return COMMANDS[name].reader(COMMANDS[name].stage(), params_path, **arguments)

    return call


def stage_command(name: str) -> click.Command:
    """``privhar stage <name>``: ``--params``, the reader's options, then the stage function's own."""
    command = COMMANDS[name]
    function = command.stage()
    hints = typing.get_type_hints(function, include_extras=True)
    own = [
        click_option(key, hints[key], parameter)
        for key, parameter in inspect.signature(function).parameters.items()
    ]

    def run(params_path: Path, **arguments: Any) -> None:
        command.reader(function, params_path, **arguments)
        click.echo(f"{name}: done, written to {arguments['out']}", err=True)  # each has --out

    options = [click.Option(PARAMS_DECLS, **PARAMS_ATTRS), *command.options]
    return click.Command(
        name, callback=run, params=[*options, *filter(None, own)], help=command.help
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
        helps = {name: entry.help for name, entry in COMMANDS.items()}
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
    callback=writable,
    help="Where to write one fingerprint per stage command.",
)
def code_command(out: Path) -> None:
    """Fingerprint each stage command's code (SHA-256 of every project file it imports, where privhar is installed)."""
    from flows.code_deps import write_fingerprints

    count = write_fingerprints(out)
    click.echo(f"code: {count} stage commands fingerprinted in {out}", err=True)
