"""Who the data subjects of a manifest are, and which privacy units hold each of them.

A row names its people in ``identities`` (a list) or ``identity``. A dataset without either
(no annotation of who is who) makes each video its own subject — the report says so.

With ``private.unit: person`` each video belongs to one unit: its first identity (the primary
actor). A person who also appears in another person's video is then held by that unit too: their
ε is group privacy over every unit that holds one of their videos.

>>> rows = [{"identities": [0]}, {"identities": [0, 1]}, {"identities": [1]}]
>>> person_videos(rows)
{0: [0, 1], 1: [1, 2]}
>>> owners, units = person_units(rows)
>>> owners.tolist(), units
([0, 0, 1], {0: 1, 1: 2})
"""

from __future__ import annotations

from typing import Any

import torch


def named_people(row: dict[str, Any]) -> list[int]:
    """The subjects one row names (``identities``, or ``identity``); empty when it names nobody."""
    people = row.get("identities")
    if people is None:
        people = [row.get("identity")] if row.get("identity") is not None else []
    return [int(person) for person in people if person is not None]


def people_in(row: dict[str, Any], index: int) -> list[int]:
    """The subjects of one row; a row that names nobody is its own subject (−1 − index)."""
    return named_people(row) or [-1 - index]


def unnamed_videos(rows: list[dict[str, Any]]) -> int:
    """How many rows name no subject (each is then its own subject: a person in several is not seen as one)."""
    return sum(people_in(row, index)[0] < 0 for index, row in enumerate(rows))


def subjects_statement(rows: list[dict[str, Any]]) -> str:
    """One sentence for the report: who the data subjects are, and how many videos name nobody."""
    unnamed = unnamed_videos(rows)
    named = len(person_videos(rows)) - unnamed
    kinds = sorted({str(row["subject"]).split(":")[0] for row in rows if row.get("subject")})
    told = (
        "the dataset's subjects (UCF101 group, HMDB51 source video or the data.subjects CSV)"
        if kinds
        else "the dataset's identities"
    )
    if not unnamed:
        return f"Data subjects: {named} people, from {told}."
    return (
        f"Data subjects: {named} people from {told}, and {unnamed} of {len(rows)} videos that name nobody: each of "
        "those is counted as its own subject, so a person in several of them is under-counted — supply a "
        "data.subjects CSV (video_id, subject) to bound them."
    )


def person_videos(rows: list[dict[str, Any]]) -> dict[int, list[int]]:
    """Each subject's row indices."""
    found: dict[int, list[int]] = {}
    for index, row in enumerate(rows):
        for person in people_in(row, index):
            found.setdefault(person, []).append(index)
    return dict(sorted(found.items()))


def videos_per_person(rows: list[dict[str, Any]]) -> dict[int, int]:
    """How many of ``rows`` hold each subject: the group size of a person-level bound."""
    return {person: len(videos) for person, videos in person_videos(rows).items()}


def privacy_units(
    rows: list[dict[str, Any]], unit: str
) -> tuple[torch.Tensor | None, int, dict[int, int]]:
    """Under DP unit ``unit`` (video or person): (each row's unit — None when every video is its own —, how many units
    are sampled, how many units hold each subject). The stage and the budget plan both count through it."""
    if unit == "video":
        return None, len(rows), videos_per_person(rows)
    owners, held = person_units(rows)
    return owners, int(owners.max()) + 1, held


def person_units(rows: list[dict[str, Any]]) -> tuple[torch.Tensor, dict[int, int]]:
    """(the unit 0..U−1 of each row — its first subject —, how many units hold each subject)."""
    primaries = [people_in(row, index)[0] for index, row in enumerate(rows)]
    numbering = {person: unit for unit, person in enumerate(sorted(set(primaries)))}
    owners = torch.tensor([numbering[person] for person in primaries])
    units = {
        person: len({int(owners[index]) for index in videos})
        for person, videos in person_videos(rows).items()
    }
    return owners, units
