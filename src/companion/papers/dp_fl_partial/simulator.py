"""The seed-batched simulator of mu^2-FL with partial participation, its noise-cancelling and
fresh-noise messages, one-pass DP-FedSGD, and the noise-only process.

Every row of the batch is one (epsilon, step size, seed) combination; row r draws its schedule,
samples and noise from ``rngs[row_seed[r]]`` in blocks of BLOCK_EPOCHS epochs, so batching never
changes a seed's draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from companion.papers.dp_fl_partial import logistic_sco as lr
from companion.papers.dp_fl_partial.privacy import increment_bound

MU2 = ("nc", "naive", "trusted_nc", "nonprivate_mu2")
BLOCK_EPOCHS = 64  # random draws come in blocks of this many epochs, so batching never changes them
# the per-round reductions use einsum: numpy's sum over a short axis costs several times more here
GradFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Task:
    """Per-machine true weights W (M, d) and a test sample (x, y) of the average objective."""

    W: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    w_opt: np.ndarray
    f_opt: float

    def excess(self, w: np.ndarray) -> np.ndarray:
        """F(w) - F* on the test sample for each row of w (R, d)."""
        return lr.loss(w, self.x_test, self.y_test) - self.f_opt


def make_task(rng: np.random.Generator, M: int, d: int, w_norm: float, zeta: float, n_test: int) -> Task:
    """Machine weights w* + zeta u_i (u_i random unit vectors) and the average objective's optimum."""
    w_star = rng.standard_normal(d)
    w_star *= w_norm / np.linalg.norm(w_star)
    u = rng.standard_normal((M, d))
    W = w_star + zeta * u / np.linalg.norm(u, axis=1, keepdims=True)
    x = lr.to_unit_ball(rng.standard_normal((n_test, d)))
    y = lr.labels(x, W[rng.integers(0, M, n_test)], rng.random(n_test))
    w_opt = lr.newton_minimiser(x, y)
    return Task(W, x, y, w_opt, float(lr.loss(w_opt, x, y)[0]))


def stream_rng(seed: int, role: int) -> np.random.Generator:
    """The generator of one seed's data and noise (role 0: evaluation, 1: tuning, 2: noise-only check)."""
    return np.random.default_rng(np.random.SeedSequence((seed, role)))


def draw_block(rng: np.random.Generator, task: Task, m: int, epochs: int) -> tuple[np.ndarray, ...]:
    """One block of rounds: participants (K, m), features (K, m, d), labels (K, m), noise (K, m, d)."""
    M, d = task.W.shape
    S = rng.permuted(np.tile(np.arange(M), (epochs, 1)), axis=1).reshape(-1, m)
    x = lr.to_unit_ball(rng.standard_normal((*S.shape, d)))
    y = lr.labels(x, task.W[S], rng.random(S.shape))
    return S, x, y, rng.standard_normal((*S.shape, d))


@dataclass
class SimOut:
    """Output x (R, d), checkpoints (R, K, d), clip count, last server state A and query point; for a
    tracked NC run, the cancellation identity's largest relative error (R,) and the root-mean-square of
    the noise each release carried (R,)."""

    x_out: np.ndarray
    ckpt: np.ndarray
    clipped: int
    A: np.ndarray
    x_query: np.ndarray
    identity_err: np.ndarray | None = None
    release_rms: np.ndarray | None = None


def project(w: np.ndarray, D: float) -> np.ndarray:
    """Euclidean projection of each row onto the ball of radius D."""
    return w / np.maximum(1.0, np.sqrt(np.einsum("...d,...d->...", w, w))[..., None] / D)


def anytime_average(x: np.ndarray, w: np.ndarray, t: int) -> np.ndarray:
    """x_{t+1} = (alpha_{1:t} x_t + alpha_{t+1} w_{t+1}) / alpha_{1:t+1} with alpha_t = t."""
    return (t * x + 2.0 * w) / (t + 2)


def nc_message(q: np.ndarray, fresh: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Noise-cancelling message: increment + fresh noise - the machine's previous noise."""
    return q + fresh - last


def sample_grads(P: np.ndarray, X: np.ndarray, Y: np.ndarray, S: np.ndarray) -> np.ndarray:
    """Per-participant logistic gradients (R, m, d) at P (R, d); S (machine ids) is unused."""
    return lr.grad_batch(P, X, Y)


def simulate(method: str, n: int, rngs: list[np.random.Generator], row_seed: np.ndarray,
             c: np.ndarray, sigma: np.ndarray, task: Task, m: int, D: float,
             checkpoints: np.ndarray, track_clean: bool = False, grad_fn: GradFn = sample_grads,
             stop: int | None = None) -> SimOut:
    """Run ``method`` for T = nM/m rounds (or until ``stop``) on R rows at once; row r uses rngs[row_seed[r]].

    ``grad_fn(P (R, d), X (R, m, d), Y (R, m), S (R, m)) -> (R, m, d)`` gives the participants' gradients.
    With ``track_clean`` an NC run also keeps the clean sum C_t and, per machine, the sum of its messages
    minus its clean increments (the noise in its released prefix sum).
    """
    M, d = task.W.shape
    R, T, S_max = len(row_seed), n * M // m, increment_bound(D)
    stop = min(stop or T, T)
    offset = np.arange(R)[:, None] * M  # row r's machines are rows r*M ... r*M + M-1 of the flat views
    eta = c / T if method in MU2 else c
    w, x, x_prev, A = (np.zeros((R, d)) for _ in range(4))
    clean, y_last, released = np.zeros((R, d)), np.zeros((R * M, d)), np.zeros((R * M, d))
    ckpt, err, rel_ss, rel_count = np.zeros((R, len(checkpoints), d)), np.zeros(R), np.zeros(R), 0
    tracked = track_clean and method == "nc"
    k_ck, clipped, t = 0, 0, 0
    for start in range(0, -(-stop * m // M), BLOCK_EPOCHS):
        blocks = [draw_block(g, task, m, min(BLOCK_EPOCHS, n - start)) for g in rngs]
        S_b, X_b, Y_b, Z_b = (np.stack(b) for b in zip(*blocks))  # (streams, K, ...): rows gather per round
        for k in range(min(S_b.shape[1], stop - t)):
            t += 1
            Sk, Xk, Yk, Zk = S_b[row_seed, k], X_b[row_seed, k], Y_b[row_seed, k], Z_b[row_seed, k]
            if method in MU2:
                q = t * grad_fn(x, Xk, Yk, Sk) - (t - 1) * grad_fn(x_prev, Xk, Yk, Sk)
                qn = np.sqrt(np.einsum("rmd,rmd->rm", q, q))[..., None]
                clipped += int((qn > S_max * (1 + 1e-12)).sum())
                q = q * np.minimum(1.0, S_max / np.maximum(qn, 1e-300))
                msg = q
                if method == "nc":
                    who = offset + Sk
                    fresh = sigma[:, None, None] * Zk
                    msg = nc_message(q, fresh, y_last[who])
                    y_last[who] = fresh
                elif method == "naive":
                    msg = q + sigma[:, None, None] * Zk
                A += np.einsum("rmd->rd", msg) / m
                if tracked:
                    clean += np.einsum("rmd->rd", q) / m
                    noise = released[who] + (msg - q)
                    released[who] = noise
                    rel_ss += np.einsum("rmd,rmd->r", noise, noise)
                    rel_count += noise[0].size
                state = A + sigma[:, None] * Zk[:, 0] if method == "trusted_nc" else A
                w = project(w - eta[:, None] * state, D)
                x_prev, x = x, anytime_average(x, w, t)
            else:
                x_prev, g = w, grad_fn(w, Xk, Yk, Sk)
                gn = np.sqrt(np.einsum("rmd,rmd->rm", g, g))[..., None]
                g = g * np.minimum(1.0, lr.LIPSCHITZ_G / np.maximum(gn, 1e-300)) + sigma[:, None, None] * Zk
                x = (x * (t - 1) + w) / t  # uniform average of the query points w_1..w_t
                w = project(w - (eta / (m * math.sqrt(t)))[:, None] * np.einsum("rmd->rd", g), D)
            if tracked and (t == stop or (k_ck < len(checkpoints) and t == checkpoints[k_ck])):
                live = y_last.reshape(R, M, d).sum(1) / m
                gap = np.linalg.norm((A - clean) - live, axis=1) / np.maximum(np.linalg.norm(live, axis=1), 1e-300)
                err = np.maximum(err, gap)
            if k_ck < len(checkpoints) and t == checkpoints[k_ck]:
                ckpt[:, k_ck] = x
                k_ck += 1
    if not tracked:
        return SimOut(x, ckpt, clipped, A, x_prev)
    return SimOut(x, ckpt, clipped, A, x_prev, err, np.sqrt(rel_ss / max(rel_count, 1)))


def noise_variance(rng: np.random.Generator, M: int, m: int, d: int, T: int, draws: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-coordinate variance per round (T,) of the server's noise for NC and naive (sigma = 1).

    One balanced schedule, ``draws`` independent noise processes (a schedule does not change the
    noise law); each machine's live noise is a row of ``last`` (M, draws * d).
    """
    last = np.zeros((M, draws * d))
    nc, naive = np.zeros(draws * d), np.zeros(draws * d)
    var_nc, var_naive = np.zeros(T), np.zeros(T)
    for t in range(T):
        if t % (M // m) == 0:
            perm = rng.permutation(M).reshape(-1, m)
        S = perm[t % (M // m)]
        fresh = rng.standard_normal((m, draws * d))
        nc += (fresh.sum(0) - last[S].sum(0)) / m
        last[S] = fresh
        naive += rng.standard_normal((m, draws * d)).sum(0) / m
        var_nc[t], var_naive[t] = nc @ nc / nc.size, naive @ naive / naive.size
    return var_nc, var_naive


def checkpoint_rounds(T: int, k: int = 40) -> np.ndarray:
    """About k log-spaced rounds in [1, T], ending at T."""
    return np.unique(np.geomspace(1, T, k).round().astype(int))


def log_slope(n: np.ndarray, excess: np.ndarray) -> float:
    """Least-squares slope of log excess against log n."""
    return float(np.polyfit(np.log(n), np.log(np.maximum(excess, 1e-300)), 1)[0])
