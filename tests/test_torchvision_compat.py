"""The torchvision shim: torchvision imports, and the declared NMS is real NMS."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tasks.torchvision_compat as compat


def reference_nms(boxes: torch.Tensor, scores: torch.Tensor, threshold: float) -> list[int]:
    """Textbook greedy NMS, one pair at a time."""

    def iou(a: torch.Tensor, b: torch.Tensor) -> float:
        width = max(0.0, float(min(a[2], b[2]) - max(a[0], b[0])))
        height = max(0.0, float(min(a[3], b[3]) - max(a[1], b[1])))
        inter = width * height
        union = float((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])) - inter
        return inter / union if union > 0 else 0.0

    keep: list[int] = []
    for i in sorted(range(len(scores)), key=lambda k: -float(scores[k])):
        if all(iou(boxes[i], boxes[j]) <= threshold for j in keep):
            keep.append(i)
    return keep


def test_torchvision_and_pytorchvideo_import():
    import pytorchvideo.models  # noqa: F401
    import torchvision  # noqa: F401

    assert hasattr(torch.ops.torchvision, "nms")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 50), st.floats(0, 50), st.floats(1, 30), st.floats(1, 30), st.floats(0, 1)
        ),
        min_size=0,
        max_size=12,
        unique_by=lambda box: box[4],
    ),
    st.floats(0.1, 0.9),
)
def test_declared_nms_matches_reference(rows, threshold):
    boxes = torch.tensor(
        [[x, y, x + w, y + h] for x, y, w, h, _ in rows], dtype=torch.float32
    ).reshape(-1, 4)
    scores = torch.tensor([s for *_, s in rows], dtype=torch.float32)
    kept = torch.ops.torchvision.nms(boxes, scores, threshold).tolist()
    assert kept == reference_nms(boxes, scores, threshold)
    assert kept == compat.greedy_nms(boxes, scores, threshold).tolist()
