"""The USAE analysis metrics: cross-model R², firing counts, firing entropy, co-firing, energy.

As in the official ``uni_analysis.py`` (and ``overcomplete.metrics.r2_score``): a concept *fires*
on a sample when its code exceeds the threshold tau; every statistic is a boolean tensor reduction
over the stacked models. The ``*_loop`` functions compute the same counts one concept and one
sample at a time; they are the reference of the benchmark and of the tests.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

EPS = 1e-10  # the official analysis's guard against 0 / 0
R2_EPS = 1e-6  # the guard of R²'s denominator: overcomplete's Epsilon (1e-8 until issue 58)


def r2(x: Tensor, x_hat: Tensor) -> float:
    """Overcomplete's R²: 1 - mean((x - x_hat)²) / mean((x - mean(x))²), mean(x) one global scalar."""
    ss_res = ((x - x_hat) ** 2).mean()
    ss_tot = ((x - x.mean()) ** 2).mean()
    return float(1 - ss_res / (ss_tot + R2_EPS))


def r2_from_means(ss_res: float, ss_tot: float) -> float:
    """:func:`r2` from its two means, mean((x - x_hat)²) and mean((x - mean(x))²), accumulated elsewhere."""
    return float(1 - ss_res / (ss_tot + R2_EPS))


def off_diagonal_mean(matrix: np.ndarray) -> float:
    """Mean of the off-diagonal entries of a square matrix (the official "cross_R2")."""
    mask = ~np.eye(matrix.shape[0], dtype=bool)
    return float(matrix[mask].mean())


def firing(codes: Tensor, tau: float) -> Tensor:
    """Boolean firing tensor (models, samples, concepts) from stacked codes, code > tau."""
    return codes > tau


def firing_counts(fires: Tensor) -> Tensor:
    """F[m, c]: samples on which concept c fires in model m, (models, concepts)."""
    return fires.sum(dim=1)


def firing_entropy(counts: Tensor) -> Tensor:
    """FE[c] = -sum_m p_m log2 p_m / log2 M with p_m = F[m, c] / sum_m F[m, c]; (concepts,)."""
    union = counts.sum(dim=0)
    p = counts / (union + EPS)
    return -(p * torch.log2(p + EPS)).sum(dim=0) / np.log2(counts.shape[0])


def cofire_counts(fires: Tensor) -> Tensor:
    """Samples on which concept c fires in every model at once, (concepts,)."""
    return fires.all(dim=0).sum(dim=0)


def cofire_proportion(cofire: Tensor, counts: Tensor) -> Tensor:
    """P[m, c] = co-fires of c / fires of c in model m (0 where c never fires in m), from the co-fire counts
    (concepts,) and the firing counts (M, concepts)."""
    return cofire / (counts + EPS)


def energy(codes: Tensor, dictionaries: list[Tensor]) -> Tensor:
    """Sum over models of ||mean_s Z_m[:, c] * D_m[c]||_2, (concepts,)."""
    return energy_of_means([codes[m].mean(dim=0) for m in range(len(dictionaries))], dictionaries)


def energy_of_means(means: list[Tensor], dictionaries: list[Tensor]) -> Tensor:
    """:func:`energy` from each model's mean code per concept, (concepts,) each."""
    return sum(mu.abs() * d.norm(dim=1) for mu, d in zip(means, dictionaries))


# --- references: one concept and one sample at a time ------------------------------------------

def firing_counts_loop(codes: np.ndarray, tau: float) -> np.ndarray:
    """F[m, c] by explicit loops over models, concepts and samples."""
    n_models, n_samples, n_concepts = codes.shape
    out = np.zeros((n_models, n_concepts), dtype=np.int64)
    for m in range(n_models):
        for c in range(n_concepts):
            for s in range(n_samples):
                if codes[m, s, c] > tau:
                    out[m, c] += 1
    return out


def cofire_counts_loop(codes: np.ndarray, tau: float) -> np.ndarray:
    """Co-fire counts per concept by explicit loops over concepts, samples and models."""
    n_models, n_samples, n_concepts = codes.shape
    out = np.zeros(n_concepts, dtype=np.int64)
    for c in range(n_concepts):
        for s in range(n_samples):
            if all(codes[m, s, c] > tau for m in range(n_models)):
                out[c] += 1
    return out


def firing_entropy_loop(counts: np.ndarray) -> np.ndarray:
    """FE[c] by a loop over concepts and models (same eps guard as the vectorised form)."""
    n_models, n_concepts = counts.shape
    out = np.zeros(n_concepts)
    for c in range(n_concepts):
        union = sum(counts[m, c] for m in range(n_models))
        h = 0.0
        for m in range(n_models):
            p = counts[m, c] / (union + EPS)
            h -= p * np.log2(p + EPS)
        out[c] = h / np.log2(n_models)
    return out
