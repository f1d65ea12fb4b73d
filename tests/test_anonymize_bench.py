"""``privhar bench anonymize``'s faces across time: each protection's faces found again, counted against the raw."""

from __future__ import annotations

import yaml

from benchmarks.anonymize import face_leakage_rows, sources
from flows.stage_commands import stage_call
from tests.conftest import write_params

decode = stage_call("decode")


def test_face_leakage_rows_count_raw_faces_and_the_share_kept(tiny_synthetic, tmp_path):
    path = write_params(
        tmp_path, {"decode": {"frame_size": [72, 96]}}
    )  # the synthesized size: faces Haar can find
    decode(params_path=path, source=tiny_synthetic / "data" / "synthesize", out=tmp_path / "decode")
    params = yaml.safe_load(path.read_text())
    available = sources([name for name in params["anonymize"]["ensemble"] if name != "mediapipe"])
    rows = face_leakage_rows(params, tmp_path, available, methods=("face_blur", "none"))
    assert [row["method"] for row in rows] == ["anonymize: face_blur", "anonymize: none"]
    blurred, untouched = rows
    assert blurred["frames"] == untouched["frames"] > 0
    assert 0 < blurred["frames_with_a_raw_face"] <= blurred["frames"]
    assert (
        untouched["face_leak_frames"] == untouched["face_leak_clips"] == 1.0
    )  # nothing changed: every face kept
    assert 0.0 <= blurred["face_leak_frames"] < 1.0


def test_the_memory_benchmark_measures_each_methods_own_process(tmp_path):
    """`privhar bench protect-memory` (issue 82) at a size the test can afford: one record per size and method, each a
    positive peak of the protect process (a Python process holds tens of megabytes at least)."""
    import json

    from benchmarks.protect_memory import run_memory_bench
    from tests.test_protect_cli import WALKING

    record = run_memory_bench(
        WALKING,
        ["blackout"],
        tmp_path / "m.json",
        sizes=((48, 64),),
        seconds=0.5,
        fps=10,
        detectors="motion",
    )
    assert json.loads((tmp_path / "m.json").read_text()) == record
    assert 0.02 < record["sizes"]["64x48"]["blackout"]["peak_gb"] < 5.0
