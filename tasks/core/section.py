"""What every params section is built from: a pydantic model that refuses unknown keys and coerces no type, the
value types the sections share, and the check of a per-family or per-tuning mapping's keys."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

PositiveInt = Annotated[int, Field(gt=0)]


Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


FrameSize = Annotated[list[Annotated[int, Field(ge=8, le=4096)]], Field(min_length=2, max_length=2)]


def known_keys(keys: Any, known: Any, what: str) -> None:
    """Refuse a per-family or per-tuning mapping with a key that names none of ``known``: a typo would be ignored."""
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise ValueError(
            f"{', '.join(map(repr, unknown))} {'names' if len(unknown) == 1 else 'name'} no {what}: expected one of "
            + ", ".join(known)
        )


class Section(BaseModel):
    """A params section: unknown keys are errors, types are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
