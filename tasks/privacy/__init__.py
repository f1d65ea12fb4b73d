"""The privacy maths every DP stage shares: accountants and their trade-off curves, the calibrations of σ from ε,
the budget (``privacy.max_epsilon``) and the ledger of releases made. Between the shared layer (``tasks/core``,
which never imports it) and the stages (docs/architecture.md)."""
