"""`privhar dprp INPUT OUTPUT`: one video protected, its privacy report printed as JSON."""

import json

import numpy as np
from click.testing import CliRunner

from flows.cli import entry_point, main
from tasks.privacy.dprp_calibration import noise_scales


def test_protects_a_clip_and_reports_its_privacy(tmp_path):
    frames = np.random.default_rng(0).integers(0, 256, (6, 12, 16, 3), dtype=np.uint8)
    np.save(tmp_path / "in.npy", frames)
    result = CliRunner().invoke(
        main,
        [
            "dprp",
            str(tmp_path / "in.npy"),
            str(tmp_path / "out.npy"),
            "--epsilon",
            "5",
            "--delta",
            "1e-5",
            "--k",
            "4x4x3",
            "--rank",
            "0.5",
            "--seed",
            "7",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    expected = noise_scales(
        epsilon=5, delta=1e-5, budget_split=0.8, k=48, d=576, calibration="paper", neighbour="frame"
    )
    assert (report["k"], report["rank"], report["d"]) == (48, 24, 576)
    assert (report["sigma1"], report["sigma2"]) == (expected.sigma1, expected.sigma2)
    out = np.load(tmp_path / "out.npy")
    assert out.shape == frames.shape and out.dtype == np.uint8
    again = CliRunner().invoke(
        main,
        [
            "dprp",
            str(tmp_path / "in.npy"),
            str(tmp_path / "again.npy"),
            "--epsilon",
            "5",
            "--delta",
            "1e-5",
            "--k",
            "4x4x3",
            "--rank",
            "0.5",
            "--seed",
            "7",
        ],
    )
    assert again.exit_code == 0 and np.load(tmp_path / "again.npy").tobytes() == out.tobytes()


def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "in.npy", np.zeros((2, 4, 4, 3), np.uint8))
    for argv, message in (
        ([str(tmp_path / "missing.npy")], "missing.npy: file not found"),
        ([str(tmp_path / "in.npy"), "--k", "100"], "k = 100 is invalid: expected 0 < k <= d = 48"),
        ([str(tmp_path / "in.npy"), "--delta", "2"], "delta = 2.0 is invalid"),
    ):
        monkeypatch.setattr(
            "sys.argv",
            [
                "privhar",
                "dprp",
                argv[0],
                str(tmp_path / "out.npy"),
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                *argv[1:],
            ],
        )
        try:
            entry_point()
        except SystemExit as stop:
            assert stop.code == 1  # bad input: status 1 (2 is click's, for usage errors)
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1
    assert not (tmp_path / "out.npy").exists()


def test_bench_writes_its_record(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "dprp",
            "--frames",
            "4",
            "--size",
            "16",
            "24",
            "--k",
            "32",
            "--out",
            str(out),
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert (
        record["configuration"]["d"] == 16 * 24 * 3
        and record["machine"]["matmul_gflops_float32"] > 0
    )
    for mode in ("per_video", "shared"):
        assert record[mode]["seconds"] >= 0 and record[mode]["fraction_of_matmul_rate"] >= 0
    assert (
        record["machine"]["device"] == "cpu" and record["machine"]["memory_gib"] > 0
    )  # --device cpu named below


def test_bench_names_the_device_it_ran_on_and_refuses_one_that_is_not_there(tmp_path):
    import torch

    out = tmp_path / "bench.json"
    args = [
        "bench",
        "dprp",
        "--frames",
        "2",
        "--size",
        "8",
        "8",
        "--k",
        "16",
        "--out",
        str(out),
        "--device",
    ]
    assert CliRunner().invoke(main, [*args, "cpu"]).exit_code == 0
    assert json.loads(out.read_text())["machine"]["device"] == "cpu"
    if not torch.cuda.is_available():
        result = CliRunner().invoke(main, [*args, "cuda"])
        assert result.exit_code != 0 and "--device = 'cuda': torch sees no CUDA GPU" in str(
            result.exception
        )
