"""Before the stages that learn: the index built, then the params checked against it.

A real dataset's shape (its people, actions and splits) is known once the index stage (``synthesize``) has read it;
params it cannot serve — more federated clients than people, a δ ≥ 1/N, more DCA filters than public actions —
would otherwise be refused by their own stage after minutes of others' work (issue 32). ``privhar flow``
checks every params section first (:func:`check_params`), bring the index up to date and refuse the run in one line here
(:func:`tasks.video_data.dataset_checks.check_against_dataset`); ``dvc repro <stage>`` alone gets the index stage's warnings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import BaseParams, DataParams, ModelParams
from tasks.core.params_files import (
    SECTIONS,
    load_dataset_sections,
    load_section,
    parse_section,
    read_params_file,
)
from tasks.privacy.one_run_audit import check_audit_size
from tasks.video_data.dataset_checks import check_against_dataset

INDEX_STAGE = "synthesize"  # the stage whose manifest lists the dataset's videos, splits, actions and subjects
INDEX_MANIFEST = Path("data/synthesize") / MANIFEST_NAME


def check_params(project: Path) -> None:
    """Every section of ``params.yaml`` against its schema, before the first stage (issue 35): a typo in the last
    stage's section (``private.methods: [dp_sdg]``, ``report.seeds: 0``) is refused in one line naming the key,
    not by that stage's command line after the others ran, nor an audit too small to show anything (issue 82); then the
    files it names (:func:`check_named_files`)."""
    path = project / "params.yaml"
    raw = read_params_file(path)
    check_sections(raw, path)
    check_named_files(project, raw)


def check_sections(raw: dict[str, Any], path: Path) -> None:
    """Every section of the params mapping ``raw`` (read from ``path``) against its schema, and each audit's size."""
    for name in SECTIONS:
        check_audit_size(name, parse_section(raw, name, path=path))


def check_named_files(project: Path, raw: dict[str, Any]) -> None:
    """The dataset folder, its CSVs and the checkpoint the params name exist, before any stage (issue 61: a missing
    ``model.weights`` was found by pretrain once every clip was loaded, after three other stages ran)."""
    data = parse_section(raw, "data")
    model = parse_section(raw, "model")
    assert isinstance(data, DataParams) and isinstance(model, ModelParams)

    def where(named: str) -> Path:  # relative to the project, where the stages run
        return Path(named) if Path(named).is_absolute() else project / named

    if data.source != "synthetic" and (data.root is None or not where(data.root).is_dir()):
        raise PrivharError(
            f"data.root = {data.root!r} is not a folder (data.source = {data.source!r}); expected the dataset's folder"
        )
    for key, named in (("data.attributes", data.attributes), ("data.subjects", data.subjects)):
        if named is not None and not where(named).is_file():
            raise PrivharError(f"{key} = {named!r}: no such file (expected a CSV)")
    if model.weights not in (None, "zoo") and not where(model.weights).is_file():
        kind = "a folder" if where(model.weights).is_dir() else "no such file"
        raise PrivharError(
            f"model.weights = {model.weights!r}: {kind} (expected a checkpoint file, or zoo)"
        )


def check_dataset(project: Path) -> None:
    """Refuse in one line the params that ``project``'s indexed dataset cannot serve."""
    params = project / "params.yaml"
    data = load_section(params, "data", DataParams)
    check_against_dataset(
        load_dataset_sections(params),
        read_manifest(project / INDEX_MANIFEST),
        data.root or "the embedded dataset",
        load_section(params, "base", BaseParams).seed,
    )
