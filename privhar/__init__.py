"""The ``privhar`` command line and what a user browses (the MLflow UI, the plots page, screenshots), and
:func:`privhar.protector` for a program with frames of its own. The pipeline it runs is in ``flows``; the stages compute
in ``tasks``."""

from privhar.frames import protector

__all__ = ["protector"]
