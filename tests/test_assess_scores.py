"""The assessment's scores against independent implementations and hand-made cases (papers 000 §4.3, 004 eq. 16-26)."""

from __future__ import annotations

import numpy as np
import pytest
from skimage.metrics import structural_similarity

from tasks.assess.faces import Occurrence
from tasks.assess.fusion import LEVELS, WAVELET, ssim_groups, swt_fuse
from tasks.assess.reid import (
    FaceRecognisers,
    identification_aggr,
    identification_fused,
    identification_ind,
    recognised_flags,
)
from tasks.assess.similarity import mse_similarity, ssim
from tasks.core.scores import (
    class_wise_f1,
    class_wise_map,
    dice,
    frame_hit_rate,
    matches,
    speed_score,
)


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    """The oracle: AP of one binary label, Σ (R_n − R_{n−1}) P_n over the distinct score thresholds, highest first."""
    labels = np.asarray(labels, dtype=bool)
    positives = int(labels.sum())
    if positives == 0:
        return float("nan")
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    ranked_scores, ranked_labels = np.asarray(scores, dtype=np.float64)[order], labels[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(ranked_scores)), len(ranked_scores) - 1]
    true_positives = np.cumsum(ranked_labels)[last_of_tie]
    return float(
        np.sum(np.diff(np.r_[0.0, true_positives / positives]) * true_positives / (last_of_tie + 1))
    )


def macro_f1(labels: np.ndarray, predicted: np.ndarray) -> float:
    """The oracle: 2TP / (2TP + FP + FN) per attribute (0 when it has neither), then the mean."""
    true_pos = (labels & predicted).sum(axis=0)
    denominator = 2 * true_pos + (labels ^ predicted).sum(axis=0)
    return float(
        np.divide(
            2 * true_pos, denominator, out=np.zeros(len(true_pos)), where=denominator > 0
        ).mean()
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cmap_and_f1_equal_their_definitions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.random((240, 7)) < rng.uniform(0.1, 0.6, 7)
    labels[:, 3] = False  # an attribute nobody has: left out of cMAP, F1 0 unless predicted
    scores = np.round(
        rng.random((240, 7)) * 0.6 + labels * rng.uniform(0, 0.5, 7), 2
    )  # rounded: ties occur
    expected = np.nanmean(
        [average_precision(labels[:, column], scores[:, column]) for column in range(7)]
    )
    assert class_wise_map(labels, scores) == pytest.approx(expected, abs=1e-12)
    predicted = scores >= 0.5
    assert class_wise_f1(labels, predicted) == pytest.approx(macro_f1(labels, predicted), abs=1e-12)


def test_cmap_of_a_perfect_ranking_is_one_and_f1_of_nothing_predicted_is_zero() -> None:
    labels = np.array([[1, 0], [0, 1], [1, 1], [0, 0]], dtype=bool)
    assert class_wise_map(labels, labels.astype(float)) == 1.0
    assert class_wise_f1(labels, np.zeros_like(labels)) == 0.0


@pytest.mark.parametrize("channels", [None, 3])
def test_ssim_equals_scikit_image(channels: int | None) -> None:
    rng = np.random.default_rng(4)
    shape = (48, 64) if channels is None else (48, 64, channels)
    first = rng.integers(0, 256, shape, dtype=np.uint8)
    second = np.clip(first.astype(int) + rng.integers(-50, 50, shape), 0, 255).astype(np.uint8)
    expected = structural_similarity(
        first,
        second,
        channel_axis=None if channels is None else 2,
        gaussian_weights=True,
        sigma=1.5,
        use_sample_covariance=False,
        data_range=255,
    )
    assert ssim(first, second) == pytest.approx(expected, abs=1e-9)
    assert ssim(first, first) == pytest.approx(1.0)
    assert mse_similarity(first, first) == 1.0
    assert mse_similarity(np.zeros((4, 4), np.uint8), np.full((4, 4), 255, np.uint8)) == 0.0


def test_dice_criterion_on_hand_made_boxes() -> None:
    assert dice((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0
    assert dice((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(0.5)  # 2·50 / 200
    assert not matches((0, 0, 10, 10), (5, 0, 15, 10))  # > 0.5 strictly (eq. 26)
    assert matches((0, 0, 10, 10), (2, 0, 12, 10))  # 2·80 / 200 = 0.8
    assert dice((0, 0, 10, 10), (20, 20, 30, 30)) == 0.0


def test_frame_hit_rate_follows_eq_20() -> None:
    truth = [(0, 0, 10, 10), (50, 50, 60, 70)]
    assert frame_hit_rate([], []) == 1.0  # no object in the frame: h = 1
    assert frame_hit_rate([(100, 100, 110, 110)], []) == 1.0  # false alarms do not lower h
    assert frame_hit_rate([(1, 0, 11, 10)], truth) == 0.5
    assert frame_hit_rate([(1, 0, 11, 10), (50, 51, 60, 71)], truth) == 1.0
    assert (
        frame_hit_rate([(1, 0, 11, 10), (0, 1, 10, 11)], truth) == 0.5
    )  # two detections of one object: one hit


def test_speed_score_is_capped_at_one() -> None:
    assert speed_score(12.5, 25.0) == 0.5
    assert speed_score(400.0, 25.0) == 1.0


def _faces(identities: int, per_person: int, seed: int) -> tuple[list[np.ndarray], list[int]]:
    """Each person a fixed random texture; each occurrence that texture plus fresh noise."""
    base = np.random.default_rng(99).integers(30, 226, (identities, 24, 24))
    rng = np.random.default_rng(seed)
    faces = [
        np.clip(base[j] + rng.normal(0, 12, (24, 24)), 0, 255).astype(np.uint8)
        for j in range(identities)
        for _ in range(per_person)
    ]
    return faces, [j for j in range(identities) for _ in range(per_person)]


def test_identification_on_raw_faces_is_near_zero_and_on_blacked_out_faces_near_one() -> None:
    train, train_ids = _faces(8, 6, seed=1)
    recognisers = FaceRecognisers(train, train_ids)
    test, test_ids = _faces(8, 5, seed=2)
    occurrences = [Occurrence(f"v{j}", n, j, (0, 0, 1, 1)) for n, j in enumerate(test_ids)]
    raw = recognised_flags(recognisers, occurrences, test)
    assert identification_ind(raw) <= 0.05
    assert identification_aggr(occurrences, raw) == 0.0
    black = [np.zeros_like(face) for face in test]
    hidden = recognised_flags(recognisers, occurrences, black)
    # every recogniser answers something for a black square: at most one constant guess per recogniser is right
    assert identification_ind(hidden) >= 1.0 - 3 / 8
    assert identification_fused(recognisers, occurrences, black, pairs_per_person=10) >= 1.0 - 3 / 8


def test_aggregated_identification_never_exceeds_independent() -> None:
    occurrences = [
        Occurrence("v", t, person, (0, 0, 1, 1)) for person in (0, 1, 2) for t in range(4)
    ]
    flags = [
        t == 0 for person in (0, 1, 2) for t in range(4)
    ]  # each person recognised in one frame of four
    flags[4] = False  # person 1 never
    assert identification_ind(flags) == pytest.approx(1 - 2 / 12)
    assert identification_aggr(occurrences, flags) == pytest.approx(
        1 - 8 / 12
    )  # persons 0 and 2 exposed everywhere
    assert identification_aggr(occurrences, flags) <= identification_ind(flags)


def test_swt_fusion_as_defined_on_a_hand_made_pair() -> None:
    import pywt

    rng = np.random.default_rng(5)
    first = rng.integers(0, 256, (16, 16)).astype(np.uint8)
    second = np.roll(first, 2, axis=1)
    fused = swt_fuse(first, second)
    a, b = (
        pywt.swt2(first.astype(float), WAVELET, level=LEVELS),
        pywt.swt2(second.astype(float), WAVELET, level=LEVELS),
    )
    expected_bands = [
        ((ca + cb) / 2, tuple(np.where(np.abs(x) >= np.abs(y), x, y) for x, y in zip(da, db)))
        for (ca, da), (cb, db) in zip(a, b)
    ]
    assert np.array_equal(
        fused, np.clip(np.rint(pywt.iswt2(expected_bands, WAVELET)), 0, 255).astype(np.uint8)
    )
    assert np.array_equal(swt_fuse(first, first), first)  # fusing an image with itself returns it
    groups = ssim_groups([first, first.copy(), 255 - first], threshold=0.7)
    assert groups == [[0, 1], [2]]


def test_opencv_bundled_face_detector_finds_the_astronauts_face_and_cannot_be_adapted() -> None:
    """assess.detector: opencv (real footage): the Haar cascade on scikit-image's astronaut photograph."""
    from skimage import data

    from tasks.assess.detection import FACE, BundledDetector, detection_rate

    photo = data.astronaut()[
        ::2, ::2
    ].copy()  # 256 × 256: a face of ~48 px, enlarged ×2 as the face detector does
    face = (88.0, 33.0, 136.0, 81.0)  # the cascade's box on the full-size photo, halved
    detector = BundledDetector(FACE)
    assert detection_rate(detector, [photo], [[face]]) == 1.0
    assert detection_rate(detector, [np.zeros_like(photo)], [[face]]) == 0.0
    assert detector.adapt([photo], [[face]]) == 0 and detector.clone() is detector


def test_detections_on_the_enlarged_frame_map_back_to_its_own_pixels() -> None:
    """Faces are searched on a frame enlarged ×2: a 20-px window at (10, 30) there is a 10-px box at (5, 15)."""
    from tasks.assess.detection import BODY, FACE, enlarged_grey, frame_boxes

    frame = np.zeros((48, 64, 3), dtype=np.uint8)
    assert enlarged_grey(frame, FACE).shape == (96, 128) and enlarged_grey(frame, BODY).shape == (
        48,
        64,
    )
    assert frame_boxes(np.array([[10, 30, 20, 20]]), FACE) == [(5.0, 15.0, 15.0, 25.0)]
    assert frame_boxes(np.array([[10, 30, 20, 20]]), BODY) == [(10.0, 30.0, 30.0, 50.0)]
    assert frame_boxes((), FACE) == []  # OpenCV returns an empty tuple when it finds nothing


def test_recognisers_leave_out_fisherfaces_when_people_outnumber_half_the_faces():
    """Issue 31 (200 identities, one face each): OpenCV's Fisherfaces asserts N ≥ 2C − 1; the others still train."""
    rng = np.random.default_rng(3)
    faces = [rng.integers(0, 255, (24, 24), dtype=np.uint8) for _ in range(6)]
    few = FaceRecognisers(faces, [0, 1, 2, 3, 4, 5])
    assert set(few.models) == {"lbph", "eigen"} and few.names_right(faces[2], 2)
    enough = FaceRecognisers(faces, [0, 0, 1, 1, 2, 2])
    assert set(enough.models) == {"lbph", "eigen", "fisher"}


def test_a_face_kept_in_one_frame_counts_its_clip_as_leaking(monkeypatch):
    """Issue 32: faces across time. The detector is planted (a face wherever a frame has a white square) so the counts
    are known: clip a keeps its face in 1 of 3 frames, clip b in none, clip c has no face; a face on avatar pixels is
    the avatar's."""
    import tasks.assess.residual as residual

    def planted(frame, upscale):
        ys, xs = np.nonzero(frame[..., 0] == 255)
        return (
            [(float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))]
            if len(xs)
            else []
        )

    monkeypatch.setattr(residual, "face_boxes", planted)
    face = np.zeros((3, 20, 20, 3), np.uint8)
    face[:, 5:10, 5:10] = 255
    kept_once = face.copy()
    kept_once[1:] = 0  # blurred in frames 1 and 2, missed in frame 0
    raw = {"a": face, "b": face, "c": np.zeros_like(face), "d": face}
    protected = {"a": kept_once, "b": np.zeros_like(face), "c": np.zeros_like(face), "d": face}
    avatar = np.zeros((3, 20, 20), np.uint8)
    avatar[:, 5:10, 5:10] = 1  # d's face sits on avatar pixels: the avatar's face, not the person's
    found = residual.face_leakage(
        raw, protected, {"a": None, "b": None, "c": None, "d": avatar}, ["a", "b", "c", "d"]
    )
    assert found == {
        "face_leak_frames": pytest.approx(1 / 9),
        "face_leak_clips": pytest.approx(1 / 3),
    }
    assert residual.face_leakage(raw, protected, {}, ["c"]) == {
        "face_leak_frames": None,
        "face_leak_clips": None,
    }
    elsewhere = {
        "a": [[(12.0, 12.0, 18.0, 18.0)]] * 3
    }  # annotated faces elsewhere: the detections are background
    assert residual.face_leakage(raw, protected, {}, ["a"], elsewhere) == {
        "face_leak_frames": None,
        "face_leak_clips": None,
    }
    on_face = {"a": [[(5.0, 5.0, 10.0, 10.0)]] * 3}
    assert residual.face_leakage(raw, protected, {}, ["a"], on_face)[
        "face_leak_frames"
    ] == pytest.approx(1 / 3)


def test_the_bundled_detectors_find_the_same_boxes_from_threads_at_once() -> None:
    """Two threads detecting with one cascade failed make run's face_blur (OpenCV's cascade keeps its scan's scales in
    the object): each thread has its own detector, and finds what one thread alone finds."""
    from concurrent.futures import ThreadPoolExecutor

    from skimage import data

    from tasks.people_finding.opencv_detectors import face_boxes, people_boxes

    photo = data.astronaut()[::2, ::2].copy()
    frames = [photo, photo[::-1].copy(), photo[:, ::-1].copy()] * 3
    alone = [(face_boxes(frame, 2.0), people_boxes(frame, 1.0)) for frame in frames]
    with ThreadPoolExecutor(4) as pool:
        together = list(
            pool.map(lambda frame: (face_boxes(frame, 2.0), people_boxes(frame, 1.0)), frames)
        )
    assert together == alone and any(faces for faces, _ in alone)
