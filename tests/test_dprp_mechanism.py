"""Video-DPRP's mechanism: exact blocked computation, calibrated noise, one-line errors."""

import math

import numpy as np
import pytest
import torch

from tasks.core.errors import PrivharError
from tasks.core.seeding import derive_seed
from tasks.dprp.calibration import noise_scales
from tasks.dprp.mechanism import Projection, project, protect_video


def clip(t: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (t, h, w, 3), dtype=np.uint8)


def as_matrix(frames: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(frames.reshape(frames.shape[0], -1).astype(np.float64))


def test_blocked_projection_equals_a_dense_float64_reference():
    frames = clip(7, 9, 11)
    projection = Projection(seed=5, d=9 * 11 * 3, k=40, block_rows=50)  # blocks do not divide d
    x = as_matrix(frames)
    dense = projection.dense().double()
    reference = x @ dense
    # float32 products of 50-row blocks, summed in float64: relative error well under 1e-5
    assert torch.allclose(project(x.float(), projection), reference, rtol=1e-5, atol=1e-3)
    assert torch.allclose(projection.gram(), dense.T @ dense, rtol=1e-5, atol=1e-4)


def test_without_noise_and_full_rank_it_projects_x_onto_the_column_space_of_r():
    frames = clip(6, 8, 10)
    projection = Projection(seed=11, d=8 * 10 * 3, k=30, block_rows=64)
    out = protect_video(frames, projection, sigma1=0.0, sigma2=0.0, rank=30, noise_seed=1).frames
    dense = projection.dense().double()
    expected = (as_matrix(frames) @ dense @ torch.linalg.pinv(dense)).round().clamp(0, 255)
    difference = (as_matrix(out) - expected).abs()
    assert difference.max() <= 1 and (difference == 0).float().mean() >= 0.999  # float32 vs float64 at .5 ties


@pytest.mark.parametrize("shape", [(3, 8, 8), (1, 5, 7), (4, 9, 13)])  # T < k, T = 1, odd frame sizes
@pytest.mark.parametrize("rank", [0.25, 1.0])
def test_shapes_and_dtype(shape, rank):
    frames = clip(*shape)
    k = 16
    projection = Projection(seed=1, d=int(np.prod(shape[1:])) * 3, k=k, block_rows=32)
    out = protect_video(frames, projection, sigma1=2.0, sigma2=3.0, rank=rank, noise_seed=2)
    assert out.frames.shape == frames.shape and out.frames.dtype == np.uint8
    assert out.projected.shape == (shape[0], k)
    assert out.covariance is None if rank == 1.0 else out.covariance.shape == (k, k)  # Q is drawn only when used


def test_a_static_video_stays_static_without_noise():
    frames = np.repeat(clip(1, 6, 6), 5, axis=0)
    projection = Projection(seed=3, d=6 * 6 * 3, k=12)
    out = protect_video(frames, projection, sigma1=0.0, sigma2=0.0, rank=12, noise_seed=0).frames
    assert all(np.array_equal(out[0], frame) for frame in out)


def test_noise_has_the_calibrated_standard_deviation():
    """Sample standard deviations of P̃ − XR and Q − PᵀP against σ1, σ2.

    For n Gaussian samples, s/σ − 1 has standard error ≈ 1/√(2n); we accept 5 standard
    errors, a false-alarm rate below 1e-6 per check.
    """
    frames = clip(40, 8, 8)
    projection = Projection(seed=9, d=8 * 8 * 3, k=48)
    scales = noise_scales(epsilon=5.0, delta=1e-5, budget_split=0.8, k=48, d=192, calibration="paper", neighbour="frame")
    out = protect_video(frames, projection, sigma1=scales.sigma1, sigma2=scales.sigma2, rank=47, noise_seed=4)
    p = project(as_matrix(frames).float(), projection)
    for noise, sigma in ((out.projected - p, scales.sigma1), (out.covariance - p.T @ p, scales.sigma2)):
        n = noise.numel()
        assert abs(noise.std().item() / sigma - 1) < 5 / math.sqrt(2 * n)
        assert abs(noise.mean().item()) < 5 * sigma / math.sqrt(n)


CASES = [(2.0, 1e-5, 48, 0.8), (5.0, 1e-4, 3072, 0.8), (8.0, 1e-4, 3072, 0.5), (0.5, 1e-6, 100, 0.2)]


@pytest.mark.parametrize("epsilon, delta, k, b", CASES)
def test_paper_sigmas_match_theorems_3_and_4_as_printed(epsilon, delta, k, b):
    e1, d1, e2, d2 = b * epsilon, b * delta, (1 - b) * epsilon, (1 - b) * delta
    theta = 255 / np.sqrt(k)
    lg = np.log(2 / d1)
    sigma1 = theta * (1 / np.sqrt(k)) * np.sqrt(k + 2 * np.sqrt(k * lg) + 2 * lg) * np.sqrt(2 * (np.log(1 / (2 * d1)) + e1)) / e1
    sigma2 = theta * np.sqrt(np.sqrt(2 * np.log(1.25) / d2) / e2)
    got = noise_scales(epsilon=epsilon, delta=delta, budget_split=b, k=k, d=230400, calibration="paper", neighbour="frame")
    assert got.sigma1 == pytest.approx(sigma1, rel=1e-12) and got.sigma2 == pytest.approx(sigma2, rel=1e-12)
    assert (got.epsilon1 + got.epsilon2, got.delta1 + got.delta2) == pytest.approx((epsilon, delta))


@pytest.mark.parametrize("epsilon, delta, k, b", CASES)
@pytest.mark.parametrize("neighbour", ["frame", "pixel"])
def test_gaussian_sigmas_match_an_independent_computation(epsilon, delta, k, b, neighbour):
    d = 230400
    e1, d1, e2, d2 = b * epsilon, b * delta, (1 - b) * epsilon, (1 - b) * delta
    change = 255 * np.sqrt(d) if neighbour == "frame" else 255.0

    def chi(beta):  # Laurent-Massart upper quantile of chi-square with k degrees of freedom
        return k + 2 * np.sqrt(k * np.log(1 / beta)) + 2 * np.log(1 / beta)

    def mechanism(sensitivity, eps, dlt):
        return sensitivity * np.sqrt(2 * np.log(1.25 / dlt)) / eps

    e_p = change * np.sqrt(chi(d1 / 2) / k)
    e_q = change * np.sqrt(chi(d2 / 4) / k)
    row = 255 * np.sqrt(d) * (np.sqrt(d) + np.sqrt(k) + np.sqrt(2 * np.log(4 / d2))) / np.sqrt(k)
    got = noise_scales(epsilon=epsilon, delta=delta, budget_split=b, k=k, d=d, calibration="gaussian", neighbour=neighbour)
    assert got.sigma1 == pytest.approx(mechanism(e_p, e1, d1 / 2), rel=1e-12)
    assert got.sigma2 == pytest.approx(mechanism(2 * row * e_q + e_q ** 2, e2, d2 / 2), rel=1e-12)
    assert got.failure_probability == pytest.approx(d1 / 2 + d2 / 2)


def test_same_seed_same_bytes_and_each_video_its_own_r():
    frames = clip(4, 8, 8)
    def run(video_id):
        projection = Projection(seed=derive_seed(2026, "dprp", video_id), d=192, k=24)
        return projection, protect_video(frames, projection, sigma1=3.0, sigma2=5.0, rank=24,
                                         noise_seed=derive_seed(2026, "dprp-noise", video_id)).frames
    (r_a, first), (_, again), (r_b, other) = run("v1"), run("v1"), run("v2")
    assert first.tobytes() == again.tobytes()
    assert not torch.equal(r_a.dense(), r_b.dense()) and first.tobytes() != other.tobytes()


@pytest.mark.parametrize("kwargs, message", [
    ({"epsilon": 0.0}, "epsilon = 0.0 is invalid"), ({"epsilon": -1.0}, "epsilon = -1.0 is invalid"),
    ({"delta": 1.0}, "delta = 1.0 is invalid"), ({"delta": 0.0}, "delta = 0.0 is invalid"),
    ({"budget_split": 1.0}, "budget_split = 1.0 is invalid"), ({"budget_split": 0.0}, "budget_split = 0.0 is invalid"),
    ({"k": 193}, "k = 193 is invalid: expected 0 < k <= d = 192"), ({"k": 0}, "k = 0 is invalid"),
])
def test_bad_parameters_are_one_line(kwargs, message):
    arguments = {"epsilon": 5.0, "delta": 1e-5, "budget_split": 0.8, "k": 24, "d": 192, "calibration": "paper",
                 "neighbour": "frame", **kwargs}
    with pytest.raises(PrivharError, match=message) as raised:
        noise_scales(**arguments)
    assert "\n" not in str(raised.value)


def test_bad_rank_and_mismatched_frames_are_one_line():
    projection = Projection(seed=1, d=192, k=24)
    with pytest.raises(PrivharError, match="rank = 25 is invalid"):
        protect_video(clip(2, 8, 8), projection, sigma1=1, sigma2=1, rank=25, noise_seed=0)
    with pytest.raises(PrivharError, match="d = 300 values but the projection was built for d = 192"):
        protect_video(clip(2, 10, 10), projection, sigma1=1, sigma2=1, rank=24, noise_seed=0)


@pytest.mark.parametrize("r", [7, 30])  # the SVD path (r < k) and the Cholesky shortcut (r = k)
def test_reconstruction_equals_the_dense_formula(r):
    from tasks.dprp.mechanism import reconstruct

    projection = Projection(seed=13, d=8 * 10 * 3, k=30, block_rows=64)
    dense = projection.dense().double()
    generator = np.random.default_rng(5)
    p_noisy = torch.from_numpy(generator.normal(0, 50, (6, 30)))
    q = torch.from_numpy(generator.normal(0, 1, (30, 30)))
    v_r = torch.linalg.svd(q)[2][:r].T
    expected = p_noisy @ v_r @ torch.linalg.pinv(dense @ v_r)  # P̃ V_r (R V_r)⁺, float64
    got = reconstruct(p_noisy, q, projection, r).double()
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-3 * expected.abs().max().item())
