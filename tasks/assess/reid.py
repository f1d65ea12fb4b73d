"""f_id (paper 004 eq. 16-18): re-identification by face recognisers trained on raw faces.

Three OpenCV recognisers (LBPH, Eigenfaces, Fisherfaces, as in the paper's §5) learn the raw
training faces; each protected test face is recognised inside its ground-truth box, and a face
counts as recognised when *any* recogniser names the right person (§5: "at each frame we chose
the best-performing recogniser": the strongest attacker). The recognisers always answer (no
rejection threshold), as the paper notes of OpenCV's.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

import cv2
import numpy as np

from tasks.assess.faces import Occurrence
from tasks.assess.fusion import fused_pairs, ssim_groups
from tasks.core.errors import PrivharError

LOG = logging.getLogger(__name__)
RECOGNISERS = ("lbph", "eigen", "fisher")


class FaceRecognisers:
    """LBPH (radius 1, 8 neighbours, 4×4 grid), Eigenfaces and Fisherfaces trained on the same faces."""

    def __init__(self, faces: list[np.ndarray], identities: list[int]) -> None:
        if len(set(identities)) < 2:
            raise PrivharError(
                f"face recognition needs faces of at least 2 people in the training split, "
                f"found {len(set(identities))}"
            )
        self.faces, self.identities = faces, identities
        labels = np.asarray(identities, dtype=np.int32)
        self.models = {
            "lbph": cv2.face.LBPHFaceRecognizer_create(radius=1, neighbors=8, grid_x=4, grid_y=4),
            "eigen": cv2.face.EigenFaceRecognizer_create(num_components=min(48, len(faces) - 1)),
        }
        people = len(set(identities))
        # Fisherfaces: PCA to N − C dimensions, then LDA to C − 1 (OpenCV asserts it)
        if len(faces) >= 2 * people - 1:
            self.models["fisher"] = cv2.face.FisherFaceRecognizer_create()
        else:
            LOG.warning(
                "face re-identification without Fisherfaces: %d training faces of %d people (it needs at least "
                "2 × people − 1 = %d; raise assess.faces_per_video)",
                len(faces),
                people,
                2 * people - 1,
            )
        for model in self.models.values():
            model.train(faces, labels)

    def __reduce__(
        self,
    ) -> tuple:  # OpenCV's models do not pickle; retraining from the faces is fast
        return FaceRecognisers, (self.faces, self.identities)

    def recognise(self, face: np.ndarray) -> dict[str, int]:
        """Each recogniser's top-ranked identity for one face crop."""
        return {name: int(model.predict(face)[0]) for name, model in self.models.items()}

    def names_right(self, face: np.ndarray, identity: int) -> bool:
        return identity in self.recognise(face).values()


def identification_ind(recognised: list[bool]) -> float:
    """Eq. 16: 1 − h_id_ind / Σ occurrences; h counts the occurrences recognised."""
    return 1.0 - sum(recognised) / len(recognised) if recognised else 1.0


def identification_aggr(occurrences: list[Occurrence], recognised: list[bool]) -> float:
    """Eq. 17: a person recognised once is recognised in all their occurrences (perfect tracking)."""
    if not occurrences:
        return 1.0
    exposed = {occurrence.identity for occurrence, hit in zip(occurrences, recognised) if hit}
    return 1.0 - sum(occurrence.identity in exposed for occurrence in occurrences) / len(
        occurrences
    )


def identification_fused(
    recognisers: FaceRecognisers,
    occurrences: list[Occurrence],
    faces: list[np.ndarray],
    *,
    threshold: float = 0.7,
    pairs_per_person: int,
) -> float:
    """Eq. 18: each person's protected faces grouped by SSIM ≥ threshold, fused pairwise (2-level SWT);
    one fused face recognised as the person exposes all their occurrences.

    The loop breaks at the first recognised fused face, as eq. 18's algorithm does; at most
    ``pairs_per_person`` pairs are tried per person (spread evenly over the groups' pairs).
    """
    if not occurrences:
        return 1.0
    by_person: dict[int, list[np.ndarray]] = defaultdict(list)
    for occurrence, face in zip(occurrences, faces):
        by_person[occurrence.identity].append(face)
    exposed = set()
    for identity, images in by_person.items():
        groups = ssim_groups(images, threshold)
        if any(
            recognisers.names_right(fused, identity)
            for fused in fused_pairs(images, groups, pairs_per_person)
        ):
            exposed.add(identity)
    return 1.0 - sum(occurrence.identity in exposed for occurrence in occurrences) / len(
        occurrences
    )


def recognised_flags(
    recognisers: FaceRecognisers, occurrences: Iterable[Occurrence], faces: Iterable[np.ndarray]
) -> list[bool]:
    return [
        recognisers.names_right(face, occurrence.identity)
        for occurrence, face in zip(occurrences, faces)
    ]
