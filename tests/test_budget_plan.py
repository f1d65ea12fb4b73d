"""Issue 30: the privacy budget planned in one place (stage ``budget``), each DP stage checking its own plan file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from flows.stage_readers import plan_for
from tasks.budget_plan import budget_plan
from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, write_manifest
from tasks.core.params_files import PlanParams, load_plan
from tasks.privacy.budget import check_budget, planned_releases, read_plan
from tests.conftest import REPO, write_params
from tests.test_report import ROWS

SETTINGS = {
    "dprp": {"epsilons": [2.0], "calibration": "gaussian", "neighbour": "pixel"},
    "private": {"methods": ["dp_sgd"], "epsilons": [1.0]},
}


def verdict(params: Path, release: str, plan: Path | None) -> str:
    try:
        check_budget(load_plan(params).privacy, release, ROWS, plan_for(params, plan))
    except PrivharError as refusal:
        return str(refusal)
    return "within the cap"


def test_each_dp_stage_gets_a_plan_file_whose_verdicts_are_the_ones_it_computes_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tasks.privacy.budget as budget

    first = max(
        next(
            r
            for r in planned_releases(load_plan(write_params(tmp_path, SETTINGS)))
            if r.name == "dprp-eps2.0"
        )
        .person_epsilons(ROWS)
        .values()
    )
    params = write_params(
        tmp_path, {**SETTINGS, "privacy": {"max_epsilon": first * (1 + 1e-9)}}
    )  # the first fits alone
    write_manifest(
        [
            {
                **row,
                "label": 0,
                "action": "walk",
                "path": f"frames/{row['video_id']}.npy",
                "fps": 12.0,
            }
            for row in ROWS
        ],
        tmp_path / "decode" / MANIFEST_NAME,
    )
    files = budget_plan(
        params=load_plan(params), workers=1, frames=tmp_path / "decode", out=tmp_path / "budget"
    )
    stages = {release.name: release.stage for release in planned_releases(load_plan(params))}
    assert (
        set(files)
        == set(stages.values())
        == {"dprp-eps2.0", "train-private-dp_sgd", "train-federated", "ldp"}
    )
    assert sorted(path.name for path in (tmp_path / "budget").iterdir()) == sorted(
        f"{stage}.json" for stage in files
    )
    # a finite cap: each stage's file holds the releases planned before its own (reserved), so their changes rerun it
    assert [entry["release"] for entry in files["train-private-dp_sgd"]][0] == "dprp-eps2.0"
    verdicts = {
        release: verdict(params, release, tmp_path / "budget" / f"{stage}.json")
        for release, stage in stages.items()
    }
    assert verdicts == {release: verdict(params, release, None) for release in stages}
    assert verdicts["dprp-eps2.0"] == "within the cap" and any(
        "privacy.max_epsilon" in v for v in verdicts.values()
    )
    # no cap: a stage's file holds its own releases only (a Video-DPRP ablation does not retrain the private models)
    unlimited = budget_plan(
        params=load_plan(write_params(tmp_path, SETTINGS)),
        workers=1,
        frames=tmp_path / "decode",
        out=tmp_path / "open",
    )
    assert {
        stage: {entry["release"] for entry in entries} for stage, entries in unlimited.items()
    } == {
        stage: {release for release, owner in stages.items() if owner == stage} for stage in files
    }
    # with its plan file a stage checks against that file alone: no plan derived again from the params (issue 60)
    monkeypatch.setattr(budget, "planned_releases", None)
    assert verdict(params, "dprp-eps2.0", tmp_path / "budget/dprp-eps2.0.json") == "within the cap"
    assert verdict(params, "dprp-eps2.0", tmp_path / "open/ldp.json").endswith(
        "ldp.json: dprp-eps2.0 is not in this budget plan; expected the plan of the stage that makes it"
    )


def test_the_budget_stage_declares_every_params_section_the_plan_reads() -> None:
    read = {
        field.name for field in dataclasses.fields(PlanParams)
    }  # the plan takes these sections, nothing else
    declared = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["budget"]["params"]
    assert read and all(
        any(key == section or key.startswith(f"{section}.") for key in declared) for section in read
    ), read


def test_a_plan_that_is_not_one_is_a_one_line_error(tmp_path: Path) -> None:
    for text in ("{not json", "[1, 2]", '[{"release": "dprp-eps2.0"}]'):
        (tmp_path / "broken.json").write_text(text)
        with pytest.raises(
            PrivharError,
            match=r"broken.json: not a budget plan .*; expected the budget stage's output",
        ):
            read_plan(tmp_path / "broken.json")


def test_private_seeds_set_how_many_releases_each_private_row_makes(tmp_path: Path) -> None:
    """private.seeds: every private row's seeds (each a DP release the plan counts); the federated rows keep report.seeds."""
    params = write_params(
        tmp_path,
        {
            **SETTINGS,
            "private": {**SETTINGS.get("private", {}), "seeds": 3},
            "report": {"seeds": 2},
        },
    )
    names = [release.name for release in planned_releases(load_plan(params))]
    private = [name for name in names if name.startswith("dp_sgd-eps")]
    assert (
        len(private) == 3 * len(set(name.split("-seed")[0] for name in private))
        and "dp_sgd-eps1.0-seed2" in names
    )
    federated = [name for name in names if name.startswith("federated-")]
    assert federated and not any(name.endswith("-seed2") for name in federated)
