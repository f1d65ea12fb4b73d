"""The comparison table of private training: cells where they belong, ε from the ledgers, bad input in one line."""

from __future__ import annotations

import csv
import json
import math

import pytest

from tasks.core.errors import PrivharError
from tasks.core.tables import compact
from tasks.private.table import accuracy_table, collect, epsilon_curves, markdown, plot

LEDGER_FIELDS = [
    "model",
    "target_epsilon",
    "epsilon",
    "delta",
    "noise_multiplier",
    "steps",
    "accountant",
    "unit",
    "relation",
    "epsilon_person_max",
    "paper_epsilon",
]


@pytest.fixture
def reports(tmp_path):
    metrics = {
        "baseline": {"top1": 0.8, "top5": 1.0, "test_videos": 200},
        "dprp-eps8.0": {
            "top1": 0.1,
            "top5": 0.5,
            "top1_protocol2": 0.12,
            "top5_protocol2": 0.5,
            "test_videos": 200,
        },
    }
    for method, scores in (("dp_sgd", (0.6, 0.7)), ("maskdp_real", (0.65, 0.72))):
        with (tmp_path / f"{method}.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, LEDGER_FIELDS)
            writer.writeheader()
            writer.writerow(
                {
                    "model": f"{method}-eps2.0",
                    "target_epsilon": 2.0,
                    "epsilon": 1.9987,
                    "delta": 1e-4,
                    "noise_multiplier": 1.7,
                    "steps": 300,
                    "accountant": "rdp (Opacus), q=0.1, sigma=1.7, steps=300",
                    "unit": "video",
                    "relation": "replace-one" if method == "maskdp_real" else "add/remove",
                    "epsilon_person_max": 93.5,
                    "paper_epsilon": 0.98 if method == "maskdp_real" else "",
                }
            )
            writer.writerow(
                {
                    "model": f"{method}-epsinf",
                    "target_epsilon": "inf",
                    "epsilon": "inf",
                    "delta": 0.0,
                    "noise_multiplier": 0.0,
                    "steps": 300,
                    "accountant": "none (non-private training)",
                }
            )
        metrics[f"{method}-eps2.0"] = {"top1": scores[0], "top5": 1.0, "test_videos": 200}
        metrics[f"{method}-epsinf"] = {"top1": scores[1], "top5": 1.0, "test_videos": 200}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    (tmp_path / "baseline.json").write_text(
        json.dumps({"epsilon": "inf", "delta": 0.0, "accountant": "none (non-private training)"})
    )
    (tmp_path / "dprp-eps8.0.json").write_text(
        json.dumps(
            {
                "epsilon": 65.6,
                "delta": 1e-4,
                "accountant": "Video-DPRP (Theorems 3-4)",
                "unit": "frame",
                "relation": "replace-one",
                "paper_epsilon": 8.0,
            }
        )
    )
    return tmp_path


def gather(folder, **overrides):
    arguments = {
        "metrics_path": folder / "metrics.json",
        "ledgers": folder,
        "train_reports": folder,
        "methods": ["dp_sgd", "maskdp_real"],
        "dprp_epsilons": [8.0],
        "clips_per_video": 3,
    }
    return collect(**{**arguments, **overrides})


def test_cells_sit_under_their_target_epsilon(reports):
    records = gather(reports)
    table = compact(accuracy_table(records, "top1")).splitlines()
    # the Video-DPRP copy of dprp.epsilons' 8 sits at the ε its noise gives for its unit (65.6), not the paper's 8
    assert table[0] == "| data | training | ε = 2 | ε = 65.6 | ε = ∞ |"
    assert "| real | DP-SGD | 60.0 | — | 70.0 |" in table
    assert "| Video-DPRP copy | Video-DPRP | — | 10.0 | — |" in table
    assert "| real | non-private, full fine-tuning | — | — | 80.0 |" in table
    assert compact(accuracy_table(records, "top1_protocol2")).splitlines()[2:] == [
        "| Video-DPRP copy | Video-DPRP | — | 12.0 | — |"
    ]


def test_the_ledger_carries_the_achieved_epsilon_and_its_accountant(reports):
    records = gather(reports)
    achieved = {record["model"]: record for record in records}
    assert achieved["dp_sgd-eps2.0"]["epsilon"] == pytest.approx(1.9987) and math.isinf(
        achieved["baseline"]["epsilon"]
    )
    text = compact(markdown(records))
    assert (
        "| dp_sgd-eps2.0 | 2 | 1.999 | video | add/remove | 93.5 |  | 0.0001 | rdp (Opacus), q=0.1, sigma=1.7, steps=300 |"
        in text
    )
    assert (
        "| maskdp_real-eps2.0 | 2 | 1.999 | video | replace-one | 93.5 | 0.98 | 0.0001 |" in text
    )  # the paper's number beside
    assert (
        "| dprp-eps8.0 | 65.6 | 65.6 | frame | replace-one |  | 8 | 0.0001 | Video-DPRP (Theorems 3-4) |"
        in text
    )
    assert "not private for them" in text  # the maskdp_real footnote
    assert plot(records)[:4] == b"\x89PNG"


def test_missing_inputs_are_one_line(reports):
    with pytest.raises(
        PrivharError, match=r"multiclip.csv: not found; expected the train-private stage's ledger"
    ):
        gather(reports, methods=["multiclip"])
    metrics = json.loads((reports / "metrics.json").read_text())
    del metrics["dp_sgd-eps2.0"]
    (reports / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(PrivharError, match=r"no scores for model 'dp_sgd-eps2.0'; rerun evaluate"):
        gather(reports)


def test_epsilon_curves_give_each_method_its_interval_for_dvc_plots(reports):
    curves = epsilon_curves(gather(reports), ["dp_sgd", "maskdp_real", "multiclip"])
    assert curves.columns == ["method", "target_epsilon", "top1", "low", "high"]
    assert [row[:3] for row in curves.rows()] == [
        ("dp_sgd", 2.0, 0.6),
        ("maskdp_real", 2.0, 0.65),
    ]  # ε = ∞ is not on the chart; multiclip did not run
    assert all(low <= top1 <= high for _, _, top1, low, high in curves.rows())
