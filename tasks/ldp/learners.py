"""Classifiers the untrusted data user fits on randomized-response output (paper 002).

- Naive Bayes: per class and feature, the value frequencies are estimated with eq. 13-14 from the
  perturbed training codes, negatives clipped to 0, one pseudo-count (Laplace) added, renormalised.
- KNN: the k nearest perturbed training codes in Hamming distance (the number of features whose
  values differ: randomized response replaces a value with any other, so no value is "near" another).
- Nearest centroid: centroids estimated by eq. 44, μ̂_k = Σ_v v ĉ_k(v) / N_k, the Euclidean nearest wins (eq. 43).

All are tested on clean (unperturbed) test codes: the data user classifies its own data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.ldp.randomized_response import estimate_counts


@dataclass
class NaiveBayes:
    log_prior: np.ndarray  # (K,)
    log_frequencies: np.ndarray  # (K, d, m)

    @classmethod
    def fit(
        cls, codes: np.ndarray, labels: np.ndarray, d: int, epsilon: float, classes: int
    ) -> NaiveBayes:
        frequencies = []
        for label in range(classes):
            members = codes[labels == label]
            counts = (
                np.maximum(estimate_counts(members, d, epsilon), 0.0) + 1.0
                if len(members)
                else np.ones((d, codes.shape[1]))
            )
            frequencies.append(counts / counts.sum(axis=0, keepdims=True))
        prior = np.bincount(labels, minlength=classes) + 1.0
        return cls(np.log(prior / prior.sum()), np.log(np.stack(frequencies)))

    def posteriors(self, codes: np.ndarray) -> np.ndarray:
        """(N, K) class probabilities of each code."""
        columns = np.arange(codes.shape[1])
        scores = self.log_prior[None, :] + np.stack(
            [
                self.log_frequencies[k][codes, columns].sum(axis=1)
                for k in range(len(self.log_prior))
            ],
            axis=1,
        )
        scores -= scores.max(axis=1, keepdims=True)
        probabilities = np.exp(scores)
        return probabilities / probabilities.sum(axis=1, keepdims=True)

    def predict(self, codes: np.ndarray) -> np.ndarray:
        return self.posteriors(codes).argmax(axis=1)


def knn_predict(
    train: np.ndarray, labels: np.ndarray, test: np.ndarray, k: int = 5, batch: int = 256
) -> np.ndarray:
    """Majority label of the k nearest training codes in Hamming distance (ties: the smaller label)."""
    classes = int(labels.max()) + 1
    predicted = []
    for start in range(0, len(test), batch):
        distance = (test[start : start + batch, None, :] != train[None, :, :]).sum(axis=2)
        nearest = np.argpartition(distance, min(k, len(train) - 1), axis=1)[:, :k]
        votes = np.stack([np.bincount(row, minlength=classes) for row in labels[nearest]])
        predicted.append(votes.argmax(axis=1))
    return np.concatenate(predicted)


@dataclass
class NearestCentroid:
    centroids: np.ndarray  # (K, m)

    @classmethod
    def fit(
        cls, codes: np.ndarray, labels: np.ndarray, d: int, epsilon: float, classes: int
    ) -> NearestCentroid:
        values = np.arange(d, dtype=np.float64)[:, None]
        centroids = []
        for label in range(classes):
            members = codes[labels == label]
            estimated = (
                estimate_counts(members, d, epsilon)
                if len(members)
                else np.zeros((d, codes.shape[1]))
            )
            centroids.append((values * estimated).sum(axis=0) / max(len(members), 1))  # eq. 44
        return cls(np.stack(centroids))

    def predict(self, codes: np.ndarray) -> np.ndarray:
        distance = ((codes[:, None, :].astype(np.float64) - self.centroids[None]) ** 2).sum(axis=2)
        return distance.argmin(axis=1)
