"""The scores of ood-dcc: DCC (vectorised through Sherman-Morrison), Mahalanobis, ViM/Residual, KNN, MSP,
Energy, and the metrics FPR95 and AUROC, following the official scorers of ``workerbcd/ooddcc``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp, softmax
from scipy.stats import rankdata
from sklearn.covariance import EmpiricalCovariance

# a KNN query block holds at most this many float64 distances (256 MiB): ImageNet val against the full
# train set would otherwise be a 50,000 x 1,281,167 matrix
KNN_BLOCK = 2**25


def l2n(f: np.ndarray) -> np.ndarray:
    """Rows of ``f`` (n, D) scaled to unit L2 norm."""
    return f / np.maximum(np.linalg.norm(f, axis=-1, keepdims=True), 1e-12)


class GaussianFit:
    """Class means and shared within-class covariance of ID features (optionally L2-normalised)."""

    def __init__(self, feats: np.ndarray, labels: np.ndarray, n_classes: int, normalize: bool,
                 ridge: float = 1e-6, pinv: bool = False) -> None:
        self.normalize = normalize
        f = self.prep(feats)
        self.means = np.stack([f[labels == c].mean(axis=0) for c in range(n_classes)])
        cov = EmpiricalCovariance(assume_centered=True).fit(f - self.means[labels]).covariance_
        D = cov.shape[0]
        self.cov_raw = cov
        if pinv:  # the official static Mahalanobis: torch pinv at float32 tolerance
            self.cov = cov
            self.precision = np.linalg.pinv(cov, rtol=D * np.finfo(np.float32).eps, hermitian=True)
        else:
            self.cov = cov + ridge * np.trace(cov) / D * np.eye(D)
            self.precision = np.linalg.inv(self.cov)
        self.evals, self.evecs = np.linalg.eigh(self.cov)

    def prep(self, f: np.ndarray) -> np.ndarray:
        """The features as the fit sees them (normalised or raw), float64."""
        f = np.asarray(f, dtype=np.float64)
        return l2n(f) if self.normalize else f

    def maha(self, feats: np.ndarray) -> np.ndarray:
        """Squared Mahalanobis distance to every class mean, shape (n, C)."""
        f = self.prep(feats)
        out = np.empty((len(f), len(self.means)))
        for c, mu in enumerate(self.means):
            delta = f - mu
            out[:, c] = np.einsum("nd,nd->n", delta @ self.precision, delta)
        return out

    def residual_basis(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Eigenvectors (D, r) and eigenvalues (r,) of the ``r`` smallest eigenvalues of Sigma."""
        return self.evecs[:, :r], self.evals[:r]

    def dcc(self, feats: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """DCC distances (n, C) under ``Sigma - v v^T``, the Maha distances (n, C) and A = v^T Sigma^-1 v (n,)."""
        d_maha = self.maha(feats)
        if r == 0:
            return d_maha.copy(), d_maha, np.zeros(len(d_maha))
        U, lam = self.residual_basis(r)
        a = self.prep(feats) @ U
        A = np.sum(a * a / lam, axis=1)
        B = (a / lam) @ (self.means @ U).T
        return d_maha - (A[:, None] - B) ** 2 / (A[:, None] - 1.0), d_maha, A

    def principal(self, feats: np.ndarray, r: int) -> np.ndarray:
        """Static squared Mahalanobis distance (n, C) inside the principal subspace (all but the ``r``
        smallest eigendirections): the residual subspace dropped from the metric."""
        U, lam = self.evecs[:, r:], self.evals[r:]
        out = np.empty((len(feats), len(self.means)))
        f = self.prep(feats) @ U
        for c, mu in enumerate(self.means @ U):
            out[:, c] = np.sum((f - mu) ** 2 / lam, axis=1)
        return out

    def dcc_parts(self, feats: np.ndarray, r: int) -> dict[str, np.ndarray]:
        """The pieces of ``d_DCC = P + M - 1 - (1 - B)^2 / (A - 1)``: P the principal-subspace distance
        (n, C), M = m_c^T Lambda^-1 m_c the class means' residual energy (C,), A (n,) and B (n, C)."""
        U, lam = self.residual_basis(r)
        a, m = self.prep(feats) @ U, self.means @ U
        return {"P": self.principal(feats, r), "M": np.sum(m * m / lam, axis=1), "A": np.sum(a * a / lam, axis=1),
                "B": (a / lam) @ m.T}

    def dcc_reference(self, feats: np.ndarray, r: int) -> np.ndarray:
        """The official definition: one ``inv(Sigma - v v^T)`` per sample; distances (n, C)."""
        U, _ = self.residual_basis(r)
        out = []
        for f in self.prep(feats):
            v = U @ (U.T @ f)
            delta = f - self.means
            out.append(np.einsum("cd,de,ce->c", delta, np.linalg.inv(self.cov - np.outer(v, v)), delta))
        return np.array(out)


def min_score(d: np.ndarray) -> np.ndarray:
    """OOD score from distances (n, C): ``-min_c d`` (higher = more ID; ranks like ``-min sqrt d``)."""
    return -d.min(axis=1)


def msp(logits: np.ndarray) -> np.ndarray:
    """Maximum softmax probability, shape (n,)."""
    return softmax(logits, axis=1).max(axis=1)


def energy(logits: np.ndarray) -> np.ndarray:
    """Negative free energy ``logsumexp(logits)``, shape (n,)."""
    return logsumexp(logits, axis=1)


def knn_score(train_feats: np.ndarray, feats: np.ndarray, k: int, block: int = KNN_BLOCK) -> np.ndarray:
    """Minus the distance to the ``k``-th nearest normalised training feature, shape (n,), in query blocks
    of at most ``block`` distances."""
    if not 1 <= k <= len(train_feats):
        raise ValueError(f"knn_k = {k} needs 1 <= k <= {len(train_feats)} (the training features)")
    train, q = l2n(np.asarray(train_feats, dtype=np.float64)), l2n(np.asarray(feats, dtype=np.float64))
    rows = max(1, block // len(train))
    out = np.empty(len(q))
    for start in range(0, len(q), rows):
        sq = np.maximum(2.0 - 2.0 * q[start:start + rows] @ train.T, 0.0)
        out[start:start + rows] = -np.sqrt(np.partition(sq, k - 1, axis=1)[:, k - 1])
    return out


@dataclass(frozen=True)
class VimFit:
    """ViM's origin ``u``, residual basis (D, D - pdim) and logit-matching scale ``alpha``."""

    u: np.ndarray
    residual: np.ndarray
    alpha: float


def vim_fit(train_feats: np.ndarray, train_logits: np.ndarray, W: np.ndarray, b: np.ndarray,
            pdim: int) -> VimFit:
    """Fit ViM: ``u = -pinv(W) b``, principal space of cov(f - u), ``alpha`` from train statistics."""
    u = -np.linalg.pinv(W) @ b
    cov = EmpiricalCovariance(assume_centered=True).fit(train_feats - u).covariance_
    _, evecs = np.linalg.eigh(cov)
    residual = evecs[:, : cov.shape[0] - pdim]
    res_norm = np.linalg.norm((train_feats - u) @ residual, axis=1)
    return VimFit(u, residual, float(train_logits.max(axis=1).mean() / res_norm.mean()))


def residual_norm(fit: VimFit, feats: np.ndarray) -> np.ndarray:
    """``||P_res (f - u)||``, shape (n,)."""
    return np.linalg.norm((feats - fit.u) @ fit.residual, axis=1)


def vim_score(fit: VimFit, feats: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """ViM: ``logsumexp(logits) - alpha ||P_res (f - u)||``, shape (n,)."""
    return energy(logits) - fit.alpha * residual_norm(fit, feats)


def auroc(s_id: np.ndarray, s_ood: np.ndarray) -> float:
    """Area under the ROC curve with ID as the positive class (Mann-Whitney, ties count half)."""
    ranks = rankdata(np.concatenate([s_id, s_ood]))
    n1, n0 = len(s_id), len(s_ood)
    return float((ranks[:n1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def fpr_at_95_tpr(s_id: np.ndarray, s_ood: np.ndarray) -> float:
    """Fraction of OOD scores at or above the threshold that keeps 95 % of ID test scores."""
    return float(np.mean(s_ood >= np.quantile(s_id, 0.05)))
