"""`privhar dprp INPUT OUTPUT`: one video protected, its privacy report printed as JSON."""

import json

import numpy as np
from click.testing import CliRunner

from privhar.cli import entry_point, main
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


def damaged_files(folder) -> dict[str, str]:
    """Files that are not clips, each with the one line it must get (issue 35: tracebacks, or "interrupted")."""
    import struct

    np.save(folder / "object.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (folder / "empty.npy").write_bytes(b"")
    (folder / "corrupt.npy").write_bytes(b"\x93NUMPY garbage")
    np.save(folder / "whole.npy", np.zeros((4, 8, 8, 3), np.uint8))
    data = (folder / "whole.npy").read_bytes()
    (folder / "truncated.npy").write_bytes(data[: len(data) - 100])
    header = b"{'descr': '|u1', 'fortran_order': False, 'shape': (100000000, 100000, 1000, 3), }"
    header += b" " * (118 - len(header)) + b"\n"
    (folder / "huge.npy").write_bytes(
        b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header
    )
    return {
        "object.npy": "object.npy: holds a (1,) object array; expected a .npy clip (T, H, W, 3) uint8",
        "empty.npy": "empty.npy: empty file; expected a .npy clip (T, H, W, 3) uint8",
        "corrupt.npy": "corrupt.npy: not a readable .npy file",
        "truncated.npy": "truncated.npy: truncated or damaged: its header promises 768 bytes of frames (4, 8, 8, 3)",
        "huge.npy": "huge.npy: truncated or damaged: its header promises 30000000000000000 bytes",
    }


def test_a_damaged_frames_file_is_one_line_naming_it(tmp_path):
    """Every stage reads frames through load_frames: its header is checked before any allocation."""
    import pytest

    from tasks.core.errors import PrivharError
    from tasks.core.storage import load_frames

    for name, message in damaged_files(tmp_path).items():
        with pytest.raises(PrivharError) as refused:
            load_frames(tmp_path / name)
        assert message in str(refused.value) and "\n" not in str(refused.value)
    assert load_frames(tmp_path / "whole.npy").shape == (4, 8, 8, 3)


def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "in.npy", np.zeros((2, 4, 4, 3), np.uint8))
    damaged = damaged_files(tmp_path)
    for argv, message in (
        ([str(tmp_path / "missing.npy")], "missing.npy: file not found"),
        ([str(tmp_path / "in.npy"), "--k", "100"], "k = 100 is invalid: expected 0 < k <= d = 48"),
        ([str(tmp_path / "in.npy"), "--delta", "2"], "delta = 2.0 is invalid"),
        (
            [str(tmp_path / "in.npy"), "--delta", "0.9999", "--k", "4x4x3"],
            "gives the release a total δ of 1.4",
        ),
        ([str(tmp_path / "in.npy"), "--out", str(tmp_path / "in.npy")], "is the input video too"),
        *(([str(tmp_path / name)], message) for name, message in damaged.items()),
    ):
        target = str(tmp_path / "out.npy")
        if "--out" in argv:
            target, argv = argv[2], argv[:1]
        monkeypatch.setattr(
            "sys.argv",
            [
                "privhar",
                "dprp",
                argv[0],
                target,
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
        assert message in error and error.count("\n") == 1, error
    assert not (tmp_path / "out.npy").exists()
    assert np.load(tmp_path / "in.npy").sum() == 0  # never overwritten by its own output


def test_an_epsilon_too_large_to_mean_anything_still_gets_its_report(tmp_path):
    """--epsilon 1e20 was an OverflowError in the Gaussian-DP δ(ε); the report now says what it holds."""
    np.save(tmp_path / "in.npy", np.zeros((2, 4, 4, 3), np.uint8))
    result = CliRunner().invoke(
        main,
        ["dprp", str(tmp_path / "in.npy"), str(tmp_path / "out.npy"), "--epsilon", "1e20"]
        + ["--delta", "1e-5", "--k", "4x4x3", "--seed", "1"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["paper_epsilon"] == 1e20 and 0 < report["epsilon"] <= 1e20


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


def test_a_full_disk_is_one_line_naming_the_output_and_leaves_nothing(tmp_path):
    """Issue 35: ENOSPC named no path and left .out.npy.tmp.npy behind. The kernel refuses the write here
    (RLIMIT_FSIZE, with SIGXFSZ ignored: EFBIG, as a full disk's ENOSPC, at the first write past the limit)."""
    import os
    import resource
    import signal
    import subprocess
    import sys
    from pathlib import Path

    np.save(tmp_path / "in.npy", np.zeros((4, 32, 32, 3), np.uint8))

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    # Nothing else may write under the limit: Python's bytecode cache (importlib writes a .pyc with one write(), so a
    # short one is kept, and every later import of that module in the venv fails: "marshal data too short"), nor
    # coverage's data file under make coverage (its error at exit would be a second stderr line)
    unmeasured = {
        key: value for key, value in os.environ.items() if not key.startswith("COVERAGE_")
    }
    unmeasured["PYTHONDONTWRITEBYTECODE"] = "1"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "privhar"), "dprp", "in.npy", "out.npy"]
        + ["--epsilon", "2", "--delta", "1e-5", "--k", "4x4x3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=unmeasured,
        preexec_fn=small_files,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("privhar: error: out.npy: cannot be written (")
    assert result.stderr.endswith("is the disk full?); nothing was written\n")
    assert result.stderr.count("\n") == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.npy"]


def test_the_largest_epsilon_a_double_holds_gets_a_report_not_a_traceback(tmp_path):
    """Issue 61: --epsilon 1e308 was a 45-line traceback (the Gaussian-DP ε of a μ no double could bound: the search
    for an upper end overflowed to ∞). No finite ε bounds that release: the report says ∞."""
    import math

    np.save(tmp_path / "in.npy", np.zeros((2, 4, 4, 3), np.uint8))
    result = CliRunner().invoke(
        main,
        ["dprp", str(tmp_path / "in.npy"), str(tmp_path / "out.npy"), "--epsilon", "1e308"]
        + ["--delta", "1e-4", "--k", "4x4x3", "--seed", "1"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["paper_epsilon"] == 1e308 and (
        math.isinf(report["epsilon"]) or report["epsilon"] <= 1e308
    )
