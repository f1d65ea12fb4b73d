"""Running the pipeline: the ``privhar stage`` commands dvc.yaml calls, and the Prefect flow, its tasks, deployment
and server. The command line above it is ``privhar``; the stages compute in ``tasks``."""
