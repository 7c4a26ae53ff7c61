"""Holistic cost of a deployment (the paper's claim 4): learning + unlearning requests + queries.

``C_total(rho) = C_learn + N_q (c_infer + rho c_unlearn)`` with ``rho = N_u / N_q`` deletion requests
per query. LLM costs are analytic (2 N FLOPs per token forward, 6 N per token trained);
ERASE's learning and unlearning costs are the counted FLOPs of Q-k-means, measured per run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq


@dataclass(frozen=True)
class Deployment:
    """Per-method costs in FLOPs: learning once, one inference, one unlearning request."""

    learn: float
    infer: float
    unlearn: float

    def total(self, rho: np.ndarray | float, n_queries: float) -> np.ndarray | float:
        """Total FLOPs for ``n_queries`` queries and ``rho n_queries`` deletion requests."""
        return self.learn + n_queries * (self.infer + np.asarray(rho) * self.unlearn)


def icl_deployment(n_params: float, k: int, demo_tokens: float, query_tokens: float, out_tokens: float,
                   learn_flops: float, unlearn_flops: float) -> Deployment:
    """ERASE + a frozen LLM: every query pays for the k-shot prompt; learning and unlearning are clustering."""
    return Deployment(learn_flops, 2.0 * n_params * (k * demo_tokens + query_tokens + out_tokens), unlearn_flops)


def sisa_deployment(n_params: float, n_train: int, shards: int, slices: int, epochs: int,
                    query_tokens: float, out_tokens: float) -> Deployment:
    """SISA fine-tuning of the LLM: S zero-shot forwards per query (unmerged shards); a deletion retrains
    on average (R + 1) / (2R) of one shard's training."""
    tokens = query_tokens + out_tokens
    shard_train = 6.0 * n_params * tokens * (n_train / shards) * epochs
    return Deployment(shards * shard_train, shards * 2.0 * n_params * tokens,
                      shard_train * (slices + 1) / (2 * slices))


def break_even(icl: Deployment, ft: Deployment, n_queries: float) -> float:
    """Closed-form rho* where the totals are equal (ERASE is cheaper above it); 0 when ERASE always wins."""
    gap = (icl.learn - ft.learn) / n_queries + icl.infer - ft.infer
    if gap <= 0:
        return 0.0
    return gap / (ft.unlearn - icl.unlearn) if ft.unlearn > icl.unlearn else float("inf")


def crossing(icl: Deployment, ft: Deployment, n_queries: float) -> float:
    """rho where the two total-cost curves cross, found numerically on a log scale (NaN if none in 1e-15..1e6)."""
    def f(log_rho: float) -> float:
        rho = 10.0 ** log_rho
        return float(np.log(icl.total(rho, n_queries)) - np.log(ft.total(rho, n_queries)))

    lo, hi = -15.0, 6.0
    if np.sign(f(lo)) == np.sign(f(hi)):
        return float("nan")
    return 10.0 ** brentq(f, lo, hi, xtol=1e-12)
