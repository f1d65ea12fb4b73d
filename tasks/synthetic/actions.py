"""Per-action joint trajectories: ``pose = ACTIONS[name](t, style)``.

Each action is a function of time (seconds) and a per-video :class:`MotionStyle` (speed,
amplitude, phase, leading side), registered by name. Classes differ by motion only:
frequency, which limbs move, how far, and whether the body travels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tasks.core.catalogue import Catalogue
from tasks.synthetic.body import Pose

TAU = 2.0 * np.pi


@dataclass(frozen=True)
class MotionStyle:
    speed: float = 1.0  # multiplies every frequency and travel speed
    amplitude: float = 1.0  # multiplies joint excursions
    phase: float = 0.0  # cycle offset in [0, 1)
    lead: str = "l"  # the arm that waves, the leg that kicks ...
    onset: float = 0.3  # seconds before a one-off action (sit down) starts


ActionFn = Callable[[float, MotionStyle], Pose]
ACTIONS: Catalogue[ActionFn] = Catalogue("action")


def _cycle(t: float, style: MotionStyle, hz: float) -> float:
    return TAU * (hz * style.speed * t + style.phase)


def _other(side: str) -> str:
    return "r" if side == "l" else "l"


def _legs(
    pose: Pose, left_thigh: float, right_thigh: float, left_knee: float, right_knee: float
) -> None:
    pose.angles["l_thigh"] = (left_thigh, 2.0)
    pose.angles["r_thigh"] = (right_thigh, 2.0)
    pose.angles["l_shin"] = (left_thigh - left_knee, 2.0)
    pose.angles["r_shin"] = (right_thigh - right_knee, 2.0)


def _arms(
    pose: Pose, left: tuple[float, float], right: tuple[float, float], abduct: float = 8.0
) -> None:
    """Arms from (shoulder flex, elbow bend) per side."""
    for side, (flex, elbow) in (("l", left), ("r", right)):
        pose.angles[f"{side}_upper_arm"] = (flex, abduct)
        pose.angles[f"{side}_forearm"] = (flex + elbow, abduct)


def _gait(
    t: float,
    style: MotionStyle,
    *,
    hz: float,
    swing: float,
    knee: float,
    arm: float,
    elbow: float,
    lean: float,
    travel: float,
    bounce: float,
) -> Pose:
    phase = _cycle(t, style, hz)
    a = style.amplitude
    pose = Pose(torso_pitch=lean * a)
    stride = swing * a * np.sin(phase)
    _legs(
        pose,
        stride,
        -stride,
        knee * a * max(0.0, np.sin(phase + 1.2)),
        knee * a * max(0.0, np.sin(phase + 1.2 + np.pi)),
    )
    _arms(pose, (-arm * a * np.sin(phase), elbow), (arm * a * np.sin(phase), elbow))
    pose.forward = travel * style.speed * t
    pose.lift = bounce * a * abs(np.sin(phase))
    return pose


@ACTIONS.entry("walk")
def walk(t: float, style: MotionStyle) -> Pose:
    return _gait(
        t, style, hz=0.9, swing=24, knee=35, arm=20, elbow=12, lean=3, travel=0.55, bounce=0.008
    )


@ACTIONS.entry("run")
def run(t: float, style: MotionStyle) -> Pose:
    return _gait(
        t, style, hz=1.4, swing=42, knee=85, arm=38, elbow=85, lean=13, travel=1.3, bounce=0.05
    )


@ACTIONS.entry("jump")
def jump(t: float, style: MotionStyle) -> Pose:
    cycle = (0.85 * style.speed * t + style.phase) % 1.0
    a = style.amplitude
    crouch = np.exp(-(((cycle - 0.15) / 0.09) ** 2)) + np.exp(-(((cycle - 0.85) / 0.09) ** 2))
    flight = max(0.0, np.sin(np.pi * (cycle - 0.25) / 0.5)) if 0.25 < cycle < 0.75 else 0.0
    pose = Pose(torso_pitch=20 * crouch * a)
    _legs(pose, 55 * crouch * a, 55 * crouch * a, 100 * crouch * a, 100 * crouch * a)
    arm = -35 * crouch + 160 * flight * a
    _arms(pose, (arm, 15), (arm, 15))
    pose.lift = 0.22 * a * flight
    return pose


@ACTIONS.entry("wave")
def wave(t: float, style: MotionStyle) -> Pose:
    phase = _cycle(t, style, 1.8)
    pose = Pose(torso_roll=2.0 * np.sin(phase))
    _arms(pose, (4, 6), (4, 6))
    lead = style.lead
    pose.angles[f"{lead}_upper_arm"] = (10, 100 + 10 * style.amplitude)
    pose.angles[f"{lead}_forearm"] = (10, 175 + 28 * style.amplitude * np.sin(phase))
    return pose


@ACTIONS.entry("clap")
def clap(t: float, style: MotionStyle) -> Pose:
    phase = _cycle(t, style, 2.0)
    opening = 0.5 + 0.5 * np.sin(phase)
    pose = Pose()
    for side in ("l", "r"):
        pose.angles[f"{side}_upper_arm"] = (55, 12 + 28 * style.amplitude * opening)
        pose.angles[f"{side}_forearm"] = (85, -25 + 55 * style.amplitude * opening)
    return pose


@ACTIONS.entry("squat")
def squat(t: float, style: MotionStyle) -> Pose:
    depth = style.amplitude * (0.5 - 0.5 * np.cos(_cycle(t, style, 0.6)))
    pose = Pose(torso_pitch=32 * depth)
    _legs(pose, 95 * depth, 95 * depth, 125 * depth, 125 * depth)
    _arms(pose, (95 * depth, 5), (95 * depth, 5))
    return pose


@ACTIONS.entry("punch")
def punch(t: float, style: MotionStyle) -> Pose:
    phase = _cycle(t, style, 1.3)
    pose = Pose(torso_pitch=5)
    _legs(pose, 12, -10, 10, 15)
    for side, shift in ((style.lead, 0.0), (_other(style.lead), np.pi)):
        reach = max(0.0, np.sin(phase + shift)) ** 2 * style.amplitude
        flex = 45 + 45 * reach
        pose.angles[f"{side}_upper_arm"] = (flex, 10)
        pose.angles[f"{side}_forearm"] = (flex + 110 * (1 - reach), 10)
    return pose


@ACTIONS.entry("kick")
def kick(t: float, style: MotionStyle) -> Pose:
    swing = max(0.0, np.sin(_cycle(t, style, 0.75))) ** 2 * style.amplitude
    pose = Pose(torso_pitch=-8 * swing)
    lead = style.lead
    pose.angles[f"{lead}_thigh"] = (85 * swing, 2)
    pose.angles[f"{lead}_shin"] = (85 * swing - 70 * (1 - swing) * min(1.0, 3 * swing), 2)
    pose.angles[f"{_other(lead)}_thigh"] = (-4, 2)
    pose.angles[f"{_other(lead)}_shin"] = (-4, 2)
    _arms(pose, (20, 20), (20, 20), abduct=25 + 20 * swing)
    return pose


@ACTIONS.entry("bend")
def bend(t: float, style: MotionStyle) -> Pose:
    depth = style.amplitude * (0.5 - 0.5 * np.cos(_cycle(t, style, 0.5)))
    pitch = 85 * depth
    pose = Pose(torso_pitch=pitch)
    _legs(pose, -6 * depth, -6 * depth, 4 * depth, 4 * depth)
    _arms(pose, (pitch + 8, 4), (pitch + 8, 4))
    pose.forward = -0.04 * depth
    return pose


@ACTIONS.entry("sit_down")
def sit_down(t: float, style: MotionStyle) -> Pose:
    duration = 1.0 / style.speed
    x = np.clip((t - style.onset) / duration, 0.0, 1.0)
    progress = x * x * (3 - 2 * x)
    pose = Pose(torso_pitch=28 * np.sin(np.pi * progress) + 6 * progress)
    _legs(pose, 88 * progress, 88 * progress, 88 * progress, 88 * progress)
    _arms(pose, (30 * progress, 40 * progress), (30 * progress, 40 * progress))
    pose.forward = -0.12 * progress
    return pose


@ACTIONS.entry("stand")
def stand(t: float, style: MotionStyle) -> Pose:
    """Idle: the bystander of two-person videos (not an action class)."""
    sway = np.sin(_cycle(t, style, 0.3))
    pose = Pose(torso_roll=1.5 * sway)
    _legs(pose, 3 * sway, -3 * sway, 2, 2)
    _arms(pose, (4 * sway, 10), (-4 * sway, 10))
    return pose
