"""Discriminant Component Analysis (paper 002 eq. 5-12): a supervised PCA with two ridges.

S_B = Σ_k N_k (μ_k − μ)(μ_k − μ)ᵀ (eq. 5), S_W = Σ_k Σ_{i∈C_k} (x_i − μ_k)(x_i − μ_k)ᵀ (eq. 6),
S̄′ = S_B + S_W + (ρ + ρ′) I (eq. 7-10), and the leading eigenvectors of (S_W + ρ I)⁻¹ S̄′ (eq. 11)
project the data (eq. 12). The eigenproblem is solved as the symmetric-definite pencil
S̄′ u = λ S_W′ u, so the components are orthonormal in the S_W′ metric (Uᵀ S_W′ U = I): the
matrix of eq. 11 is not symmetric, and its "UΛUᵀ" holds only in that metric.

Defaults: ρ = ``ridge`` × the largest eigenvalue of S_W (1e-3: a ridge relative to the data's own
scale, as the paper gives none), ρ′ = 0. The signal subspace has rank ≤ K − 1 and the paper caps
the components at K (L_r ≤ K); asking for more is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import eigh

from tasks.core.errors import PrivharError


@dataclass(frozen=True)
class Dca:
    components: np.ndarray  # (m, k): eq. 12's W_dca
    eigenvalues: np.ndarray  # (k,), decreasing
    mean: np.ndarray  # (m,)
    within: np.ndarray  # (m, m): S_W′, the metric the components are orthonormal in

    def project(self, data: np.ndarray) -> np.ndarray:
        """Eq. 12: X W_dca (on the mean-removed data)."""
        return (data - self.mean) @ self.components


def scatter_matrices(
    data: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(S_B, S_W, μ) of eq. 5-6, accumulated per class (N may be millions of patches)."""
    data = np.asarray(data, dtype=np.float64)
    mean = data.mean(axis=0)
    between = np.zeros((data.shape[1], data.shape[1]))
    within = np.zeros_like(between)
    for label in np.unique(labels):
        members = data[labels == label]
        centre = members.mean(axis=0)
        offset = centre - mean
        between += len(members) * np.outer(offset, offset)
        centred = members - centre
        within += centred.T @ centred
    return between, within, mean


def fit_dca(
    data: np.ndarray,
    labels: np.ndarray,
    components: int,
    *,
    ridge: float = 1e-3,
    ridge_between: float = 0.0,
) -> Dca:
    """The ``components`` leading discriminant components of ``data`` (N × m) with class ``labels``."""
    classes = len(np.unique(labels))
    if classes < 2:
        raise PrivharError(f"DCA: the data has {classes} class; it needs at least 2")
    if components > classes:
        raise PrivharError(
            f"DCA: {components} components asked, but the signal subspace of {classes} classes "
            f"has rank < {classes}; at most L ≤ K = {classes} (paper 002)"
        )
    if components > data.shape[1]:
        raise PrivharError(
            f"DCA: {components} components asked of {data.shape[1]}-dimensional data"
        )
    between, within, mean = scatter_matrices(data, labels)
    scale = float(np.linalg.eigvalsh(within)[-1]) or 1.0
    rho, rho_between = ridge * scale, ridge_between * scale
    within_ridged = within + rho * np.eye(len(within))  # eq. 9
    total = between + within + (rho + rho_between) * np.eye(len(within))  # eq. 10
    values, vectors = eigh(total, within_ridged)  # ascending
    order = np.argsort(values)[::-1][:components]
    return Dca(vectors[:, order], values[order], mean, within_ridged)
