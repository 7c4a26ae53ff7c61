"""One-sided non-inferiority tests on estimated correctness, and the metrics of their decisions.

Used by the suitability filter (Pouget et al., ICML 2025) and reusable wherever two samples of
per-item scores are compared with a margin: the Welch test here takes moments that broadcast, so
thousands of (reference, candidate) pairs are tested in one call.
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from sklearn.metrics import average_precision_score, roc_auc_score

VAR_FLOOR = 1e-12


def welch_moments(mean_t: np.ndarray, var_t: np.ndarray, n_t: np.ndarray, mean_u: np.ndarray,
                  var_u: np.ndarray, n_u: np.ndarray, m: np.ndarray | float = 0.0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Welch statistic t, dof nu and lower-tail p of H0: mu_u < mu_t - m, from broadcastable moments."""
    se_t = np.maximum(var_t, VAR_FLOOR) / n_t
    se_u = np.maximum(var_u, VAR_FLOOR) / n_u
    se2 = se_t + se_u
    t = (mean_t - mean_u - m) / np.sqrt(se2)
    nu = se2 ** 2 / (se_t ** 2 / (n_t - 1) + se_u ** 2 / (n_u - 1))
    return t, nu, stats.t.cdf(t, nu)


def welch_noninferiority(pc_test: np.ndarray, pc_user: np.ndarray, m: float = 0.0) -> tuple[float, float, float]:
    """(t, nu, p) of the one-sided Welch non-inferiority test; p <= alpha rejects inferiority."""
    t, nu, p = welch_moments(np.mean(pc_test), np.var(pc_test, ddof=1), len(pc_test),
                             np.mean(pc_user), np.var(pc_user, ddof=1), len(pc_user), m)
    return float(t), float(nu), float(p)


def calibration_bias(pc: np.ndarray, correct: np.ndarray) -> float:
    """Delta = mean(p_c - 1{correct}) on a labeled sample."""
    return float(np.mean(pc - correct))


def adjusted_margin(m: float, delta_test: np.ndarray | float, delta_user: np.ndarray | float) -> np.ndarray | float:
    """The calibration-corrected margin m' = m + Delta_test - Delta_u."""
    return m + delta_test - delta_user


def decision_metrics(p: np.ndarray, gt: np.ndarray, alpha: float) -> dict[str, float]:
    """Accuracy, FPR, TPR, ROC AUC and PR AUC (score -p) of decisions ``p <= alpha`` vs ``gt``."""
    p, gt = np.ravel(p), np.ravel(gt).astype(bool)
    accept = p <= alpha
    both = 0 < gt.sum() < gt.size
    return {
        "acc": float(np.mean(accept == gt)),
        "fpr": float(accept[~gt].mean()) if (~gt).any() else float("nan"),
        "tpr": float(accept[gt].mean()) if gt.any() else float("nan"),
        "roc": float(roc_auc_score(gt, -p)) if both else float("nan"),
        "pr": float(average_precision_score(gt, -p)) if both else float("nan"),
    }


def binned_rates(x: np.ndarray, accept: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Acceptance rate and count per bin of ``x`` (empty bins give NaN)."""
    idx = np.digitize(x.ravel(), edges) - 1
    ok = (idx >= 0) & (idx < len(edges) - 1)
    counts = np.bincount(idx[ok], minlength=len(edges) - 1)
    hits = np.bincount(idx[ok], weights=accept.ravel()[ok].astype(float), minlength=len(edges) - 1)
    with np.errstate(invalid="ignore"):
        return hits / counts, counts
