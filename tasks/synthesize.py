"""Stage ``synthesize``: the source videos of the pipeline.

With ``data.source: synthetic`` it renders the embedded dataset (``tasks.synthetic``) as
MPEG-4 AVI files plus per-frame ground truth; with a real dataset (``ucf101``, ``hmdb51``) it
indexes ``data.root`` in that dataset's own layout. Either way it writes one manifest,
the contract ``decode`` reads.

    out/manifest.parquet      one row per video (required columns + attributes)
    out/videos/<id>.avi       synthetic only: the encoded videos (MPEG-4 Part 2)
    out/annotations/<id>.npz  synthetic only: masks, boxes, skeletons, identities per frame
    out/identities.parquet    synthetic only: who each identity is (for privacy evaluation)
    report/preview.png        a few frames of one video per action, to look at
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import av
import cv2
import numpy as np

from tasks.core import stage_options as arg
from tasks.core.errors import PrivharError
from tasks.core.item_randomness import derive_seed, rng_for
from tasks.core.manifest import MANIFEST_NAME, resolve_path, write_manifest, write_table
from tasks.core.parallel import map_ordered, worker_count
from tasks.core.params import BaseParams, DataParams, PublicParams, SynthesizeParams
from tasks.core.params_files import DatasetSections
from tasks.core.storage import atomic_directory, atomic_write_bytes, save_arrays
from tasks.core.tracking import stage_run, stage_work
from tasks.synthetic.encode import write_video
from tasks.synthetic.video import identity_of, render_video, sample_spec
from tasks.video_data.dataset_checks import dataset_problems
from tasks.video_data.datasets import index_dataset, read_frames

LOG = logging.getLogger(__name__)
FACE_VISIBLE_SHARE = 0.5  # a video "shows a face" when a face is visible in half its frames


@dataclass(frozen=True)
class VideoJob:
    video_id: str
    action: str
    label: int
    split: str


def plan_videos(seed: int, params: SynthesizeParams) -> list[VideoJob]:
    """Which videos exist and their split: per action, a seeded stratified test share."""
    jobs = []
    for label, action in enumerate(params.actions):
        order = rng_for(seed, "split", action).permutation(params.videos_per_action)
        n_test = max(1, int(round(params.test_fraction * params.videos_per_action)))
        test = set(order[:n_test].tolist())
        jobs += [
            VideoJob(f"{action}_{i:03d}", action, label, "test" if i in test else "train")
            for i in range(params.videos_per_action)
        ]
    return jobs


def make_video(job: VideoJob, *, seed: int, params: SynthesizeParams, out: Path) -> dict[str, Any]:
    """Render, encode and annotate one video; return its manifest row."""
    spec = sample_spec(seed, job.video_id, job.action, job.label, params)
    rendered = render_video(spec, seed, params)
    write_video(
        out / "videos" / f"{job.video_id}.avi",
        rendered.frames,
        fps=params.fps,
        quantiser=params.quantiser,
    )
    save_arrays(
        out / "annotations" / f"{job.video_id}.npz",
        person_mask=rendered.person_mask,
        body_box=rendered.body_box,
        face_box=rendered.face_box,
        face_visible=rendered.face_visible,
        skeleton=rendered.skeleton,
        joint_depth=rendered.joint_depth,
        identity=rendered.identity,
    )
    people = [identity_of(seed, actor.identity) for actor in spec.actors]
    outfits = [person.outfits[actor.outfit] for person, actor in zip(people, spec.actors)]
    primary = spec.actors[0]
    return {
        "video_id": job.video_id,
        "split": job.split,
        "label": job.label,
        "action": job.action,
        "path": f"videos/{job.video_id}.avi",
        "n_frames": params.frames,
        "fps": float(params.fps),
        "height": params.frame_size[0],
        "width": params.frame_size[1],
        "annotations": f"annotations/{job.video_id}.npz",
        "identity": primary.identity,
        "identities": [actor.identity for actor in spec.actors],
        "scene": spec.scene,
        "yaw": primary.yaw,
        "speed": primary.style.speed,
        "amplitude": primary.style.amplitude,
        "attr_skin_tone": people[0].skin_tone,
        "attr_gender": people[0].gender,
        "attr_face_visible": bool(rendered.face_visible.any(axis=1).mean() >= FACE_VISIBLE_SHARE),
        "attr_bare_skin": any(outfit.bare_skin for outfit in outfits),
        "attr_multi_person": len(spec.actors) > 1,
        "seed": derive_seed(seed, "video", job.video_id),
    }


def _identity_rows(seed: int, count: int) -> list[dict[str, Any]]:
    rows = []
    for index in range(count):
        person = identity_of(seed, index)
        rows.append(
            {
                "identity": index,
                "skin_tone": person.skin_tone,
                "gender": person.gender,
                "hair_style": person.hair_style,
                "glasses": person.face.glasses,
                "beard": person.face.beard,
            }
        )
    return rows


def preview(
    rows: list[dict[str, Any]],
    folder: Path,
    *,
    frames: int = 4,
    height: int = 96,
    show_raw: bool = True,
) -> np.ndarray:
    """One row per action: ``frames`` evenly spaced frames of its first video, labelled (BGR image); videos of other
    aspect ratios (real datasets mix them) give strips of other widths, padded white to the widest. Without
    ``show_raw`` (``report.show_raw``: real people by default) each row says what the dataset holds, and no frame."""
    first_of_label: dict[int, dict[str, Any]] = {}
    for row in rows:
        first_of_label.setdefault(row["label"], row)
    strips = []
    for label_index, row in sorted(first_of_label.items()):
        action = row["action"]
        if not show_raw:
            strips.append(
                _withheld_strip(
                    action, [other for other in rows if other["label"] == label_index], height
                )
            )
            continue
        try:
            decoded = read_frames(resolve_path(row["path"], folder), "bgr24")
        except (
            av.FFmpegError,
            OSError,
            ValueError,
        ):  # unreadable: decode quarantines it with its reason
            continue
        if not decoded:
            continue
        picks = [decoded[i] for i in np.linspace(0, len(decoded) - 1, frames).astype(int)]
        width = int(round(picks[0].shape[1] * height / picks[0].shape[0]))
        strip = np.concatenate(
            [cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA) for frame in picks],
            axis=1,
        )
        label = np.full((height, 110, 3), 255, np.uint8)
        cv2.putText(
            label,
            action,
            (6, height // 2 + 5),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.5,
            (0, 0, 0),
            1,
            cv2.LINE_AA,
        )
        strips.append(np.concatenate([label, strip], axis=1))
    if not strips:
        raise PrivharError(f"{folder}: no readable video to preview")
    widest = max(strip.shape[1] for strip in strips)
    return np.concatenate(
        [
            cv2.copyMakeBorder(
                strip, 0, 0, 0, widest - strip.shape[1], cv2.BORDER_CONSTANT, value=(255, 255, 255)
            )
            for strip in strips
        ],
        axis=0,
    )


def _withheld_strip(action: str, rows: list[dict[str, Any]], height: int) -> np.ndarray:
    """A preview row without frames: the action, its videos per split and their frame sizes."""
    splits = {name: sum(row["split"] == name for row in rows) for name in ("train", "test")}
    sizes = sorted({(int(row["width"]), int(row["height"])) for row in rows if row.get("width")})
    size_text = (
        "no readable size"
        if not sizes
        else (
            f"{sizes[0][0]}x{sizes[0][1]}"
            if len(sizes) == 1
            else f"{sizes[0][0]}x{sizes[0][1]} to {sizes[-1][0]}x{sizes[-1][1]}"
        )
    )
    strip = np.full((height, 760, 3), 255, np.uint8)
    for line, text in enumerate(
        [
            action,
            f"{splits['train']} train / {splits['test']} test videos, {size_text} px",
            "raw frames withheld (report.show_raw: auto shows real people's frames to no one)",
        ]
    ):
        cv2.putText(
            strip,
            text,
            (6, 22 + 26 * line),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.5,
            (0, 0, 0),
            1,
            cv2.LINE_AA,
        )
    return strip


def _public_sections(
    base: BaseParams, data: DataParams, params: SynthesizeParams, public: PublicParams
) -> tuple[BaseParams, DataParams, SynthesizeParams]:
    """The sections the public pretraining set is rendered under: its own seed, identities and videos per action."""
    if public.seed == base.seed:
        raise PrivharError(
            f"public.seed = {public.seed} is invalid: expected a seed other than base.seed "
            "(the same seed renders the private identities)"
        )
    return (
        base.model_copy(update={"seed": public.seed}),
        data.model_copy(update={"source": "synthetic"}),
        params.model_copy(
            update={"identities": public.identities, "videos_per_action": public.videos_per_action}
        ),
    )


def _source_rows(
    base: BaseParams, data: DataParams, params: SynthesizeParams, staging: Path
) -> list[dict[str, Any]]:
    """The manifest's rows: the synthetic videos rendered into ``staging`` (with their identities), or the indexed
    dataset's."""
    if data.source != "synthetic":
        return index_dataset(
            data.source, data.root, data.split, data.attributes, data.subjects, data.missing_files
        )
    (staging / "videos").mkdir()
    (staging / "annotations").mkdir()
    jobs = plan_videos(base.seed, params)
    render = partial(make_video, seed=base.seed, params=params, out=staging)
    rows = map_ordered(render, jobs, workers=worker_count(base.workers), desc="synthesize")
    write_table(_identity_rows(base.seed, params.identities), staging / "identities.parquet")
    return rows


@stage_work
def synthesize(
    *,
    base: BaseParams,
    data: DataParams,
    params: SynthesizeParams,
    out: Annotated[
        Path, arg.folder("Where to write the source videos and their manifest.", "output")
    ],
    report: Annotated[Path | None, arg.folder("Where to write preview.png.", "output")] = None,
    show_raw: bool = False,
    public: PublicParams | None = None,
    checks: DatasetSections | None = None,
) -> list[dict[str, Any]]:
    """Run the stage; return the manifest rows written, their preview in ``report`` (raw frames if ``show_raw``).

    ``public``: the public pretraining set instead — always synthetic, rendered from ``public.seed``
    (other people, other scenes) with ``public.identities`` and ``public.videos_per_action``. ``checks``: the sections
    whose problems with the indexed dataset are logged as warnings (:mod:`tasks.video_data.dataset_checks`).
    """
    name = "synthesize"
    if public is not None:
        base, data, params = _public_sections(base, data, params, public)
        name = "synthesize-public"
    with (
        stage_run(name, {"base": base, "data": data, "synthesize": params}) as run,
        atomic_directory(out) as staging,
    ):
        started = time.perf_counter()
        rows = _source_rows(base, data, params, staging)
        # what a later stage will refuse, said now (privhar flow refuses the run on it)
        if checks is not None:
            for problem in dataset_problems(checks, rows, data.root or "synthesize", base.seed):
                LOG.warning("synthesize: a later stage will refuse this dataset: %s", problem)
        write_manifest(rows, staging / MANIFEST_NAME)
        if report is not None:
            encoded, png = cv2.imencode(
                ".png",
                preview(rows, staging, show_raw=public is not None or show_raw),
            )
            if not encoded:
                raise PrivharError(f"{report / 'preview.png'}: OpenCV could not encode the preview")
            atomic_write_bytes(report / "preview.png", png.tobytes())
        seconds = time.perf_counter() - started
        run.log_summary(
            {"videos": len(rows), "seconds": seconds, "videos_per_second": len(rows) / seconds}
        )
    return rows
