"""The video models: the project's 3-D ResNet and the model-zoo backbones, their checkpoints, clips as tensors, the
torch device, frozen-feature heads and selective tuning. One floor above tasks/core (which never imports it), beside
tasks/video_data and tasks/people_finding (docs/architecture.md)."""
