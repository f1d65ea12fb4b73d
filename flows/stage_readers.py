"""How a stage function is given what it reads from params.yaml: each params section by its parameter's annotated type
(:func:`sections`), and the readers of the stages that take more (a DP stage's budget plan and ``--nproc``, train's
``--epochs``, synthesize's ``--public``, the budget stage's plan). The command layer reads params; the stages take
sections."""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any


def section(params_path: Path, name: str, **overrides: Any) -> Any:
    """One typed, checked section of the params file (``overrides``: command-line values in place first): the command
    layer reads params, the stages take sections."""
    from tasks.core.params_files import AUDITED_SECTIONS, SECTIONS, load_section

    loaded = load_section(params_path, name, SECTIONS[name], overrides=overrides or None)
    if name in AUDITED_SECTIONS:
        from tasks.privacy.one_run_audit import check_audit_size

        check_audit_size(name, loaded)
    return loaded


def orchestrate(project: Path) -> Any:
    """The project's ``orchestrate`` section, read once a process while params.yaml is unchanged (a profile the flow
    applies rewrites it: read again then)."""
    params_path = (Path(project) / "params.yaml").resolve()
    stat = params_path.stat() if params_path.is_file() else None
    return _orchestrate(params_path, stat and (stat.st_mtime_ns, stat.st_size))


@functools.cache
def _orchestrate(params_path: Path, version: tuple[int, int] | None) -> Any:
    return section(params_path, "orchestrate")


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


def sections(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    """``function`` called with ``arguments`` and, for each other parameter annotated with a section's class, that
    section (decode and train as :func:`tasks.core.params_files.load_decode` / ``load_train`` give them: a zoo
    backbone's clip in place); ``show_raw`` and ``project`` (the params file's folder) where it takes them."""
    from tasks.core.params import DecodeParams, TrainParams
    from tasks.core.params_files import SECTIONS, load_decode, load_train

    named = {kind: name for name, kind in SECTIONS.items()}
    loaders = {DecodeParams: load_decode, TrainParams: load_train}
    read: dict[str, Any] = {}
    for name, kind in typing.get_type_hints(function).items():
        if name in arguments or name == "return":
            continue
        if kind in loaders:
            read[name] = loaders[kind](params_path)
        elif kind in named:
            read[name] = section(params_path, named[kind])
        elif name == "show_raw":
            read[name] = show_raw(params_path)
        elif name == "project":
            read[name] = params_path.resolve().parent
    return function(**read, **arguments)


def dp_sections(
    function: Callable[..., Any],
    params_path: Path,
    budget: Path | None = None,
    nproc: int | None = None,
    **arguments: Any,
) -> Any:
    """A DP stage: its sections, its budget plan (``--budget``'s file, or derived) and ``--nproc`` in place of its own
    section's ``nproc``."""
    from tasks.core.params_files import SECTIONS

    if nproc is not None:
        params_kind = typing.get_type_hints(function)["params"]
        own = next(name for name, kind in SECTIONS.items() if kind is params_kind)
        arguments["params"] = section(params_path, own, nproc=nproc)
    return sections(function, params_path, budget=plan_for(params_path, budget), **arguments)


def synthesize_from(
    function: Callable[..., Any], params_path: Path, public: bool = False, **arguments: Any
) -> Any:
    """``public``: the public pretraining set (section public) instead, without the dataset checks."""
    from tasks.core.params_files import load_dataset_sections

    if public:
        return sections(
            function, params_path, public=section(params_path, "public"), checks=None, **arguments
        )
    return sections(function, params_path, checks=load_dataset_sections(params_path), **arguments)


def budget_from(function: Callable[..., Any], params_path: Path, **arguments: Any) -> Any:
    from tasks.core.parallel import worker_count
    from tasks.core.params_files import load_plan

    workers = worker_count(section(params_path, "base").workers)
    return function(params=load_plan(params_path), workers=workers, **arguments)


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
    if not epochs:
        params = params.of_family(arguments.get("family") or params.method)
    return sections(function, params_path, params=params, as_loaded=epochs == 0, **arguments)
