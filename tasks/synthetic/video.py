"""One synthetic video: sample its specification from the seed, then render its frames.

    VideoSpec (who, what, where, how) ─▶ per frame: scene crop (camera jitter)
                                                    ─▶ props ─▶ people far to near
                                                    ─▶ lighting gain + sensor noise
    ─▶ frames (T, H, W, 3) uint8 BGR and per-frame ground truth

Ground truth per frame and person: a label mask (0 background, p + 1 for person p as
visible after occlusion), body box (of the visible mask), face box, face visibility, the
2-D skeleton (joint order :data:`tasks.synthetic.body.JOINTS`) with each joint's depth, and the identity.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import cv2
import numpy as np

from tasks.core.item_randomness import rng_for
from tasks.core.params import SynthesizeParams
from tasks.synthetic.actions import ACTIONS, MotionStyle
from tasks.synthetic.body import JOINT_INDEX, JOINTS, forward_kinematics, project
from tasks.synthetic.identities import Identity, make_identity
from tasks.synthetic.render import PersonView, draw_person
from tasks.synthetic.scenes import Scene, make_scene


@dataclass(frozen=True)
class ActorSpec:
    identity: int
    outfit: int
    action: str
    style: MotionStyle
    yaw: float
    height_px: float
    origin_x: float
    ground_y: float


@dataclass(frozen=True)
class VideoSpec:
    video_id: str
    action: str
    scene: int
    actors: tuple[ActorSpec, ...]  # the first performs the labelled action
    stool: tuple[float, float, float, float] | None  # x0, y0, x1, y1 in frame pixels
    pan: float  # camera pan in pixels per second (a tracking shot of a person who travels)
    light_gain: float
    jitter_phase: tuple[float, float, float, float]


@dataclass
class Rendered:
    frames: np.ndarray  # (T, H, W, 3) uint8, BGR
    person_mask: np.ndarray  # (T, H, W) uint8
    body_box: np.ndarray  # (T, P, 4) float32, NaN where the person is not visible
    face_box: np.ndarray  # (T, P, 4) float32
    face_visible: np.ndarray  # (T, P) bool
    skeleton: np.ndarray  # (T, P, J, 2) float32
    joint_depth: np.ndarray  # (T, P, J) float32, body heights toward the camera (larger is nearer)
    identity: np.ndarray  # (P,) int32


@lru_cache(maxsize=64)
def identity_of(seed: int, index: int) -> Identity:
    return make_identity(seed, index)


@lru_cache(maxsize=16)
def scene_of(seed: int, index: int, height: int, width: int) -> Scene:
    return make_scene(seed, index, height, width)


def _margin(params: SynthesizeParams) -> int:
    return int(np.ceil(params.camera_jitter)) + 1


def _scene(seed: int, index: int, params: SynthesizeParams) -> Scene:
    """The scene panorama: twice the frame width (room to pan) plus the jitter margin."""
    margin = _margin(params)
    return scene_of(
        seed, index, params.frame_size[0] + 2 * margin, 2 * params.frame_size[1] + 2 * margin
    )


def _duration(params: SynthesizeParams) -> float:
    return params.frames / params.fps


def _times(params: SynthesizeParams) -> np.ndarray:
    return np.arange(params.frames) / params.fps


def _project_actor(actor: ActorSpec, seed: int, t: float) -> tuple[np.ndarray, np.ndarray, float]:
    identity = identity_of(seed, actor.identity)
    joints = forward_kinematics(ACTIONS[actor.action](t, actor.style), identity.build)
    scale = actor.height_px * identity.height
    points, depth = project(
        joints, yaw_deg=actor.yaw, scale_px=scale, origin_px=(actor.origin_x, actor.ground_y)
    )
    return points, depth, scale


def _trajectory(actor: ActorSpec, seed: int, params: SynthesizeParams) -> np.ndarray:
    """Screen joints (T, J, 2) over the clip, for the actor as specified."""
    return np.stack([_project_actor(actor, seed, t)[0] for t in _times(params)])


def _fit_height(actor: ActorSpec, seed: int, params: SynthesizeParams) -> ActorSpec:
    """Shrink the person if a jump or a raised arm would leave the top of the frame."""
    identity = identity_of(seed, actor.identity)
    points = _trajectory(actor, seed, params)
    top = (
        points[..., 1].min() - 1.2 * identity.build.head_radius * actor.height_px * identity.height
    )
    limit = 0.03 * params.frame_size[0]
    if top >= limit:
        return actor
    factor = (actor.ground_y - limit) / (actor.ground_y - top)
    return replace(actor, height_px=float(actor.height_px * factor))


def _place(
    actor: ActorSpec,
    points: np.ndarray,
    params: SynthesizeParams,
    rng: np.random.Generator,
    lo: float,
    hi: float,
    pan: float = 0.0,
) -> ActorSpec:
    """Choose origin_x so the trajectory ``points`` (seen by a camera panning at ``pan``) stays in [lo, hi] of the width."""
    xs = (points[..., 0] - pan * _times(params)[:, None]).ravel()
    width = params.frame_size[1]
    left, right = lo * width - xs.min(), hi * width - xs.max()
    origin = rng.uniform(left, right) if right > left else (left + right) / 2
    return replace(actor, origin_x=float(origin))


def _tracking_pan(points: np.ndarray, params: SynthesizeParams) -> float:
    """Pan (px/s) that keeps a travelling person (trajectory ``points``) in view: their mean speed, if they would leave the frame."""
    if np.ptp(points[..., 0]) <= 0.9 * params.frame_size[1]:
        return 0.0
    pelvis = points[:, JOINT_INDEX["pelvis"], 0]
    speed = (pelvis[-1] - pelvis[0]) / max(_duration(params) - 1.0 / params.fps, 1e-6)
    limit = params.frame_size[1] / _duration(
        params
    )  # the panorama is one frame width wider than the view
    return float(np.clip(speed, -limit, limit))


def sample_spec(
    seed: int, video_id: str, action: str, label: int, params: SynthesizeParams
) -> VideoSpec:
    """Everything random about one video, drawn from ``rng_for(seed, "video", video_id)``."""
    rng = rng_for(seed, "video", video_id)
    height, width = params.frame_size
    home_scene = label % params.scenes
    scene = (
        home_scene
        if rng.random() < params.scene_action_correlation
        else int(rng.integers(params.scenes))
    )
    horizon = _scene(seed, scene, params).horizon
    primary_identity = int(rng.integers(params.identities))
    ground = rng.uniform(0.88, 0.96) * height
    primary = ActorSpec(
        identity=primary_identity,
        outfit=int(rng.integers(2)),
        action=action,
        style=_style(rng, params),
        yaw=_yaw(rng, params),
        height_px=float(rng.uniform(*params.person_height) * height),
        origin_x=0.0,
        ground_y=float(ground),
    )
    primary = _fit_height(primary, seed, params)
    path = _trajectory(primary, seed, params)
    pan = _tracking_pan(path, params)
    actors = [_place(primary, path, params, rng, 0.05, 0.95, pan)]
    if rng.random() < params.two_person_fraction:
        bystander = _bystander(rng, seed, params, primary, horizon * height, ground)
        actors.append(
            _place(bystander, _trajectory(bystander, seed, params), params, rng, 0.02, 0.98, pan)
        )
    stool = None
    if action == "sit_down" or rng.random() < 0.15:
        stool = _stool(rng, seed, action, actors[0], primary.height_px, float(ground), width)
    return VideoSpec(
        video_id=video_id,
        action=action,
        scene=scene,
        actors=tuple(actors),
        stool=stool,
        pan=pan,
        light_gain=float(rng.uniform(0.8, 1.15)),
        jitter_phase=tuple(float(v) for v in rng.uniform(0, 2 * np.pi, 4)),
    )


def _yaw(rng: np.random.Generator, params: SynthesizeParams) -> float:
    back = rng.random() < params.back_view_fraction
    magnitude = rng.uniform(115, 160) if back else rng.uniform(15, 70)
    return float(magnitude * rng.choice([-1.0, 1.0]))


def _style(rng: np.random.Generator, params: SynthesizeParams) -> MotionStyle:
    return MotionStyle(
        speed=float(rng.uniform(*params.speed_range)),
        amplitude=float(rng.uniform(*params.amplitude_range)),
        phase=float(rng.random()),
        lead=str(rng.choice(["l", "r"])),
        onset=float(rng.uniform(0.05, 0.45) * params.frames / params.fps),
    )


def _bystander(
    rng: np.random.Generator,
    seed: int,
    params: SynthesizeParams,
    primary: ActorSpec,
    horizon_y: float,
    ground: float,
) -> ActorSpec:
    """A second person standing behind the first (another identity, 70-85 % of their height)."""
    height = params.frame_size[0]
    other = int((primary.identity + rng.integers(1, params.identities)) % params.identities)
    back_ground = float(
        max(
            horizon_y + 0.2 * (ground - horizon_y),
            ground - rng.uniform(0.08, 0.16) * height,
        )
    )
    bystander = ActorSpec(
        identity=other,
        outfit=int(rng.integers(2)),
        action="stand",
        style=_style(rng, params),
        yaw=_yaw(rng, params),
        height_px=float(primary.height_px * rng.uniform(0.7, 0.85)),
        origin_x=0.0,
        ground_y=back_ground,
    )
    return _fit_height(bystander, seed, params)


def _stool(
    rng: np.random.Generator,
    seed: int,
    action: str,
    first: ActorSpec,
    height_px: float,
    ground: float,
    width: int,
) -> tuple[float, float, float, float]:
    """The stool's box: under the pelvis of the first person as they sit down, else somewhere in the scene."""
    if action == "sit_down":
        seated = replace(first, style=MotionStyle(onset=-10.0))
        points, _, scale = _project_actor(seated, seed, 0.0)
        pelvis = points[JOINT_INDEX["pelvis"]]
        x_centre, top = float(pelvis[0]), float(pelvis[1] + 0.03 * scale)
    else:
        x_centre, top = (
            float(rng.uniform(0.1, 0.9) * width),
            float(ground - rng.uniform(0.2, 0.3) * height_px),
        )
    half = 0.12 * height_px
    return (x_centre - half, top, x_centre + half, ground)


def _draw_stool(
    canvas: np.ndarray, box: tuple[float, float, float, float], offset: np.ndarray
) -> None:
    x0, y0, x1, y1 = (np.array(box) + np.tile(offset, 2)).astype(int)
    cv2.rectangle(canvas, (x0, y0), (x1, y0 + max(2, (y1 - y0) // 8)), (40, 70, 110), -1)
    for x in (x0 + 2, x1 - 4):
        cv2.rectangle(canvas, (x, y0), (x + 3, y1), (30, 55, 90), -1)


def _camera_shift(spec: VideoSpec, params: SynthesizeParams, t: float) -> np.ndarray:
    """Where the view is at time ``t``: the pan, and a hand-held jitter of two sines an axis."""
    phase = spec.jitter_phase
    offset = params.camera_jitter * np.array(
        [
            np.sin(2.3 * t + phase[0]) * 0.7 + np.sin(7.1 * t + phase[1]) * 0.3,
            np.sin(1.9 * t + phase[2]) * 0.7 + np.sin(6.3 * t + phase[3]) * 0.3,
        ]
    )
    return np.round(offset + np.array([spec.pan * t, 0.0])).astype(int)


def _draw_people(
    canvas: np.ndarray,
    out: Rendered,
    index: int,
    spec: VideoSpec,
    seed: int,
    t: float,
    shift: np.ndarray,
) -> None:
    """Every person of frame ``index`` drawn, far (higher on screen) first, with their ground truth."""
    labels = out.person_mask[index]
    n_people = len(spec.actors)
    for person in sorted(range(n_people), key=lambda p: spec.actors[p].ground_y):
        actor = spec.actors[person]
        points, depth, scale = _project_actor(actor, seed, t)
        points = points - shift
        identity = identity_of(seed, actor.identity)
        face_box, face_visible = draw_person(
            canvas,
            labels,
            person + 1,
            identity,
            identity.outfits[actor.outfit],
            PersonView(points=points, depth=depth, scale_px=scale, yaw=actor.yaw),
        )
        out.skeleton[index, person] = points
        out.joint_depth[index, person] = depth
        out.face_box[index, person] = face_box
        out.face_visible[index, person] = face_visible
    for person in range(n_people):
        x, y, w, h = cv2.boundingRect((labels == person + 1).view(np.uint8))
        if w and h:
            out.body_box[index, person] = (x, y, x + w, y + h)
        else:
            out.face_visible[index, person] = False


def render_video(spec: VideoSpec, seed: int, params: SynthesizeParams) -> Rendered:
    """Render ``spec`` into frames and ground truth (deterministic in spec, seed, params)."""
    height, width = params.frame_size
    margin = _margin(params)
    scene = _scene(seed, spec.scene, params)
    # Where the view starts in the panorama: the centre when still, the end the camera pans away from otherwise.
    start = width // 2 if spec.pan == 0 else (0 if spec.pan > 0 else width)
    noise_rng = rng_for(seed, "noise", spec.video_id)
    n_frames, n_people = params.frames, len(spec.actors)
    out = Rendered(
        frames=np.zeros((n_frames, height, width, 3), np.uint8),
        person_mask=np.zeros((n_frames, height, width), np.uint8),
        body_box=np.full((n_frames, n_people, 4), np.nan, np.float32),
        face_box=np.full((n_frames, n_people, 4), np.nan, np.float32),
        face_visible=np.zeros((n_frames, n_people), bool),
        skeleton=np.zeros((n_frames, n_people, len(JOINTS), 2), np.float32),
        joint_depth=np.zeros((n_frames, n_people, len(JOINTS)), np.float32),
        identity=np.array([actor.identity for actor in spec.actors], np.int32),
    )
    for index, t in enumerate(_times(params)):
        shift = _camera_shift(spec, params, float(t))
        x0, y0 = margin + start + shift[0], margin + shift[1]
        canvas = scene.image[y0 : y0 + height, x0 : x0 + width].copy()
        if spec.stool is not None:
            _draw_stool(canvas, spec.stool, -shift)
        _draw_people(canvas, out, index, spec, seed, float(t), shift)
        noise = noise_rng.standard_normal(canvas.shape, dtype=np.float32) * np.float32(
            params.sensor_noise
        )
        lit = canvas.astype(np.float32) * np.float32(spec.light_gain) + noise
        out.frames[index] = np.clip(lit, 0, 255).astype(np.uint8)
    return out
