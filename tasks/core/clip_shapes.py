"""The clips each backbone's weights were trained on (issue 34), without torch: decode and train read them from here.

A model-zoo backbone expects its own clip: so many frames, sampled every ``sampling_rate`` frames of a 30 fps video,
a ``size`` × ``size`` centre crop, normalised by its own mean and std. With ``model.backbone`` set to one of them, the
decode stage samples ``frames`` frames at ``fps`` and keeps them at ``size`` × ``4/3 size`` (UCF101's and HMDB51's
4:3 frames, short side ``size``), train keeps that size, and the model's first block crops the centre square and
re-normalises (:mod:`tasks.video_models.backbones`): decode.frames / fps / frame_size and train.input_size are then unused.
``model.frames`` / ``model.crop`` override the backbone's (a smaller GPU, or the tests' tiny clips).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KINETICS_MEAN, KINETICS_STD = (0.45, 0.45, 0.45), (0.225, 0.225, 0.225)
SOURCE_FPS = 30.0  # the model zoo's sampling rates count frames of a 30 fps video
OWN = "privhar"  # the project's small 3-D ResNet: its clip is decode's and train's params


@dataclass(frozen=True)
class ClipShape:
    """``frames`` sampled every ``sampling_rate`` frames of a 30 fps video, centre-cropped to ``size`` × ``size``,
    normalised by ``mean`` / ``std`` (on 0..1 values)."""

    frames: int
    size: int
    sampling_rate: int
    mean: tuple[float, float, float] = KINETICS_MEAN
    std: tuple[float, float, float] = KINETICS_STD

    @property
    def fps(self) -> float:
        """The frame rate a decoder samples at to give these clips."""
        return SOURCE_FPS / self.sampling_rate

    @property
    def frame_size(self) -> list[int]:
        """Height and width decode keeps: short side ``size``, 4:3 (the even width nearest), the crop taken later."""
        return [self.size, 2 * round(self.size * 2 / 3)]


# the model zoo's settings (pytorchvideo's hub configs; torchvision's R(2+1)-D: 16 frames at 112, its own statistics)
ZOO_CLIPS: dict[str, ClipShape] = {
    "x3d_xs": ClipShape(4, 160, 12),
    "x3d_s": ClipShape(13, 160, 6),
    "r2plus1d_r18": ClipShape(
        16, 112, 2, (0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989)
    ),
    "slow_r50": ClipShape(8, 224, 8),
    "mvit_base_16x4": ClipShape(16, 224, 4),
}
BACKBONE_NAMES = (OWN, *ZOO_CLIPS)


def zoo_clip(backbone: str, frames: int | None = None, size: int | None = None) -> ClipShape | None:
    """The clip of ``backbone`` with ``frames`` / ``size`` in place of its own where given; None for privhar's model."""
    if backbone == OWN:
        return None
    clip = ZOO_CLIPS[backbone]
    return replace(clip, frames=frames or clip.frames, size=size or clip.size)
