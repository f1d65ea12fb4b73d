"""Private training (issue 6): accountants, per-unit gradients, DP-SGD, multi-clip and MaskDP."""
