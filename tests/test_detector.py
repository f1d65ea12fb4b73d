"""anonymize.source = detector on real footage: a pan-and-zoom clip over scikit-image's astronaut photo.

Runs in the detector environment (mediapipe 0.10.21, `make detector-test`); the core environment
has no mediapipe and checks only that asking for the detector there fails with one line.
"""

from __future__ import annotations

import importlib.util

import cv2
import numpy as np
import pytest

from flows.stage_commands import stage_call
from tasks.anonymize.methods import replace_with_avatars
from tasks.anonymize.people import detect
from tasks.core.errors import PrivharError
from tasks.core.manifest import read_manifest, write_manifest
from tasks.core.params import AnonymizeParams, DecodeParams
from tasks.core.params_files import load_section
from tests.conftest import REPO, write_params

anonymize = stage_call("anonymize")

HAS_MEDIAPIPE = importlib.util.find_spec("mediapipe") is not None


def needs_mediapipe(test):
    """Marked ``detector``: run by ``make detector-test`` in .venv-detector only (skipped anywhere without mediapipe)."""
    skipped = pytest.mark.skipif(
        not HAS_MEDIAPIPE, reason="mediapipe lives in the detector environment"
    )
    return pytest.mark.detector(skipped(test))


FACE = (
    174,
    68,
    278,
    172,
)  # Eileen Collins' face in data.astronaut() (x0, y0, x1, y1 of the 512 x 512 photo)
KEYS = ("person_mask", "skeleton", "joint_depth", "identity", "face_box")
SIZE = (240, 320)  # height, width of the clip


def astronaut_clip(frames: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """(clip (T, 240, 320, 3), the face box in each frame (T, 4)): a camera panning right and zooming in."""
    from skimage import data

    photo = data.astronaut()
    clip, faces = [], []
    for t in range(frames):
        progress = t / (frames - 1)
        width = 500 - 140 * progress  # zoom in
        x0, y0 = 6 + 100 * progress, 20 + 30 * progress  # pan right and down
        scale = SIZE[1] / width
        warp = np.array([[scale, 0, -x0 * scale], [0, scale, -y0 * scale]], np.float32)
        clip.append(
            cv2.warpAffine(
                photo, warp, SIZE[::-1], flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REFLECT
            )
        )
        faces.append(
            [
                (FACE[0] - x0) * scale,
                (FACE[1] - y0) * scale,
                (FACE[2] - x0) * scale,
                (FACE[3] - y0) * scale,
            ]
        )
    return np.stack(clip), np.array(faces, np.float32)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.fixture(scope="module")
def params_path(tmp_path_factory):
    return write_params(tmp_path_factory.mktemp("params"), {"anonymize": {"source": "detector"}})


def detect_people(clip: np.ndarray, keys: tuple[str, ...], params_path) -> dict[str, np.ndarray]:
    """mediapipe's people in frames handed in already decoded (no source video: searched at their own size)."""
    return detect(
        {"video_id": "astronaut", "fps": 4.0},
        clip,
        keys,
        source="detector",
        params=load_section(params_path, "anonymize", AnonymizeParams),
        decode=load_section(params_path, "decode", DecodeParams),
        workdir=REPO,
        identity=7,
    ).arrays


def faces_found(clip: np.ndarray, params_path) -> list[int]:
    """Faces BlazeFace finds per frame: the attacker's view of a clip (not face_blur's boxes, which add the heads that
    the people found imply)."""
    from tasks.anonymize.detector import find_faces

    confidence = load_section(params_path, "anonymize", AnonymizeParams).detector_confidence
    return [len(boxes) for boxes in find_faces(clip, confidence)]


@pytest.fixture(scope="module")
def found(params_path):
    clip, faces = astronaut_clip()
    return clip, faces, detect_people(clip, KEYS, params_path)


@needs_mediapipe
def test_the_person_is_found(found):
    clip, faces, people = found
    for t in range(len(clip)):
        x0, y0, x1, y1 = faces[t].astype(int)
        assert (
            people["person_mask"][t, y0:y1, x0:x1].mean() > 0.8
        )  # the face is inside the person mask
        assert (
            max(iou(box, faces[t]) for box in people["face_box"][t] if np.isfinite(box).all()) > 0.4
        )  # BlazeFace boxes it
        posed = [
            p
            for p in range(people["skeleton"].shape[1])
            if np.isfinite(people["skeleton"][t, p]).all()
        ]
        assert posed and all(
            np.isfinite(people["joint_depth"][t, p]).all() for p in posed
        )  # a pose in every frame
        heads = [people["skeleton"][t, p, 0] for p in posed]
        assert any(
            x0 <= x <= x1 and y0 <= y <= y1 for x, y in heads
        )  # and its head joint lies on the face
    assert people["person_mask"].mean() > 0.2


@needs_mediapipe
def test_the_person_is_removed_and_replaced(found, params_path):
    clip, faces, people = found
    out, public = replace_with_avatars(clip, people, dilation=4, seed=7)
    assert faces_found(clip, params_path) == [1] * len(clip) and faces_found(out, params_path) == [
        0
    ] * len(clip)  # no face left to find
    for t in range(len(clip)):
        x0, y0, x1, y1 = faces[t].astype(int)
        same = (
            np.abs(out[t, y0:y1, x0:x1].astype(int) - clip[t, y0:y1, x0:x1]).max(axis=-1) < 8
        ).mean()
        assert same < 0.05  # no original face pixel survives
        person = people["person_mask"][t] > 0
        assert (
            public[t].mean() > 0.05
            and (public[t].astype(bool) & person).sum() > 0.5 * public[t].sum()
        )  # avatar drawn on them
    outside = cv2.dilate(people["person_mask"].max(axis=0), np.ones((9, 9), np.uint8)) == 0
    assert (out[:, outside] == clip[:, outside]).mean() > 0.5  # the background is the background


@needs_mediapipe
def test_detection_is_deterministic_and_a_kept_graph_answers_as_a_new_one(found, params_path):
    from tasks.anonymize.detector import _graph

    clip, _, people = found
    again = detect_people(clip, KEYS, params_path)  # on the graphs kept since the first search
    _graph.cache_clear()
    fresh = detect_people(clip, KEYS, params_path)  # on graphs built for it
    for other in (again, fresh):
        assert all(np.array_equal(people[key], other[key], equal_nan=True) for key in KEYS)


def decoded_astronaut(folder):
    clip, _ = astronaut_clip(8)
    (folder / "frames").mkdir(parents=True)
    np.save(folder / "frames/astronaut.npy", clip)
    write_manifest(
        [
            {
                "video_id": "astronaut",
                "split": "test",
                "label": 0,
                "action": "wave",
                "path": "frames/astronaut.npy",
                "n_frames": len(clip),
                "fps": 4.0,
                "height": SIZE[0],
                "width": SIZE[1],
            }
        ],
        folder / "manifest.parquet",
    )
    return folder


@needs_mediapipe
def test_the_stage_runs_the_detector_on_footage_without_ground_truth(tmp_path):
    source = decoded_astronaut(tmp_path / "decode")
    # a panning camera moves every pixel: the moving-pixel reference (static camera) holds the avatar copy back
    params = write_params(
        tmp_path,
        {"anonymize": {"source": "detector", "methods": ["avatar", "face_blur", "blackout"]}},
    )
    with pytest.raises(
        PrivharError,
        match=r"every one of the 1 videos is held back \(anonymize.min_coverage = 0.95; "
        r"first: astronaut: coverage 0\.\d+ < anonymize.min_coverage 0.95: avatar changed",
    ):
        anonymize(params_path=params, frames=source, method="avatar", out=tmp_path / "held")
    assert not (tmp_path / "held").exists()
    params = write_params(
        tmp_path,
        {
            "anonymize": {
                "source": "detector",
                "methods": ["avatar", "face_blur", "blackout"],
                "min_coverage": 0.0,
            }
        },
    )
    clip, faces = astronaut_clip(8)
    for method in ("avatar", "face_blur", "blackout"):
        rows = anonymize(params_path=params, frames=source, method=method, out=tmp_path / method)
        protected = np.load(tmp_path / method / rows[0]["path"])
        if (
            method == "face_blur"
        ):  # the paper's blur (kernel 21, σ 10) removes the face's detail, not always the face
            for t, (x0, y0, x1, y1) in enumerate(faces.astype(int)):

                def detail(frame, y0=y0, y1=y1, x0=x0, x1=x1):
                    return np.abs(
                        cv2.Laplacian(
                            cv2.cvtColor(frame[y0:y1, x0:x1], cv2.COLOR_RGB2GRAY), cv2.CV_64F
                        )
                    ).mean()

                assert detail(protected[t]) < 0.25 * detail(clip[t])
        else:
            assert faces_found(protected, params) == [0] * len(protected), method
    assert read_manifest(tmp_path / "avatar/manifest.parquet")[0]["public_fraction"] > 0.05


@pytest.mark.skipif(HAS_MEDIAPIPE, reason="checks the core environment, which has no mediapipe")
def test_without_mediapipe_the_stage_says_how_to_get_it(tmp_path):
    source = decoded_astronaut(tmp_path / "decode")
    params = write_params(
        tmp_path, {"anonymize": {"source": "detector", "methods": ["avatar", "low_res_16x12"]}}
    )
    with pytest.raises(
        PrivharError,
        match=r"needs mediapipe 0\.10\.21: pip install 'privhar\[detector\]'.*or leave "
        r"mediapipe out of anonymize.ensemble",
    ):
        anonymize(params_path=params, frames=source, method="avatar", out=tmp_path / "avatar")
    assert not (tmp_path / "avatar").exists()
    # low_res needs no people: it runs without the detector
    anonymize(
        params_path=params, frames=source, method="low_res_16x12", out=tmp_path / "low_res_16x12"
    )
