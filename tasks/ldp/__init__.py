"""Local differential privacy (paper 002): DCAConv features, k-ary randomized response, learners on perturbed data."""
