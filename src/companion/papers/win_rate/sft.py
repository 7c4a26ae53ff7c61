"""Supervised fine-tuning on preferred samples, in closed form, trained, and iterated.

The preferred response of a pair drawn from p_ref has distribution ``p_SFT = 2 p_ref w`` with
``w = P p_ref`` the per-response win rate, so SFT's optimum is fixed by the starting model:
``WR(p_SFT) = 1/2 + 2 Var_{p_ref}[w]`` (our derivation, checked to 1e-10 on every draw).
"""

from __future__ import annotations

import numpy as np

from companion.papers.win_rate.preferences import win_rate, win_vector


def sft_optimum(P: np.ndarray, p_ref: np.ndarray) -> np.ndarray:
    """Distribution of the winner of a random pair from p_ref: ``2 p_ref (P p_ref)``: (..., K)."""
    return 2.0 * p_ref * win_vector(P, p_ref)


def sft_identity(P: np.ndarray, p_ref: np.ndarray) -> np.ndarray:
    """The closed form ``1/2 + 2 Var_{p_ref}[w]`` of SFT's win rate (variance computed directly)."""
    w = win_vector(P, p_ref)
    mean = np.sum(p_ref * w, axis=-1, keepdims=True)
    return 0.5 + 2.0 * np.sum(p_ref * (w - mean) ** 2, axis=-1)


def sample_pairs(rng: np.random.Generator, P: np.ndarray, sampler: np.ndarray, n: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """n labelled pairs for one prompt: y, y' ~ sampler, winner first: (winners (n,), losers (n,))."""
    K = len(sampler)
    y, y2 = rng.choice(K, size=(2, n), p=sampler)
    first_wins = rng.random(n) < P[y, y2]
    return np.where(first_wins, y, y2), np.where(first_wins, y2, y)


def trained_sft(rng: np.random.Generator, P: np.ndarray, p_ref: np.ndarray, n: int) -> np.ndarray:
    """Tabular maximum-likelihood SFT on the winners of n pairs: their empirical frequency (K,)."""
    winners, _ = sample_pairs(rng, P, p_ref, n)
    return np.bincount(winners, minlength=len(p_ref)) / n


def iterated_sft(P: np.ndarray, p_ref: np.ndarray, rounds: int) -> np.ndarray:
    """Population SFT iterated with pairs resampled from the current model, ``p <- 2 p (P p)``: (rounds, ..., K)."""
    out, p = [], p_ref
    for _ in range(rounds):
        p = sft_optimum(P, p)
        out.append(p)
    return np.stack(out)


def wro_limit(P: np.ndarray, p_ref: np.ndarray) -> np.ndarray:
    """The largest win rate any policy reaches against p_ref: ``max_y w(y)`` (beta -> 0 WRO)."""
    return win_vector(P, p_ref).max(axis=-1)


def sft_win_rates(P: np.ndarray, p_ref: np.ndarray, p_trained: np.ndarray, rounds: int) -> dict[str, np.ndarray]:
    """Closed-form, identity, trained, iterated (per round) SFT win rates and the WRO limit, all against p_ref."""
    return {
        "closed": win_rate(sft_optimum(P, p_ref), P, p_ref),
        "identity": sft_identity(P, p_ref),
        "trained": win_rate(p_trained, P, p_ref),
        "iterated": win_rate(iterated_sft(P, p_ref, rounds), P, p_ref),
        "limit": wro_limit(P, p_ref),
    }
