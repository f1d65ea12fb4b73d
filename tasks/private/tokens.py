"""MaskDP's tokenizer f_tok (paper 001, Algorithm 1 line 5): split a clip into public and private tokens.

A token is a ``[t, h, w]`` patch of the clip (edge tokens may be smaller). It is public when at
least ``public_threshold`` of its pixels are public in the anonymize stage's mask r_i (rendered
avatar pixels), else private. Inside a public token only the avatar pixels themselves are public
(:func:`public_pixels`): a token that is half avatar would otherwise put real pixels — the edge of
the person, the background next to them — into the noise-free public gradient (at threshold 0.5,
20 % of the public view's pixels were real). The other pixels of a public token go to the private
view, so every real pixel is clipped and noised.

How the tokens reach a CNN: a 3-D CNN cannot drop tokens as a transformer does, so each view
keeps the clip's shape and zeroes the other set's tokens *after* normalisation (zero is the
dataset's mean colour). The private view holds no public pixel and — what the privacy argument
needs — the public view holds no private pixel, so a change to one video's private tokens moves
only its (clipped, noised) private gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def public_token_map(
    public_pixels: torch.Tensor, token: tuple[int, int, int], threshold: float
) -> torch.Tensor:
    """Per pixel (N, T, H, W) bool: does the pixel's token count as public? From 0/1 masks (N, T, H, W)."""
    shares = F.avg_pool3d(
        public_pixels.float().unsqueeze(1), kernel_size=token, stride=token, ceil_mode=True
    ).squeeze(1)
    public = shares >= threshold
    for axis, size in zip((1, 2, 3), token):
        public = public.repeat_interleave(size, dim=axis)
    return public[:, : public_pixels.shape[1], : public_pixels.shape[2], : public_pixels.shape[3]]


def public_pixels(
    masks: torch.Tensor, token: tuple[int, int, int], threshold: float
) -> torch.Tensor:
    """Per pixel (N, T, H, W) bool: public when its token is public *and* the pixel itself is avatar (0/1 ``masks``)."""
    return public_token_map(masks, token, threshold) & (masks > 0.5)


def token_views(clips: torch.Tensor, public: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(private view, public view) of normalised clips (N, 3, T, H, W) under a token map (N, T, H, W)."""
    keep = public.unsqueeze(1).to(clips.dtype)
    return clips * (1 - keep), clips * keep
