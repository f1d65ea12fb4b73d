"""Timings and measurements on this machine (``privhar bench ...``, ``make bench``): not part of any stage or run.

Each module measures what the stages in ``tasks/`` do and writes its JSON under ``reports/bench/``.
"""
