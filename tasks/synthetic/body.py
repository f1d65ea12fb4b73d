"""A 3-D stick body with volume: joint angles in, joint positions out.

Units are body heights; y points up, z forward (the way the person faces), x to the
person's left. Every limb segment has two absolute angles in its parent frame (the torso
for arms, the pelvis for legs): ``flex`` swings it forward from hanging straight down,
``abduct`` swings it outward to the side. The upper body then pitches forward by
``torso_pitch`` about the hips. The result is rotated by the view angle ``yaw`` and
projected orthographically to screen coordinates, keeping depth for draw ordering.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

JOINTS = (
    "head",
    "neck",
    "pelvis",
    "l_shoulder",
    "l_elbow",
    "l_wrist",
    "r_shoulder",
    "r_elbow",
    "r_wrist",
    "l_hip",
    "l_knee",
    "l_ankle",
    "r_hip",
    "r_knee",
    "r_ankle",
)
JOINT_INDEX = {name: index for index, name in enumerate(JOINTS)}
LIMBS = (  # (name, proximal joint, distal joint) drawn as capsules
    ("l_upper_arm", "l_shoulder", "l_elbow"),
    ("l_forearm", "l_elbow", "l_wrist"),
    ("r_upper_arm", "r_shoulder", "r_elbow"),
    ("r_forearm", "r_elbow", "r_wrist"),
    ("l_thigh", "l_hip", "l_knee"),
    ("l_shin", "l_knee", "l_ankle"),
    ("r_thigh", "r_hip", "r_knee"),
    ("r_shin", "r_knee", "r_ankle"),
)
SEGMENTS = tuple(name for name, _, _ in LIMBS)


@dataclass(frozen=True)
class Build:
    """Body proportions, in body heights."""

    shoulder_half_width: float = 0.11
    hip_half_width: float = 0.085
    upper_arm: float = 0.17
    forearm: float = 0.16
    thigh: float = 0.245
    shin: float = 0.245
    torso: float = 0.30
    neck: float = 0.035
    head_radius: float = 0.065


@dataclass
class Pose:
    """Joint angles in degrees and the root offset (body heights, body frame)."""

    angles: dict[str, tuple[float, float]] = field(
        default_factory=dict
    )  # segment -> (flex, abduct)
    torso_pitch: float = 0.0
    torso_roll: float = 0.0
    lift: float = 0.0  # extra height above the ground (jumps)
    forward: float = 0.0  # displacement along the facing direction

    def angle(self, segment: str) -> tuple[float, float]:
        return self.angles.get(segment, (0.0, 6.0 if "arm" in segment else 0.0))


def segment_direction(flex_deg: float, abduct_deg: float, side: float) -> np.ndarray:
    """Unit vector of a limb: down (0, -1, 0) abducted outward, then flexed forward."""
    flex, abduct = np.radians(flex_deg), np.radians(abduct_deg)
    return np.array(
        [side * np.sin(abduct), -np.cos(abduct) * np.cos(flex), np.cos(abduct) * np.sin(flex)]
    )


def _rotate_x(vector: np.ndarray, degrees: float) -> np.ndarray:
    """Pitch forward: the +y axis tips toward +z."""
    angle = np.radians(degrees)
    y, z = vector[1], vector[2]
    return np.array(
        [vector[0], y * np.cos(angle) - z * np.sin(angle), y * np.sin(angle) + z * np.cos(angle)]
    )


def _rotate_z(vector: np.ndarray, degrees: float) -> np.ndarray:
    angle = np.radians(degrees)
    x, y = vector[0], vector[1]
    return np.array(
        [x * np.cos(angle) - y * np.sin(angle), x * np.sin(angle) + y * np.cos(angle), vector[2]]
    )


def forward_kinematics(pose: Pose, build: Build) -> np.ndarray:
    """Joint positions (len(JOINTS), 3) in the body frame, feet on the ground (y = 0)."""
    joints = np.zeros((len(JOINTS), 3))

    def upper(vector: np.ndarray) -> np.ndarray:
        return _rotate_z(_rotate_x(vector, pose.torso_pitch), pose.torso_roll)

    pelvis = np.zeros(3)
    neck = pelvis + upper(np.array([0.0, build.torso, 0.0]))
    joints[JOINT_INDEX["pelvis"]] = pelvis
    joints[JOINT_INDEX["neck"]] = neck
    joints[JOINT_INDEX["head"]] = neck + upper(np.array([0.0, build.neck + build.head_radius, 0.0]))
    for prefix, side in (("l", 1.0), ("r", -1.0)):
        shoulder = neck + upper(np.array([side * build.shoulder_half_width, -0.02, 0.0]))
        elbow = shoulder + build.upper_arm * upper(
            segment_direction(*pose.angle(f"{prefix}_upper_arm"), side)
        )
        wrist = elbow + build.forearm * upper(
            segment_direction(*pose.angle(f"{prefix}_forearm"), side)
        )
        hip = pelvis + np.array([side * build.hip_half_width, 0.0, 0.0])
        knee = hip + build.thigh * segment_direction(*pose.angle(f"{prefix}_thigh"), side)
        ankle = knee + build.shin * segment_direction(*pose.angle(f"{prefix}_shin"), side)
        for name, position in (
            ("shoulder", shoulder),
            ("elbow", elbow),
            ("wrist", wrist),
            ("hip", hip),
            ("knee", knee),
            ("ankle", ankle),
        ):
            joints[JOINT_INDEX[f"{prefix}_{name}"]] = position
    foot_clearance = 0.02
    joints[:, 1] += (
        foot_clearance - joints[:, 1][[JOINT_INDEX["l_ankle"], JOINT_INDEX["r_ankle"]]].min()
    )
    joints[:, 1] += pose.lift
    joints[:, 2] += pose.forward
    return joints


def project(
    joints: np.ndarray, *, yaw_deg: float, scale_px: float, origin_px: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Screen coordinates (N, 2) and depth toward the camera (N,) for a body seen at ``yaw``.

    yaw 0 faces the camera; the person's left (+x) then appears on the screen's right.
    """
    yaw = np.radians(yaw_deg)
    x, y, z = joints[:, 0], joints[:, 1], joints[:, 2]
    screen_x = x * np.cos(yaw) + z * np.sin(yaw)
    depth = z * np.cos(yaw) - x * np.sin(yaw)
    points = np.stack([origin_px[0] + scale_px * screen_x, origin_px[1] - scale_px * y], axis=1)
    return points, depth
