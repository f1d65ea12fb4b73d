"""The anonymize stage's obfuscation baselines on tiny decoded clips with ground truth."""

import cv2
import numpy as np
import pytest

from flows.stage_commands import stage_call
from tasks.anonymize.avatars import CATALOGUE, avatar_for, render
from tasks.anonymize.inpaint import background_plate
from tasks.anonymize.methods import PROTECT, avatars_at, replace_with_avatars
from tasks.anonymize.obfuscate import dilate, low_res_size
from tasks.core.anonymize_catalogue import CATALOGUE as ANONYMIZE_CATALOGUE
from tasks.core.anonymize_catalogue import method_of
from tasks.core.errors import PrivharError
from tasks.core.manifest import read_manifest, resolve_path
from tests.conftest import write_params

anonymize = stage_call("anonymize")

pytestmark = pytest.mark.detector  # make detector-test runs this file, in .venv-detector only

METHODS = ["avatar", "face_blur", "low_res_16x12", "blackout", "none"]


@pytest.fixture(scope="module")
def outputs(tiny_decoded, tmp_path_factory):
    folder = tmp_path_factory.mktemp("anonymize")
    params = write_params(folder, {"anonymize": {"methods": METHODS}})
    results = {
        method: anonymize(
            params_path=params,
            frames=tiny_decoded / "data/decode",
            method=method,
            out=folder / method,
        )
        for method in METHODS
    }
    return folder, params, results


def pairs(outputs, tiny_decoded, method):
    """(source row, protected row, raw clip, protected clip, annotations) per video."""
    folder, _, results = outputs
    decoded = tiny_decoded / "data/decode"
    source = {row["video_id"]: row for row in read_manifest(decoded / "manifest.parquet")}
    for row in results[method]:
        raw = np.load(resolve_path(source[row["video_id"]]["path"], decoded))
        protected = np.load(folder / method / row["path"])
        with np.load(
            resolve_path(row["annotations"], folder / method)
        ) as annotations:  # rebased, still found
            yield source[row["video_id"]], row, raw, protected, dict(annotations)


def test_every_method_keeps_layout_and_manifest(outputs, tiny_decoded):
    for method in METHODS:
        rows = read_manifest(outputs[0] / method / "manifest.parquet")
        assert len(rows) == 12 and {row["anonymize_method"] for row in rows} == {method}
        for _, _, raw, protected, _ in pairs(outputs, tiny_decoded, method):
            assert protected.shape == raw.shape and protected.dtype == np.uint8


def test_blackout_fills_the_dilated_person_mask_and_nothing_else(outputs, tiny_decoded):
    folder = outputs[0]
    for _, row, raw, protected, annotations in pairs(outputs, tiny_decoded, "blackout"):
        covered = dilate(annotations["person_mask"], 2).astype(bool)
        with np.load(folder / "blackout" / row["mask"]) as stored:
            public = stored["public"]
        assert np.array_equal(public.astype(bool), covered) and row["public_fraction"] == round(
            float(covered.mean()), 6
        )
        assert (protected[covered] == 0).all() and np.array_equal(
            protected[~covered], raw[~covered]
        )
        assert not (
            raw[annotations["person_mask"] > 0] == protected[annotations["person_mask"] > 0]
        ).all()


def test_face_blur_changes_faces_only(outputs, tiny_decoded):
    changed_faces = 0
    for _, row, raw, protected, annotations in pairs(outputs, tiny_decoded, "face_blur"):
        inside = np.zeros(raw.shape[:3], bool)
        for t, boxes in enumerate(annotations["face_box"]):
            for x0, y0, x1, y1 in boxes:
                inside[
                    t,
                    max(0, int(np.floor(y0))) : int(np.ceil(y1)),
                    max(0, int(np.floor(x0))) : int(np.ceil(x1)),
                ] = True
        assert (
            np.array_equal(protected[~inside], raw[~inside])
            and row["mask"] == ""
            and row["public_fraction"] == 0
        )
        changed_faces += int((protected[inside] != raw[inside]).any())
    assert changed_faces >= 10  # of 12 videos: a face in view is blurred


def test_low_res_keeps_no_detail_beyond_its_size(outputs, tiny_decoded):
    assert low_res_size("low_res_16x12") == (16, 12)
    for _, _, raw, protected, _ in pairs(outputs, tiny_decoded, "low_res_16x12"):

        def detail(clip):  # energy of the Laplacian: fine detail
            return np.mean(
                [
                    cv2.Laplacian(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), cv2.CV_64F).var()
                    for frame in clip
                ]
            )

        assert detail(protected) < 0.2 * detail(raw)


def test_none_passes_clips_through(outputs, tiny_decoded):
    assert all(
        np.array_equal(raw, protected)
        for _, _, raw, protected, _ in pairs(outputs, tiny_decoded, "none")
    )


def test_same_input_same_bytes(outputs, tiny_decoded, tmp_path):
    folder, params, results = outputs
    again = anonymize(
        params_path=params,
        frames=tiny_decoded / "data/decode",
        method="blackout",
        out=tmp_path / "again",
    )
    assert again == results["blackout"]
    assert (tmp_path / "again/manifest.parquet").read_bytes() == (
        folder / "blackout/manifest.parquet"
    ).read_bytes()
    first = sorted((folder / "blackout/masks").iterdir())[0]
    assert (tmp_path / "again/masks" / first.name).read_bytes() == first.read_bytes()


def test_bad_input_is_one_line(outputs, tiny_decoded, tmp_path):
    _, params, _ = outputs
    with pytest.raises(
        PrivharError, match=r"method 'low_res_32x24' is not one of anonymize.methods"
    ):
        anonymize(
            params_path=params,
            frames=tiny_decoded / "data/decode",
            method="low_res_32x24",
            out=tmp_path / "x",
        )
    # ground truth missing: a decoded copy whose manifest points nowhere
    import shutil

    from tasks.core.manifest import write_manifest

    copy = tmp_path / "decode"
    shutil.copytree(tiny_decoded / "data/decode", copy)
    rows = read_manifest(copy / "manifest.parquet")
    rows[3]["annotations"] = "annotations/gone.npz"
    write_manifest(rows, copy / "manifest.parquet")
    with pytest.raises(
        PrivharError, match=rf"video {rows[3]['video_id']} has no ground-truth annotations"
    ):
        anonymize(params_path=params, frames=copy, method="face_blur", out=tmp_path / "y")
    assert not (tmp_path / "y").exists()
    passed = anonymize(params_path=params, frames=copy, method="low_res_16x12", out=tmp_path / "w")
    assert len(passed) == len(rows)  # a method that needs no ground truth runs without it
    bad = write_params(tmp_path, {"anonymize": {"face_blur_kernel": 20}})
    with pytest.raises(PrivharError, match="face_blur_kernel"):
        anonymize(
            params_path=bad,
            frames=tiny_decoded / "data/decode",
            method="face_blur",
            out=tmp_path / "z",
        )


def first_annotations(tiny_decoded, persons: int = 1):
    decoded = tiny_decoded / "data/decode"
    for row in read_manifest(decoded / "manifest.parquet"):
        with np.load(resolve_path(row["annotations"], decoded)) as stored:
            if len(stored["identity"]) == persons:
                return np.load(resolve_path(row["path"], decoded)), dict(stored)
    pytest.skip(f"no video with {persons} people in the tiny set")


def test_catalogue_has_at_least_32_distinct_avatars_fixed_per_identity():
    looks = {
        (
            a.torso,
            a.accent,
            a.limbs,
            a.head,
            a.pattern,
            a.limb_width,
            a.head_radius,
            a.shoulder_scale,
        )
        for a in CATALOGUE
    }
    assert len(looks) == len(CATALOGUE) >= 32
    assert all(avatar_for(2026, identity) == avatar_for(2026, identity) for identity in range(16))
    assert (
        len({avatar_for(2026, identity).index for identity in range(16)}) >= 10
    )  # identities get different avatars
    assert [avatar_for(1, i).index for i in range(8)] != [
        avatar_for(2, i).index for i in range(8)
    ]  # the seed decides


def test_public_mask_is_exactly_the_rendered_pixels(tiny_decoded):
    _, truth = first_annotations(tiny_decoded)
    people = [(truth["skeleton"][0, 0], truth["joint_depth"][0, 0], CATALOGUE[3])]
    shape = truth["person_mask"].shape[1:] + (3,)
    black, coverage_black = render(np.zeros(shape, np.uint8), people)
    white, coverage_white = render(np.full(shape, 255, np.uint8), people)
    assert np.array_equal(coverage_black, coverage_white) and (coverage_black > 0).mean() > 0.02
    rendered = (black != 0).any(-1) | (white != 255).any(
        -1
    )  # pixels the avatar changed on either background
    assert np.array_equal(rendered, coverage_black > 0)


def test_no_pixel_of_the_person_survives(tiny_decoded):
    frames, truth = first_annotations(tiny_decoded)
    out, public = replace_with_avatars(frames, truth, dilation=2, seed=7)
    person = truth["person_mask"] > 0
    disguised = frames.copy()
    disguised[person] = np.random.default_rng(0).integers(
        0, 256, (int(person.sum()), 3), dtype=np.uint8
    )
    again, public_again = replace_with_avatars(disguised, truth, dilation=2, seed=7)
    assert np.array_equal(out, again) and np.array_equal(
        public, public_again
    )  # the output never reads them
    plate, _ = background_plate(frames, dilate(truth["person_mask"], 2))
    coverage = np.stack(
        [render(frame, avatars_at(truth, 7, t))[1] for t, frame in enumerate(frames)]
    )
    hidden = person & (coverage == 0)  # person pixels no avatar touches: background plate there
    assert np.array_equal(out[hidden], np.broadcast_to(plate, frames.shape)[hidden])


def test_the_public_mask_is_the_fully_covered_pixels_and_holds_nothing_of_the_real_clip(
    tiny_decoded,
):
    """Issue 58: an avatar's anti-aliased edge blends the real background in, so only pixels of full coverage are
    public. The same copy made from the clip with every real pixel changed (+40 grey levels) keeps its public mask
    and its public pixels byte for byte; at ``coverage > 0`` (the old mask) the public pixels moved."""
    frames, truth = first_annotations(tiny_decoded)
    out, public = replace_with_avatars(frames, truth, dilation=2, seed=7)
    brighter = ((frames.astype(np.int64) + 40) % 256).astype(np.uint8)
    again, public_again = replace_with_avatars(brighter, truth, dilation=2, seed=7)
    inside = public.astype(bool)
    assert inside.mean() > 0.01 and np.array_equal(public, public_again)
    assert np.array_equal(out[inside], again[inside])
    coverage = np.stack(
        [render(frame, avatars_at(truth, 7, t))[1] for t, frame in enumerate(frames)]
    )
    assert np.array_equal(inside, coverage == 255)
    touched = coverage > 0  # the old public mask: its partly covered pixels move with the real clip
    assert touched.sum() > inside.sum() and not np.array_equal(out[touched], again[touched])


def test_edge_cases_render(tiny_decoded):
    frames, truth = first_annotations(tiny_decoded)
    background = frames[0]
    assert np.array_equal(render(background, [])[0], background)  # no person: the frame as it is
    skeleton = truth["skeleton"][0, 0]
    points = skeleton + np.array(
        [background.shape[1] - skeleton[:, 0].mean(), 0], np.float32
    )  # centred on the border
    frame, coverage = render(background, [(points, truth["joint_depth"][0, 0], CATALOGUE[0])])
    assert frame.shape == background.shape and 0 < (coverage > 0).mean() < 0.5
    one = {
        key: (value[:1] if value.ndim and key != "identity" else value)
        for key, value in truth.items()
    }
    out, public = replace_with_avatars(
        frames[:1], one, dilation=2, seed=1
    )  # one frame: the plate is inpainted
    assert out.shape == frames[:1].shape and public.any()


def test_two_people_get_two_avatars_ordered_by_depth(tiny_decoded):
    frames, truth = first_annotations(tiny_decoded, persons=2)
    out, public = replace_with_avatars(frames, truth, dilation=2, seed=3)
    assert out.shape == frames.shape and public.mean() > 0
    near = [
        (
            truth["skeleton"][0, p],
            truth["joint_depth"][0, p] + (10.0 if p == 1 else 0.0),
            CATALOGUE[p],
        )
        for p in (0, 1)
    ]
    far = [
        (
            truth["skeleton"][0, p],
            truth["joint_depth"][0, p] + (10.0 if p == 0 else 0.0),
            CATALOGUE[p],
        )
        for p in (0, 1)
    ]
    first, _ = render(frames[0], near)
    second, _ = render(frames[0], far)
    overlap = (render(frames[0], near[:1])[1] > 0) & (render(frames[0], near[1:])[1] > 0)
    if overlap.any():  # where they overlap, the nearer one is on top
        assert not np.array_equal(first[overlap], second[overlap])


def test_avatar_output_records_its_public_mask(outputs):
    folder, _, results = outputs
    for row in results["avatar"]:
        with np.load(folder / "avatar" / row["mask"]) as stored:
            assert row["public_fraction"] == round(float(stored["public"].mean()), 6)
    assert np.mean([row["public_fraction"] for row in results["avatar"]]) > 0.02


def test_a_face_the_annotations_miss_in_one_frame_is_still_blurred_there(tiny_decoded, tmp_path):
    """Issue 32: fail closed across time. A face box planted missing in one frame (as a detector misses a face) is
    followed through it: the face there is blurred as in its neighbours, never released sharp. (Without the fill the
    frame would be untouched: blur_faces skips a frame without a box.)"""
    import shutil

    project = tmp_path / "project"
    shutil.copytree(tiny_decoded / "data", project / "data")
    decoded = project / "data/decode"
    rows = read_manifest(decoded / "manifest.parquet")
    for row in rows:  # the first clip whose person's face is in view in frames 1, 2 and 3 (of 4)
        path = resolve_path(row["annotations"], decoded)
        with np.load(path) as stored:
            annotations = dict(stored)
        if annotations["face_visible"][1:4, 0].all():
            break
    truth = annotations["face_box"][:, 0].copy()
    annotations["face_box"][2, 0] = np.nan  # planted: no face in frame 2
    np.savez(path, **annotations)
    params = write_params(tmp_path, {"anonymize": {"methods": ["face_blur"]}})
    released = {
        r["video_id"]: r
        for r in anonymize(
            params_path=params, frames=decoded, method="face_blur", out=tmp_path / "out"
        )
    }
    raw = np.load(resolve_path(row["path"], decoded))
    protected = np.load(tmp_path / "out" / released[row["video_id"]]["path"])

    def changed(t: int) -> float:
        """The share of frame t's true face pixels that the protected clip changed."""
        x0, y0 = (max(0, int(np.ceil(value))) for value in truth[t][:2])
        x1, y1 = (int(np.floor(value)) for value in truth[t][2:])
        return float((protected[t, y0:y1, x0:x1] != raw[t, y0:y1, x0:x1]).any(axis=-1).mean())

    assert changed(2) >= 0.8 * min(changed(1), changed(3)) > 0


def test_two_people_passing_each_other_keep_their_own_track_and_avatar():
    """Detections come left to right; as two walkers pass, the left one becomes the right one. Linked across frames,
    each keeps one column of the pose arrays, so one identity and one avatar (issue 32: avatars swapped every frame)."""
    from tasks.anonymize.tracks import by_track, track_numbers

    walker_a = [(0, 0, 10, 30), (8, 0, 18, 30), (16, 0, 26, 30), (24, 0, 34, 30)]  # walks right
    walker_b = [(30, 0, 40, 30), (22, 0, 32, 30), (14, 0, 24, 30), (6, 0, 16, 30)]  # walks left
    frames = [
        sorted([a, b]) for a, b in zip(walker_a, walker_b)
    ]  # left to right, as the detector lists them
    numbers = track_numbers(frames)
    assert numbers == [[0, 1], [0, 1], [1, 0], [1, 0]]  # from frame 2 the left box is walker b
    joints = np.array(
        [[[box[0]] for box in frame] for frame in frames], np.float32
    )  # (T, P, 1): each box's left edge
    assert by_track(joints, numbers)[:, 0, 0].tolist() == [box[0] for box in walker_a]


def test_every_catalogued_method_has_its_function_and_a_spelling_names_one_entry():
    assert set(PROTECT) == set(
        ANONYMIZE_CATALOGUE
    )  # adding a method: one catalogue entry, one function
    assert method_of("low_res_16x12").name == "low_res" and method_of("avatar").gated
    assert [name for name, entry in ANONYMIZE_CATALOGUE.items() if entry.public_pixels] == [
        "avatar",
        "blackout",
    ]  # the only copies with synthetic pixels (masks/ for MaskDP)
    with pytest.raises(PrivharError, match="method 'low_res_16' is not one of avatar, "):
        method_of("low_res_16")
