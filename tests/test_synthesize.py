"""The embedded dataset: real encoded videos, ground truth that matches them, determinism."""

import hashlib
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from flows.stage_commands import stage_call
from tasks.core.manifest import read_manifest
from tasks.core.params import ACTIONS, SynthesizeParams
from tasks.core.params_files import load_section
from tasks.synthesize import plan_videos
from tasks.synthetic.actions import ACTIONS as ACTION_REGISTRY
from tasks.synthetic.actions import MotionStyle
from tasks.synthetic.body import Build, forward_kinematics
from tasks.synthetic.identities import make_identity
from tests.conftest import write_params

synthesize = stage_call("synthesize")


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_manifest_rows_and_attributes(tiny_synthetic):
    rows = read_manifest(tiny_synthetic / "data/synthesize/manifest.parquet")
    assert len(rows) == 12
    assert {row["action"] for row in rows} == {"walk", "wave", "squat"}
    assert {row["split"] for row in rows} == {"train", "test"}
    for action in ("walk", "wave", "squat"):
        assert (
            sum(row["split"] == "test" for row in rows if row["action"] == action) == 1
        )  # round(0.25 * 4)
    for row in rows:
        assert row["attr_skin_tone"] in {"light", "medium", "dark"}
        assert row["attr_gender"] in {"feminine", "masculine"}
        assert row["attr_multi_person"] == (len(row["identities"]) > 1)
    assert any(row["attr_multi_person"] for row in rows)
    identities = pq.read_table(tiny_synthetic / "data/synthesize/identities.parquet").to_pylist()
    assert len(identities) == 4


def test_videos_are_real_mpeg4_files_matching_the_manifest(tiny_synthetic):
    folder = tiny_synthetic / "data/synthesize"
    row = read_manifest(folder / "manifest.parquet")[0]
    with av.open(str(folder / row["path"])) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "mpeg4"
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    assert len(frames) == row["n_frames"]
    assert frames[0].shape == (row["height"], row["width"], 3)


def test_ground_truth_covers_the_people(tiny_synthetic):
    folder = tiny_synthetic / "data/synthesize"
    for row in read_manifest(folder / "manifest.parquet"):
        with np.load(folder / row["annotations"]) as truth:
            mask, body, skeleton = truth["person_mask"], truth["body_box"], truth["skeleton"]
            assert mask.shape == (row["n_frames"], row["height"], row["width"])
            assert list(truth["identity"]) == row["identities"]
            people = len(row["identities"])
            assert body.shape == (row["n_frames"], people, 4) and skeleton.shape == (
                row["n_frames"],
                people,
                15,
                2,
            )
            primary = mask == 1
            assert primary.any(axis=(1, 2)).all(), "the acting person is visible in every frame"
            ys, xs = np.nonzero(primary[0])
            assert body[0, 0].tolist() == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]


def test_same_seed_gives_byte_identical_output(tmp_path, tiny_synthetic):
    params = write_params(tmp_path)
    synthesize(params_path=params, out=tmp_path / "again")
    assert digest(tmp_path / "again") == digest(tiny_synthetic / "data/synthesize")


def test_another_seed_changes_the_videos(tmp_path, tiny_synthetic):
    params = write_params(tmp_path, {"base": {"seed": 7, "workers": 1}})
    synthesize(params_path=params, out=tmp_path / "other")
    assert (
        digest(tmp_path / "other")["videos/walk_000.avi"]
        != digest(tiny_synthetic / "data/synthesize")["videos/walk_000.avi"]
    )


def test_split_is_stratified_and_seeded(tmp_path):
    params = load_section(
        write_params(tmp_path, {"synthesize": {"videos_per_action": 20}}),
        "synthesize",
        SynthesizeParams,
    )
    jobs = plan_videos(1, params)
    for action in params.actions:
        assert sum(job.split == "test" for job in jobs if job.action == action) == 5
    assert [job.split for job in jobs] == [job.split for job in plan_videos(1, params)]


@pytest.mark.parametrize("action", ACTIONS)
def test_every_action_moves_differently(action):
    """Each class has its own joint trajectory: no two actions share a motion."""
    style = MotionStyle(phase=0.1, onset=0.2)

    def trajectory(name: str) -> np.ndarray:
        return np.stack(
            [
                forward_kinematics(ACTION_REGISTRY[name](t, style), Build())
                for t in np.linspace(0, 2, 24)
            ]
        )

    mine = trajectory(action)
    assert np.ptp(mine, axis=0).max() > 0.05, "the body moves"
    for other in ACTIONS:
        if other != action:
            assert np.abs(mine - trajectory(other)).max() > 0.05


def test_identities_are_fixed_and_distinct():
    people = [make_identity(3, index) for index in range(16)]
    assert make_identity(3, 5) == people[5]
    faces = {
        (round(p.face.eye_spacing, 3), round(p.face.mouth_width, 3), p.face.glasses) for p in people
    }
    assert len(faces) == 16
    assert {p.gender for p in people} == {"feminine", "masculine"}
    assert {p.skin_tone for p in people} == {"light", "medium", "dark"}


def test_preview_has_one_strip_per_action_and_refuses_when_nothing_is_readable(
    tiny_synthetic, tmp_path
):
    from tasks.core.errors import PrivharError
    from tasks.synthesize import preview

    rows = read_manifest(tiny_synthetic / "data/synthesize/manifest.parquet")
    image = preview(rows, tiny_synthetic / "data/synthesize", height=48)
    assert image.shape[0] == 3 * 48  # walk, wave, squat
    with pytest.raises(PrivharError, match="no readable video to preview"):
        preview(rows, tmp_path)
