"""``privhar footage``: a long recording cut into a UCF101-shaped folder, and its bad inputs as one-line errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import av

from tests.conftest import BIN, REPO

RECORDING = REPO / "tests/data/vtest/Walking/v_Walking_g01_c01.avi"


def footage(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "privhar"), "footage", *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_a_recording_becomes_one_second_clips_with_every_second_one_for_testing(
    tmp_path: Path,
) -> None:
    out = tmp_path / "folder"
    cut = footage(
        str(RECORDING), str(out), "--seconds", "1", "--test-every", "2", "--size", "60", "80"
    )
    assert cut.returncode == 0, cut.stderr
    clips = sorted(path.relative_to(out).as_posix() for path in out.glob("Walking/*.avi"))
    assert len(clips) >= 2 and f"footage: {len(clips)} clips of 1 s in {out}" in cut.stderr
    assert (out / "classInd.txt").read_text() == "1 Walking\n"
    test = (out / "testlist01.txt").read_text().split()
    train = [line.split()[0] for line in (out / "trainlist01.txt").read_text().splitlines()]
    assert sorted(train + test) == clips and test == clips[1::2]
    with av.open(str(out / clips[0])) as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        assert len(frames) == round(float(stream.average_rate)) and frames[0].shape == (60, 80, 3)


def test_a_missing_or_too_short_recording_is_one_line(tmp_path: Path) -> None:
    missing = footage(str(tmp_path / "absent.avi"), str(tmp_path / "out"))
    too_short = footage(str(RECORDING), str(tmp_path / "short"), "--seconds", "1000")
    for result, expected in ((missing, "no such recording"), (too_short, "shorter than one clip")):
        assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, (
            result.stderr
        )
        assert expected in result.stderr
    assert not (tmp_path / "short").exists() or not any((tmp_path / "short").rglob("*.avi"))
