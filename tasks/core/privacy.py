"""The privacy guarantee a training method claims for its model, and who computed it.

Every ε privhar prints or registers is one of these: the value, δ, and the accountant or
theorem that produced it. A non-private method claims nothing: ε = ∞.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PrivacyGuarantee:
    epsilon: float
    delta: float
    accountant: str

    def within(self, max_epsilon: float) -> bool:
        """Whether this guarantee meets a target ε (``inf`` admits everything)."""
        return self.epsilon <= max_epsilon

    def as_tags(self) -> dict[str, str]:
        return {"epsilon": repr(self.epsilon), "delta": repr(self.delta), "accountant": self.accountant}

    @classmethod
    def from_tags(cls, tags: dict[str, str]) -> PrivacyGuarantee:
        return cls(float(tags.get("epsilon", "inf")), float(tags.get("delta", "0")), tags.get("accountant", "unknown"))


NON_PRIVATE = PrivacyGuarantee(epsilon=math.inf, delta=0.0, accountant="none (non-private training)")
