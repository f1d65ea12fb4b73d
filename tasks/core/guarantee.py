"""The privacy guarantee a release claims, and who computed it.

Every ε privhar prints or registers is one of these: the value, δ, the accountant or theorem that
produced it (with its parameters), the **unit** it protects (pixel change, frame, video, person),
the **neighbouring relation** (add/remove or replace-one) and where its randomness came from
(secret, or seeded and so not private). A non-private release claims nothing: ε = ∞.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tasks.core.dp_randomness import SECURE
from tasks.core.errors import PrivharError


@dataclass(frozen=True)
class PrivacyGuarantee:
    epsilon: float
    delta: float
    accountant: str
    unit: str = "none"
    relation: str = "none"
    randomness: str = SECURE

    def within(self, max_epsilon: float) -> bool:
        """Whether this guarantee meets a target ε (``inf`` admits everything)."""
        return self.epsilon <= max_epsilon

    @property
    def private(self) -> bool:
        """A finite ε whose randomness an attacker cannot replay."""
        return math.isfinite(self.epsilon) and self.randomness == SECURE

    def as_tags(self) -> dict[str, str]:
        return {
            "epsilon": repr(self.epsilon),
            "delta": repr(self.delta),
            "accountant": self.accountant,
            "unit": self.unit,
            "relation": self.relation,
            "randomness": self.randomness,
        }

    @classmethod
    def from_tags(cls, tags: dict[str, str]) -> PrivacyGuarantee:
        return cls(
            float(tags.get("epsilon", "inf")),
            float(tags.get("delta", "0")),
            tags.get("accountant", "unknown"),
            tags.get("unit", "none"),
            tags.get("relation", "none"),
            tags.get("randomness", SECURE),
        )


NON_PRIVATE = PrivacyGuarantee(
    epsilon=math.inf, delta=0.0, accountant="none (non-private training)"
)


def data_guarantee(rows: list[dict]) -> PrivacyGuarantee:
    """What a protected dataset's manifest claims per video, or NON_PRIVATE for raw data.

    Stages that release data under DP (``dprp``, ``ldp``) write ``epsilon``, ``delta``,
    ``accountant``, ``unit``, ``relation`` and ``randomness`` columns. Each video is protected on
    its own with fresh noise, so a dataset of them is (max ε, max δ)-DP for that unit (parallel
    composition), and so is any model trained on it (post-processing).
    """
    if not rows or "epsilon" not in rows[0]:
        return NON_PRIVATE
    accountants = sorted({str(row["accountant"]) for row in rows})
    first = rows[0]
    return PrivacyGuarantee(
        max(float(row["epsilon"]) for row in rows),
        max(float(row["delta"]) for row in rows),
        "; ".join(accountants),
        str(first.get("unit", "none")),
        str(first.get("relation", "none")),
        str(first.get("randomness", SECURE)),
    )


AUDIT_COLUMNS = (
    "epsilon_audited",
    "audit_confidence",
    "audit_canaries",
    "audit_guesses",
    "audit_correct",
)  # a ledger's one-run audit columns (tasks.privacy.one_run_audit.Audit.columns)


def data_audit(rows: list[dict]) -> dict[str, Any]:
    """The one-run audit of the stage that released a protected dataset (the same on each of its rows: one audit per
    copy), where it ran: the columns a model trained on the copy carries as registry tags beside its ε (issue 82:
    the Video-DPRP versions had none)."""
    if not rows or rows[0].get("epsilon_audited") is None:
        return {}
    return {key: rows[0][key] for key in AUDIT_COLUMNS if key in rows[0]}


def strongest(*guarantees: PrivacyGuarantee) -> PrivacyGuarantee:
    """The smallest ε among guarantees that all hold for the same release.

    A model trained by a DP method on per-video-protected data satisfies both: the training
    method's (a change of one raw video changes one protected video) and the data's
    (post-processing). Each is a valid claim, so the tighter one is reported.
    """
    return min(guarantees, key=lambda guarantee: (guarantee.epsilon, guarantee.delta))


def check_delta(
    setting: str, delta: float, count: int, symbol: str, counted: str, context: str = ""
) -> None:
    """δ < 1/``symbol`` for ``count`` units, else one line naming ``setting`` (δ ≥ 1/N allows releasing one unit
    outright): the private and federated stages check it, and the index checks it against the dataset first."""
    if delta >= 1.0 / count:
        raise PrivharError(
            f"{setting} = {delta} is invalid{context}: expected δ < 1/{symbol} = {1.0 / count:.3g} ({counted})"
        )
