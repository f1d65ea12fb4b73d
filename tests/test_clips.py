"""Model input: the gathered augmentation and the fused normalisation against their plain definitions."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tasks.video_models.clips import MEAN, STD, augment, normalise


def flip_pad_crop(clips: torch.Tensor, generator: torch.Generator, shift: int) -> torch.Tensor:
    """The augmentation as defined: flip half the clips, edge-pad by ``shift``, crop at a random offset."""
    flip = torch.rand(clips.shape[0], generator=generator) < 0.5
    clips = torch.where(flip.view(-1, 1, 1, 1, 1), clips.flip(-1), clips)
    height, width = clips.shape[-2:]
    padded = F.pad(clips.flatten(1, 2).float(), (shift,) * 4, mode="replicate")
    padded = padded.to(clips.dtype).view(*clips.shape[:3], height + 2 * shift, width + 2 * shift)
    offsets = torch.randint(0, 2 * shift + 1, (clips.shape[0], 2), generator=generator)
    return torch.stack(
        [padded[i, ..., y : y + height, x : x + width] for i, (y, x) in enumerate(offsets.tolist())]
    )


def test_augment_is_flip_pad_crop() -> None:
    clips = torch.randint(0, 256, (24, 3, 4, 9, 11), dtype=torch.uint8)
    for shift in (0, 1, 4):
        gathered = augment(clips, torch.Generator().manual_seed(shift), shift=shift)
        if shift == 0:
            flip = torch.rand(24, generator=torch.Generator().manual_seed(0)) < 0.5
            expected = torch.where(flip.view(-1, 1, 1, 1, 1), clips.flip(-1), clips)
        else:
            expected = flip_pad_crop(clips, torch.Generator().manual_seed(shift), shift)
        assert torch.equal(gathered, expected), shift


def test_augment_moves_and_flips() -> None:
    """Over many clips both flips and every offset occur (a broken draw would leave the clips as they are)."""
    clips = torch.arange(7 * 9, dtype=torch.float32).view(1, 1, 1, 7, 9).expand(400, 1, 1, 7, 9)
    out = augment(clips.contiguous(), torch.Generator().manual_seed(1), shift=2)
    centre = out[:, 0, 0, 3, 4]  # the source pixel under the centre: one of the 5 x 5 offsets
    assert len(set(centre.tolist())) == 25
    flipped = out[:, 0, 0, 3, 0] > out[:, 0, 0, 3, 8]  # a flipped clip's left edge is its right one
    assert 0.4 < flipped.float().mean() < 0.6


def test_normalise_is_the_formula() -> None:
    clips = torch.randint(0, 256, (2, 3, 4, 5, 6), dtype=torch.uint8)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1, 1)
    expected = (clips.double() / 255.0 - mean.double()) / std.double()
    assert torch.allclose(normalise(clips).double(), expected, atol=1e-5)
    assert normalise(clips).dtype == torch.float32
