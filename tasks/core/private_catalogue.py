"""The private training methods (stages ``train-private@<method>``), one catalogue entry each.

A method's facts — which copy it learns from, what its DP unit and neighbouring relation are, how the ledger and the
private table name it — live here, once; params validates ``private.methods`` against it, the stage, the budget plan,
the accounting, the ledger and the table read it (as pytorchvideo resolves a config string once, in one factory).

>>> CATALOGUE["dp_sgd_person"].unit, CATALOGUE["maskdp"].relation
('person', 'replace-one')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Unit = Literal["video", "person"]


@dataclass(frozen=True)
class PrivateMethod:
    """One private training method.

    ``learns_from`` is the copy whose clips it trains on (``raw`` decoded frames or the ``avatar`` copy); ``masked``
    methods also read the avatar copy's public masks and use paper 001's masked adjacency (replace-one);
    ``views`` says what one unit's rows are; ``unit`` fixes the DP unit (None: ``private.unit`` decides).
    """

    name: str
    learns_from: Literal["raw", "avatar"]
    views: Literal["clip", "multiclip", "tokens"]
    semantics: str  # the registry's tag: what the guarantee covers
    mechanism: str  # the privacy ledger's words
    data: str  # the private table's row: the data …
    training: str  # … and how it was trained ({clips}: private.clips_per_video)
    note: str = ""  # a footnote of the private table
    unit: Unit | None = None

    @property
    def masked(self) -> bool:
        return self.views == "tokens"

    @property
    def relation(self) -> Literal["add/remove", "replace-one"]:
        """MaskDP's masked adjacency replaces one unit's private tokens; the others add or remove a unit."""
        return "replace-one" if self.masked else "add/remove"

    def unit_under(self, configured: Unit) -> Unit:
        """The DP unit of this method when ``private.unit`` is ``configured``."""
        return self.unit or configured


CATALOGUE: dict[str, PrivateMethod] = {
    method.name: method
    for method in (
        PrivateMethod(
            "dp_sgd",
            "raw",
            "clip",
            "DP-SGD; add/remove of one unit",
            "DP-SGD (Opacus, Poisson sampling, per-unit clipping)",
            "real",
            "DP-SGD",
        ),
        PrivateMethod(
            "dp_sgd_person",
            "raw",
            "clip",
            "person-level DP-SGD; add/remove of one person and all their videos",
            "person-level DP-SGD (Poisson sampling of people, each person's videos clipped as one unit)",
            "real",
            "DP-SGD, person-level",
            unit="person",
        ),
        PrivateMethod(
            "dp_sgd_avatar",
            "avatar",
            "clip",
            "DP-SGD on the avatar copy; add/remove of one unit",
            "DP-SGD on the avatar copy (Opacus)",
            "avatar-anonymized",
            "DP-SGD",
        ),
        PrivateMethod(
            "multiclip",
            "raw",
            "multiclip",
            "multi-clip DP-SGD, K clips averaged per video; add/remove of one unit",
            "MultiClip DP-SGD (per-video gradient over K clips, clipped once)",
            "real",
            "MultiClip-DP ({clips} clips)",
        ),
        PrivateMethod(
            "maskdp",
            "avatar",
            "tokens",
            "MaskDP (paper 001 Def. 2-3): masked adjacency, one unit's private tokens replaced; labels not protected",
            "MaskDP-SGD (masked adjacency: private tokens clipped and noised)",
            "avatar-anonymized",
            "MaskDP",
        ),
        PrivateMethod(
            "maskdp_real",
            "raw",
            "tokens",
            "MaskDP on real clips: the real person is in the public tokens (domain-gap row, not private for them)",
            "MaskDP-SGD on raw clips (masked adjacency; the real person in public tokens is NOT protected)",
            "real*",
            "MaskDP",
            "* real person visible in the public tokens: not private for them, listed to show "
            "the domain gap (paper 001 Table 2)",
        ),
    )
}
PRIVATE_METHODS = tuple(CATALOGUE)
