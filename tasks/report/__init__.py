"""The report stage: paper-shaped tables, plots, the privacy ledger and results.md."""
