"""Before the stages that learn: the index built, then the params checked against it.

A real dataset's shape (its people, actions and splits) is known once the index stage (``synthesize``) has read it;
params it cannot serve — more federated clients than people, a δ ≥ 1/N, more DCA filters than public actions —
would otherwise be refused by their own stage after minutes of others' work (issue 32). ``privhar flow``
checks every params section first (:func:`check_params`), bring the index up to date and refuse the run in one line here
(:func:`tasks.core.dataset_checks.check_against_dataset`); ``dvc repro <stage>`` alone gets the index stage's warnings.
"""

from __future__ import annotations

from pathlib import Path

from tasks.core.dataset_checks import check_against_dataset
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import (
    SECTIONS,
    BaseParams,
    DataParams,
    load_section,
    parse_section,
    read_params_file,
)

INDEX_STAGE = "synthesize"  # the stage whose manifest lists the dataset's videos, splits, actions and subjects
INDEX_MANIFEST = Path("data/synthesize") / MANIFEST_NAME


def check_params(project: Path) -> None:
    """Every section of ``params.yaml`` against its schema, before the first stage (issue 35): a typo in the last
    stage's section (``private.methods: [dp_sdg]``, ``report.seeds: 0``) is refused in one line naming the key,
    not by that stage's command line after the others ran."""
    path = project / "params.yaml"
    raw = read_params_file(path)
    for name in SECTIONS:
        parse_section(raw, name, path=path)


def check_dataset(project: Path) -> None:
    """Refuse in one line the params that ``project``'s indexed dataset cannot serve."""
    params = project / "params.yaml"
    data = load_section(params, "data", DataParams)
    check_against_dataset(
        params,
        read_manifest(project / INDEX_MANIFEST),
        data.root or "the embedded dataset",
        load_section(params, "base", BaseParams).seed,
    )
