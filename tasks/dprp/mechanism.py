"""Algorithm 1 of Video-DPRP on one video, computed in blocks of R's rows.

    X (T × d, d = h·w·3, values 0..255)          line 4: frames flattened
    R ~ N(0, 1/k)^{d×k}                           line 5 (entries of standard deviation 1/√k)
    P = XR,  P̃ = P + M,  M ~ N(0, σ1²)^{T×k}      lines 5-6
    Q = PᵀP + N,  N ~ N(0, σ2²)^{k×k}              lines 7-8
    Q = UΣVᵀ                                        line 9
    X̃ = P̃ V_r (R V_r)⁺                             line 10/12 (see below)

Reconstruction. Line 12 prints X̃ = P̃ (R Vᵗ)⁺ Vᵗ, whose shapes do not multiply
(T×k · k×d · k×k). We use X̃ = P̃ V_r (R V_r)⁺ with V_r the top-r right singular vectors of
Q: P̃ V_r (T×r) are the private coordinates along the r main directions of the projected
video, and (R V_r)⁺ (r×d) maps them back to pixel space by least squares — so shapes work
(T×k · k×r · r×d = T×d) and the noisy covariance decides which directions survive. With
r = k, V_k is orthogonal and X̃ = P̃ R⁺, the paper's ε → ∞ limit being the projection of X
onto R's column space. Since R V_r has full column rank, (R V_r)⁺ = G⁻¹ V_rᵀ Rᵀ with
G = V_rᵀ (RᵀR) V_r, so only RᵀR (k×k) is ever needed, never R whole.

Blocks. R is generated in row blocks from a counter-based generator (Philox, the block
index in the counter), so any block can be regenerated exactly: one pass accumulates P
and RᵀR, a second regenerates the blocks for the back-projection X̃ = W Rᵀ with
W = P̃ V_r G⁻¹ V_rᵀ. Memory is O(k² + T·k + block·k); every product is a torch matmul.

Devices and precision. Every product runs on ``Projection.device`` (a GPU when ``base.device`` says
so), and everything — R, XR, RᵀR, the solve, the back-projection — is float64. In float32 the
rounding of X̃ to uint8 depended on how BLAS split a reduction over threads and which kernel the
CPU got (1 pixel in 3·10⁵ moved a grey level between 1 and 2 threads); in float64 a pixel moves
only if its exact value lies within ~10⁻⁹ of a half grey level (none of 11.8 M measured across 1 / 2
threads and AVX-512 / AVX2 / SSE4.2 kernels). The price is about 2x the float32 time on a CPU.
R's blocks come from NumPy's Philox on the CPU (``generator="numpy"``, the CPU default) or from
torch's generator on the device (``generator="torch"``, a GPU's Philox), seeded per block from
(seed, block index), so a block is still regenerated exactly and R never crosses the bus.
The two generators give different (equally distributed) R; the maths after R is the same.

Projection modes. ``per_video`` (the paper): R drawn per video from (seed, video_id).
``shared``: one R for the dataset, so RᵀR is computed once. The guarantee is the same —
R is public randomness, independent of the data, and the privacy proofs hold for any
fixed R drawn this way (the noise M, N is still fresh per video).
"""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from tasks.core.errors import PrivharError
from tasks.core.item_randomness import derive_seed
from tasks.core.storage import is_clip
from tasks.privacy.dprp_calibration import rank_of  # noqa: F401 (the budget plans with it too)

NOISE_STREAM_P, NOISE_STREAM_Q = 1, 2
# R, the products and their sums: the output's rounding to uint8 then does not depend on
# how BLAS splits a reduction over threads (float32 sums did: 1 pixel in 3·10⁵ moved one grey level between 1 and 2 threads)
DTYPE = torch.float64
GRAM_CHUNKS = (
    8  # column chunks of the lower block-triangle of RᵀR (flops: (c + 1)/(2c) of the full product)
)


def add_gram(gram: torch.Tensor, block: torch.Tensor, chunks: int = GRAM_CHUNKS) -> None:
    """Add the lower block-triangle of blockᵀ·block to ``gram`` (float64); :func:`symmetrise` completes it.

    RᵀR is symmetric, so only column chunk j of the rows j.. is computed — one matmul per chunk,
    d·k²·(c + 1)/c flops instead of 2·d·k² (BLAS's syrk, which torch does not expose).
    """
    k = block.shape[1]
    width = math.ceil(k / chunks)
    for start in range(0, k, width):
        stop = min(start + width, k)
        gram[start:, start:stop] += block[:, start:].T @ block[:, start:stop]


def symmetrise(lower: torch.Tensor) -> torch.Tensor:
    """The full matrix from its lower block-triangle (the block diagonal is already whole)."""
    return torch.tril(lower) + torch.tril(lower, -1).T


def gram_flops(d: int, k: int, chunks: int = GRAM_CHUNKS) -> float:
    """Flops :func:`add_gram` performs over all of R's d rows."""
    width = math.ceil(k / chunks)
    return sum(2.0 * d * (k - start) * min(width, k - start) for start in range(0, k, width))


def _philox(seed: int, stream: int, block: int) -> np.random.Generator:
    """A counter-based stream: key = seed (up to 128 bits: secret seeds fill them), counter = (0, 0, block, stream)."""
    return np.random.Generator(np.random.Philox(key=seed % 2**128, counter=[0, 0, block, stream]))


class BufferPool:
    """Float64 arrays for R's blocks, reused by shape across blocks, passes and videos.

    On this project's VM a page touched for the first time costs more than filling it with
    Gaussian numbers (2.8 GB: 9 s), so blocks are generated into arrays that already exist.
    At most (prefetch threads + 1) arrays per projection in use are ever allocated.
    """

    def __init__(self) -> None:
        self._free: dict[tuple[int, int], list[np.ndarray]] = {}
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, int]) -> np.ndarray:
        with self._lock:
            free = self._free.get(shape)
            if free:
                return free.pop()
        return np.empty(shape, np.float64)

    def give(self, array: np.ndarray) -> None:
        with self._lock:
            self._free.setdefault(array.shape, []).append(array)


BUFFERS = BufferPool()


@dataclass
class Projection:
    """R (d × k, N(0, 1/k)) as regenerable row blocks, with RᵀR computed once.

    ``keep=True`` (the ``shared`` mode, when d·k floats fit comfortably) keeps the blocks
    after their first generation instead of regenerating them for every video.
    """

    seed: int
    d: int
    k: int
    block_rows: int = 8192
    keep: bool = False
    threads: int = 2
    device: torch.device = torch.device("cpu")
    generator: str = (
        "numpy"  # numpy: Philox on the CPU | torch: torch's generator on ``device``, per block
    )
    _gram: torch.Tensor | None = field(default=None, repr=False)
    _factor: torch.Tensor | None = field(default=None, repr=False)
    _kept: list[torch.Tensor] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.k <= self.d:
            raise PrivharError(f"dprp: k = {self.k} is invalid: expected 0 < k <= d = {self.d}")
        if self.generator not in ("numpy", "torch"):
            raise PrivharError(
                f"dprp: generator {self.generator!r} is invalid: expected numpy or torch"
            )
        self.device = torch.device(self.device)

    @property
    def _pooled(self) -> bool:
        """Blocks live in the CPU buffer pool (NumPy's generator, kept on the CPU)."""
        return self.generator == "numpy" and self.device.type == "cpu"

    def _block(self, index: int) -> torch.Tensor:
        start = index * self.block_rows
        stop = min(start + self.block_rows, self.d)
        if self.generator == "torch":
            stream = torch.Generator(self.device).manual_seed(
                derive_seed(self.seed, "R-block", index)
            )
            return torch.randn(
                stop - start, self.k, generator=stream, device=self.device, dtype=DTYPE
            ).mul_(1.0 / math.sqrt(self.k))
        values = BUFFERS.take((stop - start, self.k))
        _philox(self.seed, 0, index).standard_normal(dtype=np.float64, out=values)
        block = torch.from_numpy(values).mul_(1.0 / math.sqrt(self.k))
        if self._pooled:
            return block
        on_device = block.to(self.device)
        BUFFERS.give(values)
        return on_device

    def blocks(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        """(first row, last row + 1, R[first:last] as float64) for every block, in order.

        A block is valid until the next one is requested (its array is then reused), unless ``keep``.

        Blocks are generated ``threads`` at a time ahead of use (numpy releases the GIL while
        it fills an array), so generation overlaps the matmuls that consume them.
        """
        count = math.ceil(self.d / self.block_rows)
        bounds = [
            (i * self.block_rows, min((i + 1) * self.block_rows, self.d)) for i in range(count)
        ]
        if self._kept is not None:
            yield from ((start, stop, block) for (start, stop), block in zip(bounds, self._kept))
            return
        kept: list[torch.Tensor] = []
        with ThreadPoolExecutor(max_workers=max(1, self.threads)) as pool:
            pending = deque(pool.submit(self._block, i) for i in range(min(self.threads, count)))
            for index, (start, stop) in enumerate(bounds):
                block = pending.popleft().result()
                if index + self.threads < count:
                    pending.append(pool.submit(self._block, index + self.threads))
                yield start, stop, block
                if self.keep:
                    kept.append(block)
                elif self._pooled:
                    BUFFERS.give(block.numpy())  # the consumer is done with it: reuse its pages
        if self.keep:
            self._kept = kept

    def release(self) -> None:
        """Return kept blocks to the pool (a per-video R is done): the next video reuses their pages."""
        for block in self._kept or []:
            if self._pooled:
                BUFFERS.give(block.numpy())
        self._kept = None

    def dense(self) -> torch.Tensor:
        """R whole (for tests and small sizes only)."""
        return torch.cat(
            [block.clone() for _, _, block in self.blocks()]
        )  # blocks are recycled after use

    def gram(self) -> torch.Tensor:
        """RᵀR (k × k, float64), accumulated block by block."""
        if self._gram is None:
            gram = torch.zeros(self.k, self.k, dtype=torch.float64, device=self.device)
            for _, _, block in self.blocks():
                add_gram(gram, block)
            self._gram = symmetrise(gram)
        return self._gram

    def gram_factor(self) -> torch.Tensor:
        """The Cholesky factor of RᵀR, computed once (k³/3 flops: at k = 12288 that is 0.6 TFLOP)."""
        if self._factor is None:
            self._factor = torch.linalg.cholesky(self.gram())
        return self._factor


def generator_for(device: torch.device, secret: bool = False) -> str:
    """R's generator: NumPy's Philox on the CPU (the outputs so far), torch's on a GPU (R never crosses the bus).

    A ``secret`` R (per video, secure randomness) always comes from NumPy's Philox under its 128-bit key,
    drawn on the CPU and moved: a GPU generator takes a 64-bit seed, below the 128 bits a secret needs.
    """
    return "numpy" if secret or torch.device(device).type == "cpu" else "torch"


def fits_comfortably(d: int, k: int, share: float = 1 / 4) -> bool:
    """Whether R (d × k float64) takes at most ``share`` of this machine's memory.

    Then a per-video R is kept between the two passes instead of generated twice; the paper's
    configuration (5.7 GB) qualifies on a 24 GiB machine. Otherwise blocks are regenerated and
    memory stays O(k² + T·k + block·k).
    """
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return 8 * d * k <= share * memory


def project(x: torch.Tensor, projection: Projection) -> torch.Tensor:
    """P = XR (T × k, float64), one block of R at a time.

    If RᵀR is not known yet it is accumulated in the same pass, so each block is generated once.
    """
    x = x.to(projection.device, DTYPE)
    p = torch.zeros(x.shape[0], projection.k, dtype=torch.float64, device=projection.device)
    gram = (
        None
        if projection._gram is not None
        else torch.zeros(projection.k, projection.k, dtype=torch.float64, device=projection.device)
    )
    for start, stop, block in projection.blocks():
        p += x[:, start:stop] @ block
        if gram is not None:
            add_gram(gram, block)
    if gram is not None:
        projection._gram = symmetrise(gram)
    return p


def back_project(w: torch.Tensor, projection: Projection) -> torch.Tensor:
    """W Rᵀ (T × d, float64, on the projection's device), regenerating R's blocks."""
    out = torch.empty(w.shape[0], projection.d, dtype=DTYPE, device=projection.device)
    for start, stop, block in projection.blocks():
        out[:, start:stop] = w @ block.T
    return out


def reconstruct(
    p_noisy: torch.Tensor, q: torch.Tensor | None, projection: Projection, r: int
) -> torch.Tensor:
    """X̃ = P̃ V_r (R V_r)⁺ = P̃ V_r G⁻¹ V_rᵀ Rᵀ, G = V_rᵀ RᵀR V_r (see the module docstring).

    With r = k, V is orthogonal and V (Vᵀ A V)⁻¹ Vᵀ = A⁻¹ for A = RᵀR: the result is P̃ (RᵀR)⁻¹ Rᵀ
    whatever Q is, so the SVD is skipped and A (symmetric positive definite) is solved by
    Cholesky. Note what this means: at full rank the noisy covariance — and the share 1 − b
    of the budget spent on it — does not change the output at all.
    """
    if r == projection.k:
        w = torch.cholesky_solve(p_noisy.T.contiguous(), projection.gram_factor()).T
        return back_project(w, projection)
    if q is None:
        raise PrivharError(f"dprp: rank r = {r} < k = {projection.k} needs the noisy covariance Q")
    gram = projection.gram()
    _, _, vh = torch.linalg.svd(q)
    v_r = vh[:r].T  # k × r: top-r right singular vectors of Q
    g = v_r.T @ gram @ v_r
    w = p_noisy @ v_r @ torch.linalg.pinv(g, hermitian=True) @ v_r.T
    return back_project(w, projection)


@dataclass(frozen=True)
class Protected:
    frames: np.ndarray  # (T, H, W, 3) uint8
    projected: torch.Tensor  # P̃ (T × k)
    covariance: torch.Tensor | None  # Q (k × k); None at full rank, where it is not used


def protect_video(
    frames: np.ndarray,
    projection: Projection,
    *,
    sigma1: float,
    sigma2: float,
    rank: int | float,
    noise_seed: int,
) -> Protected:
    """Algorithm 1 on one (T, H, W, 3) uint8 clip; the reconstruction in the same layout, uint8.

    At full rank (r = k) X̃ does not depend on Q (see :func:`reconstruct`), so Q is not drawn:
    the output is the same as if it were, and the ledger still charges (ε2, δ2) for it —
    a conservative account. Drawing N would cost k² normals per video (151 M at k = 12288).
    """
    if not is_clip(frames):
        raise PrivharError(
            f"dprp: expected frames (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}"
        )
    t = frames.shape[0]
    d = int(np.prod(frames.shape[1:]))
    if d != projection.d:
        raise PrivharError(
            f"dprp: a frame has d = {d} values but the projection was built for d = {projection.d}"
        )
    x = torch.from_numpy(frames.reshape(t, d).astype(np.float64))
    p = project(x, projection)
    m = torch.from_numpy(
        _philox(noise_seed, NOISE_STREAM_P, 0).standard_normal((t, projection.k))
    ).to(projection.device)
    p_noisy = p + sigma1 * m
    r = rank_of(rank, projection.k)
    q = None
    if r < projection.k:
        n = torch.from_numpy(
            _philox(noise_seed, NOISE_STREAM_Q, 0).standard_normal((projection.k, projection.k))
        )
        n = n.to(projection.device)
        q = p.T @ p + sigma2 * n
    x_tilde = reconstruct(p_noisy, q, projection, r)
    pixels = x_tilde.round_().clamp_(0, 255).to(torch.uint8).cpu().numpy().reshape(frames.shape)
    return Protected(pixels, p_noisy.cpu(), None if q is None else q.cpu())
