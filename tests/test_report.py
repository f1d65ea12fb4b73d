"""The report stage's tables and ledger, and the privacy.max_epsilon cap."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tasks.core.dp_randomness import NOT_PRIVATE
from tasks.core.errors import PrivharError
from tasks.core.params_files import load_plan
from tasks.core.scores import SIGNATURE_COLUMNS
from tasks.core.tables import compact
from tasks.privacy.accounting import (
    ADD_REMOVE,
    REPLACE_ONE,
    calibrate_noise,
    group_epsilon,
    sampled_gaussian_epsilon,
)
from tasks.privacy.budget import planned_releases
from tasks.privacy.dprp_calibration import noise_scales
from tasks.report.ledger import Release, subject_totals
from tasks.report.tables import (
    NOT_RUN,
    methods,
    signature_rows,
    table_one,
    table_one_markdown,
)
from tests.conftest import check_budget_at, write_params

ROWS = [
    {
        "video_id": "a",
        "split": "train",
        "identities": [0, 1],
        "height": 32,
        "width": 40,
        "n_frames": 4,
    },
    {
        "video_id": "b",
        "split": "train",
        "identities": [2],
        "height": 32,
        "width": 40,
        "n_frames": 4,
    },
    {"video_id": "c", "split": "test", "identities": [3], "height": 32, "width": 40, "n_frames": 4},
]
ROWS_WITH_FRAMES = ROWS
# the default configuration's Video-DPRP copy at the paper's ε = 8 (96 × 128 frames, k = 768, one public R, r = k)
PUBLIC_R_AT_8 = noise_scales(
    epsilon=8.0,
    delta=1e-4,
    budget_split=0.8,
    k=768,
    d=96 * 128 * 3,
    calibration="paper",
    neighbour="frame",
)


def test_a_method_whose_stage_did_not_run_says_not_run() -> None:
    rows = methods(["avatar", "blackout"], [PUBLIC_R_AT_8], ["dp_sgd"], [2.0])
    metrics = {
        "baseline": {"top1": 0.75},
        "anonymize-avatar": {"top1": 0.69, "top1_protocol2": 0.83},
        "dp_sgd-eps2.0": {"top1": 0.7},
    }
    signature = {
        "raw": {
            "cmap_raw_attacker": 0.86,
            "f1_raw_attacker": 0.8,
            "cmap_adaptive": 0.86,
            "f1_adaptive": 0.8,
        }
    }
    table = {row["model"]: row for row in table_one(rows, metrics, signature)}
    assert (
        table["anonymize-blackout"]["top1"] == NOT_RUN
        and table["dprp-eps8.0"]["cmap_raw_attacker"] == NOT_RUN
    )
    assert (
        table["anonymize-avatar"]["top1_protocol2"] == 0.83
        and table["anonymize-avatar"]["cmap_adaptive"] == NOT_RUN
    )
    assert table["baseline"]["cmap_raw_attacker"] == 0.86
    assert (
        table["dp_sgd-eps2.0"]["cmap_raw_attacker"] == "n/a"
    )  # DP training leaves the frames as they are
    assert table["dp_sgd-epsinf"]["top1"] == NOT_RUN
    text = compact(table_one_markdown(list(table.values())))
    assert "| anonymize: blackout | ∞ | not run | not run |" in text
    # the Video-DPRP row names the ε its noise gives for the paper's unit under a public R, the paper's ε beside it
    assert (
        f"| Video-DPRP ε = {PUBLIC_R_AT_8.epsilon:.3g} (paper's ε = 8) | {PUBLIC_R_AT_8.epsilon:.3g} |"
        in text
    )
    assert table["dprp-eps8.0"]["epsilon"] == PUBLIC_R_AT_8.epsilon > 60
    assert all(row["e_id_ind"] == NOT_RUN for row in signature_rows(rows, {}))


def test_person_totals_compose_group_epsilons_and_unbounded_or_seeded_releases_are_infinite() -> (
    None
):
    dprp = Release(
        "dprp-eps2.0",
        "dprp",
        "Video-DPRP",
        2.0,
        1e-4,
        "paper",
        "paper",
        "train+test",
        persons={0: (50.0, 1e-3), 1: (50.0, 1e-3), 2: (40.0, 1e-3), 3: (40.0, 1e-3)},
    )
    sgd = Release(
        "dp_sgd-eps1.0",
        "dp_sgd",
        "DP-SGD",
        1.0,
        1e-5,
        "prv",
        "σ",
        "train",
        persons={0: (1.0, 1e-5), 1: (1.0, 1e-5), 2: (1.0, 1e-5)},
    )
    totals = {row["subject"]: row for row in subject_totals([dprp, sgd], ROWS)}
    assert totals[0]["epsilon_per_unit_sum"] == 3.0 and totals[0]["epsilon_person"] == 51.0
    assert (
        totals[0]["delta_person"] == pytest.approx(1.01e-3)
        and totals[0]["total_epsilon_person"] == 51.0
    )
    assert totals[3]["epsilon_person"] == 40.0  # only in the test split: DP-SGD never saw them
    blur = Release(
        "anonymize-face_blur",
        "anonymize",
        "obfuscation",
        math.inf,
        0.0,
        "none",
        "none",
        "train+test",
    )
    seeded = Release(
        "dp_sgd-eps2.0",
        "dp_sgd",
        "DP-SGD",
        2.0,
        1e-5,
        "prv",
        "σ",
        "train",
        randomness=NOT_PRIVATE,
        persons={2: (2.0, 1e-5)},
    )
    totals = {row["subject"]: row for row in subject_totals([dprp, sgd, blur, seeded], ROWS)}
    assert totals[2]["epsilon_person"] == 43.0 and math.isinf(totals[2]["total_epsilon_person"])
    assert totals[2]["releases_without_dp"] == 1 and totals[2]["releases_seeded"] == 1


def test_planned_person_epsilon_is_group_privacy_over_the_persons_videos(tmp_path: Path) -> None:
    params = write_params(
        tmp_path, {"private": {"methods": ["dp_sgd", "maskdp"], "epsilons": [1.0], "batch_size": 2}}
    )
    plan = {release.name: release for release in planned_releases(load_plan(params))}
    rows = [row for row in ROWS if row["split"] == "train"] + [
        {
            "video_id": "d",
            "split": "train",
            "identities": [0],
            "height": 32,
            "width": 40,
            "n_frames": 4,
        }
    ]
    found = plan["dp_sgd-eps1.0"].person_epsilons(rows)
    rate, steps = 1 / 2, 2 * 2  # 3 videos, batch 2: 2 steps per epoch, q = 1/2, 2 epochs
    sigma = calibrate_noise(1.0, 1e-4, rate, steps, accountant="prv", relation=ADD_REMOVE)
    assert found[0] == pytest.approx(
        group_epsilon(sigma, rate, steps, 1e-4, 2, relation=ADD_REMOVE)
    )  # a and d
    assert (
        found[2] == pytest.approx(group_epsilon(sigma, rate, steps, 1e-4, 1, relation=ADD_REMOVE))
        and found[0] > 2 * found[2]
    )
    masked = plan["maskdp-eps1.0"].person_epsilons(
        rows
    )  # replace-one: its own σ and group accounting
    sigma = calibrate_noise(1.0, 1e-4, rate, steps, accountant="prv", relation=REPLACE_ONE)
    assert masked[0] == pytest.approx(
        group_epsilon(sigma, rate, steps, 1e-4, 2, relation=REPLACE_ONE)
    )
    assert masked[2] == pytest.approx(
        sampled_gaussian_epsilon(sigma, rate, steps, 1e-4, accountant="pld", relation=REPLACE_ONE)
    )
    frames = plan["dprp-eps2.0"].person_epsilons(
        ROWS
    )  # the paper calibration covers 255/√k of one frame: a person is huge
    assert min(frames.values()) > 1e3


def test_the_cap_refuses_the_release_that_would_exceed_it_naming_person_spent_and_requested(
    tmp_path: Path,
) -> None:
    params = write_params(
        tmp_path,
        {
            "dprp": {"epsilons": [2.0, 5.0], "calibration": "gaussian", "neighbour": "pixel"},
            "private": {"methods": ["dp_sgd"], "epsilons": [1.0, 4.0]},
            "privacy": {"max_epsilon": 8.0},
        },
    )
    federated = [
        f"federated-{aggregation}-{tuning}"
        for tuning in ("full", "selective")
        for aggregation in ("fedavg", "fednova")
    ]
    assert [r.name for r in planned_releases(load_plan(params))] == [
        "dprp-eps2.0",
        "dprp-eps5.0",
        "dp_sgd-eps1.0",
        "dp_sgd-eps4.0",
        *federated,
        "ldp-eps1",
        "ldp-raw_pixels-eps1",
        "ldp-hog_bovw-eps1",
    ]
    # a person in one video of 4 frames: the pixel-level calibration says little about a whole person
    with pytest.raises(
        PrivharError,
        match=r"privacy.max_epsilon = 8: person \d has spent ε = 0 before dprp-eps2.0, which "
        r"requests ε = [\d.e+]+ more for them \(group privacy",
    ):
        check_budget_at(params, "dprp-eps2.0", ROWS)


def test_the_cap_counts_releases_recorded_by_earlier_runs_and_a_new_budget_starts_fresh(
    tmp_path: Path,
) -> None:
    """Issue 30: each run with secret randomness releases the same people again. A release fits the cap once; recorded
    (as its stage does when its output is complete), the same release planned again by the next run is refused; under
    another privacy.budget (new data) it fits again. The plan's other releases, not made yet, stay reserved."""
    from tasks.privacy.budget import derived_plan, record_made

    settings = {
        "dprp": {"epsilons": [2.0], "calibration": "gaussian", "neighbour": "pixel"},
        "private": {"methods": ["dp_sgd"], "epsilons": [1.0]},
    }
    plan = {
        release.name: release
        for release in planned_releases(load_plan(write_params(tmp_path, settings)))
    }
    first = max(plan["dprp-eps2.0"].person_epsilons(ROWS).values())
    params = write_params(tmp_path, {**settings, "privacy": {"max_epsilon": 1.5 * first}})
    check_budget_at(params, "dprp-eps2.0", ROWS)
    record_made(load_plan(params).privacy, "dprp-eps2.0", ROWS, derived_plan(load_plan(params)))
    with pytest.raises(
        PrivharError,
        match=rf"person \d has spent ε = {re.escape(f'{first:.4g}')} before dprp-eps2.0, .* the releases "
        rf"recorded in budget 'test-{tmp_path.name}'",
    ):
        check_budget_at(params, "dprp-eps2.0", ROWS)
    check_budget_at(
        write_params(
            tmp_path, {**settings, "privacy": {"max_epsilon": 1.5 * first, "budget": "new-data"}}
        ),
        "dprp-eps2.0",
        ROWS,
    )


def test_a_finite_cap_refuses_unprotected_and_seeded_releases_unless_allowed(
    tiny_decoded: Path, tmp_path: Path
) -> None:
    from flows.stage_commands import stage_call

    anonymize = stage_call("anonymize")

    for name, privacy in (
        ("capped", {"max_epsilon": 1e12}),
        ("seeded", {"max_epsilon": 1e12, "randomness": "seeded"}),
        (
            "allowed",
            {"max_epsilon": 1e12, "randomness": "seeded", "allow_unprotected_releases": True},
        ),
    ):
        (tmp_path / name).mkdir()
        params = write_params(
            tmp_path / name, {"privacy": privacy, "anonymize": {"methods": ["blackout"]}}
        )
        if name == "allowed":
            anonymize(
                params_path=params,
                frames=tiny_decoded / "data" / "decode",
                method="blackout",
                out=tmp_path / name / "o",
            )
            check_budget_at(params, "ldp-eps1", ROWS_WITH_FRAMES)
            continue
        with pytest.raises(
            PrivharError,
            match="privacy.max_epsilon = 1e\\+12 is finite and the anonymized copy anonymize@blackout "
            "has no DP guarantee; set privacy.allow_unprotected_releases: true",
        ):
            anonymize(
                params_path=params,
                frames=tiny_decoded / "data" / "decode",
                method="blackout",
                out=tmp_path / name / "o",
            )
        assert not (tmp_path / name / "o").exists()
        if name == "seeded":
            with pytest.raises(
                PrivharError,
                match=r"ldp-eps1 \(privacy.randomness: seeded, so not private\) has no DP",
            ):
                check_budget_at(params, "ldp-eps1", ROWS_WITH_FRAMES)


def test_the_dprp_stage_refuses_over_the_cap_before_writing_anything(
    tiny_decoded: Path, tmp_path: Path
) -> None:
    from flows.stage_commands import stage_call

    dprp = stage_call("dprp")

    params = write_params(
        tmp_path, {"dprp": {"epsilons": [5.0, 8.0]}, "privacy": {"max_epsilon": 10.0}}
    )
    with pytest.raises(
        PrivharError,
        match=r"person .* has spent ε = .* before dprp-eps8.0, which requests ε = .* more",
    ):
        dprp(
            params_path=params,
            frames=tiny_decoded / "data" / "decode",
            epsilon=8.0,
            out=tmp_path / "eps8.0",
        )
    assert not (tmp_path / "eps8.0").exists()


def test_report_renders_with_missing_stages(tiny_decoded: Path, tmp_path: Path) -> None:
    from flows.stage_commands import stage_call

    report = stage_call("report")

    params = write_params(tmp_path)
    (tmp_path / "metrics.json").write_text(json.dumps({"baseline": {"top1": 0.5, "top5": 0.9}}))
    for name in ("ledgers", "train", "dprp", "anonymize"):
        (tmp_path / name).mkdir()
    table = report(
        params,
        metrics=tmp_path / "metrics.json",
        signature=tmp_path / "absent.json",
        ledgers=tmp_path / "ledgers",
        train_reports=tmp_path / "train",
        dprp=tmp_path / "dprp",
        anonymize=tmp_path / "anonymize",
        frames=tiny_decoded / "data" / "decode",
        out=tmp_path / "out",
    )
    text = compact((tmp_path / "out" / "results.md").read_text())
    assert "| none (raw clips) | ∞ | 50.0 | 50.0 | not run |" in text
    assert sum(row["top1"] == NOT_RUN for row in table) == len(table) - 1
    assert (tmp_path / "out" / "report" / "results.parquet").is_file()


def test_a_measure_assess_could_not_take_reads_n_m_and_breaks_nothing(
    tiny_decoded: Path, tmp_path: Path
) -> None:
    """Issue 32: on real footage assess has no attributes (None); the report wrote half its files, then crashed."""
    from flows.stage_commands import stage_call

    report = stage_call("report")

    params = write_params(tmp_path)
    (tmp_path / "metrics.json").write_text(json.dumps({"baseline": {"top1": 0.5, "top5": 0.9}}))
    unmeasured = {
        "cmap_raw_attacker": None,
        "f1_raw_attacker": None,
        "cmap_adaptive": None,
        "f1_adaptive": None,
        **{key: None for key in SIGNATURE_COLUMNS},
    }
    (tmp_path / "signature.json").write_text(json.dumps({"raw": unmeasured}))
    for name in ("ledgers", "train", "dprp", "anonymize"):
        (tmp_path / name).mkdir()
    report(
        params,
        metrics=tmp_path / "metrics.json",
        signature=tmp_path / "signature.json",
        ledgers=tmp_path / "ledgers",
        train_reports=tmp_path / "train",
        dprp=tmp_path / "dprp",
        anonymize=tmp_path / "anonymize",
        frames=tiny_decoded / "data" / "decode",
        out=tmp_path / "out",
    )
    assert "| none (raw clips) | ∞ | 50.0 | 50.0 | n/m | n/m | n/m | n/m |" in compact(
        (tmp_path / "out" / "results.md").read_text()
    )
    assert not {"cmap_raw_attacker", "f1_raw_attacker"} & set(
        json.loads((tmp_path / "out" / "report" / "metrics.json").read_text())["baseline"]
    )


def test_report_logs_one_nested_mlflow_run_per_method(tiny_decoded: Path, tmp_path: Path) -> None:
    import mlflow

    from flows.stage_commands import stage_call

    report = stage_call("report")

    params = write_params(
        tmp_path,
        {
            "anonymize": {"methods": ["blackout"]},
            "dprp": {"epsilons": [8.0]},
            "private": {"methods": ["dp_sgd"], "epsilons": [2.0]},
        },
    )
    (tmp_path / "metrics.json").write_text(
        json.dumps(
            {
                "baseline": {"top1": 0.5},
                "dprp-eps8.0": {"top1": 0.2},
                "dp_sgd-eps2.0": {"top1": 0.4},
            }
        )
    )
    attack = {
        "cmap_raw_attacker": 0.8,
        "f1_raw_attacker": 0.7,
        "cmap_adaptive": 0.8,
        "f1_adaptive": 0.7,
        **{key: 0.5 for key in SIGNATURE_COLUMNS},
    }
    (tmp_path / "signature.json").write_text(
        json.dumps({"raw": attack, "dprp-eps8.0": {**attack, "cmap_raw_attacker": 0.3}})
    )
    for name in ("ledgers", "train", "dprp", "anonymize"):
        (tmp_path / name).mkdir()
    report(
        params,
        metrics=tmp_path / "metrics.json",
        signature=tmp_path / "signature.json",
        ledgers=tmp_path / "ledgers",
        train_reports=tmp_path / "train",
        dprp=tmp_path / "dprp",
        anonymize=tmp_path / "anonymize",
        frames=tiny_decoded / "data" / "decode",
        out=tmp_path / "out",
    )
    parent = mlflow.search_runs(
        search_all_experiments=True,
        filter_string="tags.mlflow.runName = 'report'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    ).iloc[0]
    children = mlflow.search_runs(
        search_all_experiments=True, filter_string=f"tags.mlflow.parentRunId = '{parent.run_id}'"
    )
    by_name = {row["tags.mlflow.runName"]: row for _, row in children.iterrows()}
    assert set(by_name) == {
        "baseline",
        "dprp ε=8",
        "dp_sgd ε=2",
    }  # methods with scores; "not run" ones log nothing
    from tasks.core.dp_params import DprpParams, PrivacyParams
    from tasks.core.manifest import MANIFEST_NAME, read_manifest
    from tasks.core.params_files import load_section
    from tasks.privacy.dprp_calibration import dataset_scales

    first = read_manifest(tiny_decoded / "data" / "decode" / MANIFEST_NAME)[0]
    holds = dataset_scales(
        load_section(params, "dprp", DprpParams),
        8.0,
        int(first["height"]) * int(first["width"]) * 3,
        load_section(params, "privacy", PrivacyParams).randomness == "secure",
    ).epsilon
    assert by_name["dprp ε=8"]["metrics.cmap"] == 0.3
    assert (
        by_name["dprp ε=8"]["metrics.epsilon"] == pytest.approx(holds) and holds > 8.0
    )  # public R: not the paper's 8
    details = mlflow.artifacts.load_dict(f"{by_name['dprp ε=8']['artifact_uri']}/details.json")
    assert (  # paper 004's evaluators: the row's details, not metric keys of their own (issue 60)
        details["e_track"] == 0.5
        and "metrics.e_track" not in children
        and by_name["dp_sgd ε=2"]["metrics.top1"] == 0.4
    )


def test_ldp_releases_enter_the_ledger_with_their_per_video_epsilon(tmp_path: Path) -> None:
    from tasks.report.ledger import ldp_releases

    (tmp_path / "ledger.csv").write_text(
        "release,mechanism,epsilon_per_feature,features_per_video,epsilon_per_video,delta,accountant,splits\n"
        "ldp-eps0.5,k-ary RR,0.5,64,32.0,0.0,pure,train\nldp-epsinf,k-ary RR,inf,64,inf,0.0,pure,train\n"
    )
    finite, reference = ldp_releases(tmp_path / "ledger.csv")
    assert (
        finite.epsilon == 32.0
        and finite.private
        and "0.5 per feature × 64 features" in finite.calibration
    )
    assert not reference.private and reference.note == "reference without noise"
    finite, reference = ldp_releases(tmp_path / "ledger.csv", ROWS)
    assert finite.persons[0] == (32.0, 0.0)  # one training video of person 0: 1 × 32
    totals = subject_totals([finite, reference], ROWS)
    assert totals[0]["epsilon_person"] == 32.0 and math.isinf(totals[0]["total_epsilon_person"])
    assert ldp_releases(tmp_path / "absent.csv") == []


def test_claims_are_decided_by_welch_over_the_seeds_not_by_one_run():
    """Issue 19: a claim holds or is reversed only when the seeds' gap is significant at 95 % (scipy's Welch test)."""
    from scipy import stats

    from tasks.report.claims import decide, paper_claims

    def seeds(key, values):
        return {
            key + ("" if index == 0 else f"-seed{index}"): {"top1": value}
            for index, value in enumerate(values)
        }

    metrics = {
        **seeds("maskdp-eps1.0", [0.62, 0.60, 0.61]),
        **seeds("dp_sgd-eps1.0", [0.50, 0.52, 0.51]),
        **seeds("dp_sgd_avatar-eps1.0", [0.70, 0.50, 0.66]),
        **seeds("multiclip-eps1.0", [0.40, 0.41, 0.42]),
        **seeds("fedavg-selective", [0.55]),
        **seeds("fedavg-full", [0.30]),
    }
    at_two = noise_scales(
        epsilon=2.0,
        delta=1e-4,
        budget_split=0.8,
        k=768,
        d=96 * 128 * 3,
        calibration="paper",
        neighbour="frame",
    )
    claims = paper_claims(
        ["dp_sgd", "dp_sgd_avatar", "multiclip", "maskdp"],
        [1.0],
        [at_two],
        ["fedavg"],
        ["full", "selective"],
    )
    rows = {row["claim"]: row for row in decide(claims, metrics)}
    assert rows["MaskDP (avatar copy) beats DP-SGD on real clips at ε = 1"]["verdict"].startswith(
        "holds"
    )
    assert rows["MultiClip-DP beats DP-SGD at ε = 1"]["verdict"].startswith("reversed")
    overlapping = rows["MaskDP beats DP-SGD on the same avatar copy at ε = 1"]
    p_value = stats.ttest_ind([0.62, 0.60, 0.61], [0.70, 0.50, 0.66], equal_var=False).pvalue
    assert overlapping["verdict"] == f"undecided (p = {p_value:.2f})"
    # the gap's interval: scipy's own Welch interval of the difference of means, in points
    welch = stats.ttest_ind(
        [0.62, 0.60, 0.61], [0.70, 0.50, 0.66], equal_var=False
    ).confidence_interval(0.95)
    assert overlapping["gap_low"] == pytest.approx(100 * welch.low, abs=0.01)
    assert overlapping["gap_high"] == pytest.approx(100 * welch.high, abs=0.01)
    assert overlapping["gap_low"] < 0 < overlapping["gap_high"]  # undecided: the interval holds 0
    assert (
        rows["selective tuning beats full fine-tuning under federated DP (fedavg)"]["verdict"]
        == "undecided (one seed)"
    )
    assert overlapping["higher_top1"] == "61.0 ± 2.5"  # t(0.975, 2) · 0.01 / √3 = 0.0248
    assert not any("Video-DPRP" in claim.text for claim in claims)  # no DPRP copy at ε = 8 here
    missing = decide(claims, {})
    assert {row["verdict"] for row in missing} == {"not run"}
    # paper 000's claim at its printed ε = 8 names the ε that holds for a public R
    [claim] = [
        claim
        for claim in paper_claims(["multiclip"], [8.0], [PUBLIC_R_AT_8], [], [])
        if claim.paper == "000" and "Video-DPRP" in claim.text
    ]
    assert (
        claim.text
        == f"Video-DPRP ε = {PUBLIC_R_AT_8.epsilon:.3g} (paper's ε = 8) is at least as good as MultiClip-DP at ε = 8"
    )
    assert (claim.higher, claim.lower) == ("dprp-eps8.0", "multiclip-eps8.0")


def test_an_undecided_claim_says_when_it_rules_out_the_gap_the_paper_prints():
    """Issue 31: an undecided claim is shown beside the smallest gap its paper prints; an interval wholly below it rules
    the paper's gain out (paper 000 Table 2: MultiClip-DP 44.07 against DP-SGD 25.54 on UCF101 at ε = 2)."""
    from scipy import stats

    from tasks.report.claims import decide, paper_claims

    multiclip, dp_sgd = [0.80, 0.82, 0.81, 0.83], [0.81, 0.80, 0.82, 0.815]
    metrics = {
        key + ("" if index == 0 else f"-seed{index}"): {"top1": value}
        for key, values in (("multiclip-eps2.0", multiclip), ("dp_sgd-eps2.0", dp_sgd))
        for index, value in enumerate(values)
    }
    [row] = decide(
        [
            claim
            for claim in paper_claims(["dp_sgd", "multiclip"], [2.0], [], [], [])
            if claim.paper == "000"
        ],
        metrics,
    )
    welch = stats.ttest_ind(multiclip, dp_sgd, equal_var=False)
    assert welch.pvalue > 0.05 and 100 * welch.confidence_interval(0.95).high < 44.07 - 25.54
    assert row["paper_gap"] == 18.5 and "UCF101" in row["paper_gap_source"]
    assert row["verdict"] == f"undecided (p = {welch.pvalue:.2f}); the paper's +18.5 ruled out"
    wide = {
        **metrics,
        "dp_sgd-eps2.0-seed1": {"top1": 0.50},
    }  # an interval reaching past 18.5 rules nothing out
    assert decide(
        [
            claim
            for claim in paper_claims(["dp_sgd", "multiclip"], [2.0], [], [], [])
            if claim.paper == "000"
        ],
        wide,
    )[0]["verdict"].endswith(")")


def test_each_protection_is_measured_against_the_raw_clips_and_a_tie_is_explained():
    """Issue 31: a protected copy whose Top-1 the seeds cannot tell from the raw clips' is named, with why."""
    from scipy import stats

    from tasks.report.claims import against_raw
    from tasks.report.markdown import _costs_markdown

    def seeds(key, values):
        return {
            key + ("" if index == 0 else f"-seed{index}"): {"top1": value}
            for index, value in enumerate(values)
        }

    metrics = {
        **seeds("baseline", [0.90, 0.89, 0.91]),
        **seeds("anonymize-face_blur", [0.89, 0.90, 0.88]),
        **seeds("anonymize-blackout", [0.60, 0.62, 0.61]),
    }
    rows = methods(["face_blur", "blackout", "avatar"], [], [], [])
    costs = {row["method"]: row for row in against_raw(rows, metrics)}
    tie = stats.ttest_ind([0.90, 0.89, 0.91], [0.89, 0.90, 0.88], equal_var=False).pvalue
    assert costs["anonymize: face_blur"]["verdict"] == f"within noise (p = {tie:.2f})"
    assert (
        costs["anonymize: blackout"]["verdict"].startswith("costs")
        and costs["anonymize: blackout"]["gap"] == -29.0
    )
    assert costs["anonymize: avatar"]["verdict"] == "not run"
    text = _costs_markdown(list(costs.values()), "motion")
    assert (
        "Within noise of the raw clips: anonymize: face_blur. Why: the classifier reads what moved"
        in text
    )
    assert "blackout." not in text.split("Within noise")[1]


def test_person_level_row_is_set_beside_video_level_and_the_non_private_model(tmp_path):
    """Issue 31: person-level DP-SGD within 10 points of non-private is decided on the gap's Welch interval."""
    from scipy import stats

    from tasks.core.tables import csv_bytes
    from tasks.report.person_level import person_level_markdown, person_level_rows

    def seeds(key, values):
        return {
            key + ("" if index == 0 else f"-seed{index}"): {"top1": value}
            for index, value in enumerate(values)
        }

    def ledger(method, person_max):
        return [
            {
                "model": f"{method}-eps{eps}{suffix}",
                "target_epsilon": eps,
                "epsilon": eps,
                "seed": seed,
                "epsilon_person_max": person_max * eps,
            }
            for eps in (1.0, 8.0, math.inf)
            for seed, suffix in ((0, ""), (1, "-seed1"))
        ]

    (tmp_path / "dp_sgd_person.csv").write_bytes(csv_bytes(ledger("dp_sgd_person", 2.0)))
    (tmp_path / "dp_sgd.csv").write_bytes(csv_bytes(ledger("dp_sgd", 5.0)))
    metrics = {
        **seeds("baseline", [0.90, 0.92, 0.91]),
        **seeds("dp_sgd_person-eps1.0", [0.60, 0.62, 0.61]),
        **seeds("dp_sgd_person-eps8.0", [0.86, 0.87, 0.85]),
        **seeds("dp_sgd-eps8.0", [0.93, 0.93, 0.94]),
    }
    rows = {row["target_epsilon"]: row for row in person_level_rows(tmp_path, metrics)}
    assert sorted(rows) == [1.0, 8.0]  # finite ε only: ∞ is no privacy
    welch = stats.ttest_ind(
        [0.86, 0.87, 0.85], [0.90, 0.92, 0.91], equal_var=False
    ).confidence_interval(0.95)
    at_eight = rows[8.0]
    assert (
        at_eight["gap_low"] == pytest.approx(100 * welch.low, abs=0.01)
        and at_eight["verdict"] == "within 10 points"
    )
    assert at_eight["epsilon_person_max"] == 16.0 and at_eight["video_epsilon_person_max"] == 40.0
    assert at_eight["video_top1"].startswith("93.3") and rows[1.0]["video_top1"] == "not run"
    assert rows[1.0]["verdict"] == "more than 10 points below"
    assert "within 10 points" in person_level_markdown(list(rows.values()))


def test_releases_entered_together_count_as_they_would_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A private method's seeds enter the ledger as one run (a few when their names are long): the same names and the
    same ε per person, summed, as one run per release would record; a run's names stay within MLflow's tag limit."""
    from tasks.privacy import release_ledger

    releases = {
        f"dp_sgd-eps1.0{'' if seed == 0 else f'-seed{seed}'}": {
            1: 0.5 + seed,
            2: 0.25,
            3 + seed: 1.0,
        }
        for seed in range(12)
    }
    monkeypatch.setattr(release_ledger, "NAMES_PER_TAG", 80)  # about 3 names a run
    release_ledger.record_releases(f"together-{tmp_path.name}", releases, "secure")
    for name, persons in releases.items():
        release_ledger.record_release(f"apart-{tmp_path.name}", name, persons, "secure")
    together, apart = (
        release_ledger.recorded(f"together-{tmp_path.name}"),
        release_ledger.recorded(f"apart-{tmp_path.name}"),
    )
    assert together[0] == apart[0] == set(releases)
    assert together[1].keys() == apart[1].keys() and all(
        together[1][p] == pytest.approx(apart[1][p]) for p in apart[1]
    )
    assert together[1][1] == pytest.approx(sum(0.5 + seed for seed in range(12)))
    from mlflow import MlflowClient

    runs = MlflowClient().search_runs(
        [release_ledger._experiment_id()],
        f"tags.`{release_ledger.BUDGET_TAG}` = 'together-{tmp_path.name}'",
    )
    assert 3 <= len(runs) <= 6 and all(
        len(run.data.tags.get(release_ledger.RELEASES_TAG, "")) <= 80 for run in runs
    )


def test_the_ledger_reads_each_persons_epsilon_from_its_table_and_from_older_runs_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each person's ε is a table on the release's run (issue 60: no metric key per person); runs recorded before it
    kept ``person.<id>`` metrics and still count; a run whose table cannot be read stops the count in one line (fail
    closed: its release's ε is unknown, not zero)."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    from tasks.core.errors import PrivharError
    from tasks.privacy import release_ledger

    monkeypatch.setenv(
        "PRIVHAR_EXPERIMENT", f"ledger-{tmp_path.name}"
    )  # its own: older keys stay out of the shared one
    budget = f"table-{tmp_path.name}"
    release_ledger.record_release(budget, "new", {1: 0.5, 7: 1.25}, "secure")
    client = MlflowClient()
    older = client.create_run(
        release_ledger._experiment_id(),
        tags={release_ledger.RELEASE_TAG: "older", release_ledger.BUDGET_TAG: budget},
    )
    client.log_batch(older.info.run_id, metrics=[Metric("person.7", 2.0, 0, 0)])
    assert release_ledger.recorded(budget) == ({"new", "older"}, {1: 0.5, 7: 3.25})
    (run,) = client.search_runs(
        [release_ledger._experiment_id()], f"tags.`{release_ledger.RELEASE_TAG}` = 'new'"
    )
    assert not run.data.metrics and [
        item.path for item in client.list_artifacts(run.info.run_id)
    ] == [release_ledger.PERSONS_FILE]
    client.create_run(
        release_ledger._experiment_id(),
        run_name="stopped",
        tags={release_ledger.RELEASE_TAG: "stopped", release_ledger.BUDGET_TAG: budget},
    )
    with pytest.raises(PrivharError, match=r"run \w+ \(stopped\) has no readable persons.parquet"):
        release_ledger.recorded(budget)


def test_a_rows_spread_splits_into_the_test_sets_part_and_the_models_part() -> None:
    """Issue 31: "more test videos or more seeds". Seeds right on as many videos, but different ones, spread by the
    test set alone (no model part); seeds all right or all wrong spread by the model alone (a bigger test set would
    not help: its part is 1/n of it)."""
    import polars as pl
    from scipy import stats as scipy_stats

    from tasks.report.spread import seeds_for, spread_rows

    videos = [f"v{i}" for i in range(10)]
    rows = []
    for seed in range(4):  # "shuffled": seed s right on the 5 videos starting at 2s
        suffix = f"-seed{seed}" if seed else ""
        rows += [
            {
                "model": f"shuffled{suffix}",
                "protocol": "1",
                "video_id": video,
                "actual": "a",
                "predicted": "a" if (index - 2 * seed) % 10 < 5 else "b",
            }
            for index, video in enumerate(videos)
        ]
        rows += [
            {
                "model": f"whole{suffix}",
                "protocol": "1",
                "video_id": video,
                "actual": "a",
                "predicted": "a" if seed < 2 else "b",
            }
            for video in videos
        ]
        rows += [
            {
                "model": f"whole{suffix}",
                "protocol": "2",
                "video_id": video,
                "actual": "a",
                "predicted": "b",
            }
            for video in videos
        ]
    found = {row["row"]: row for row in spread_rows(pl.DataFrame(rows))}
    assert (
        found["shuffled"]["sd"] == 0
        and found["shuffled"]["sd_model"] == 0
        and found["shuffled"]["sd_test_set"] > 0
    )
    whole = found["whole"]
    assert whole["sd"] ** 2 == pytest.approx(1 / 3)  # Top-1 1, 1, 0, 0
    assert whole["sd_test_set"] ** 2 == pytest.approx(
        10 * 0.25 / 100 * 4 / 3
    )  # every video right for half the seeds
    assert whole["sd_model"] ** 2 == pytest.approx(1 / 3 - 1 / 30)
    assert whole["half_width"] == pytest.approx(scipy_stats.t.ppf(0.975, 3) * math.sqrt(1 / 3) / 2)
    need = seeds_for(0.08)
    assert (
        scipy_stats.t.ppf(0.975, need - 1) * 0.08 / math.sqrt(need)
        <= 0.03
        < scipy_stats.t.ppf(0.975, need - 2) * 0.08 / math.sqrt(need - 1)
    )
