"""The data: dataset adapters, reading a video into frames, annotations, who the data subjects are, the federated
partition and the checks a dataset passes before a run. One floor above tasks/core (which never imports it), beside
tasks/video_models and tasks/people_finding (docs/architecture.md)."""
