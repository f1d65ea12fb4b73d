"""The ``privhar`` command line and what a user browses (the MLflow UI, the plots page, screenshots). The pipeline it
runs is in ``flows``; the stages compute in ``tasks``."""
