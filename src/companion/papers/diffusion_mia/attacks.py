"""Membership inference attacks on a diffusion model, and their metrics.

ReDiffuse (the paper's black-box attack) sees only a variation API: a callable ``api(x) -> x'``
that noises each row of ``x`` to step t with fresh noise and runs deterministic DDIM back to 0.
The baselines (Loss, PIA, PIAN, SecMI-stat) call the epsilon-network itself. Every score is
oriented so that larger means "member" (distances are negated).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from skimage.metrics import structural_similarity
from sklearn.metrics import roc_auc_score, roc_curve

from companion.papers.diffusion_mia import DISTANCES
from companion.papers.diffusion_mia.ddpm import Diffusion, EpsFn, check_stride, ddim_move

Api = Callable[[torch.Tensor], torch.Tensor]


class CountingEps:
    """An epsilon-function that counts the rows (images) it has evaluated."""

    def __init__(self, eps_fn: EpsFn) -> None:
        self.eps_fn = eps_fn
        self.rows = 0

    def __call__(self, x: torch.Tensor, t: int) -> torch.Tensor:
        self.rows += len(x)
        return self.eps_fn(x, t)


def variation_api(eps_fn: EpsFn, diffusion: Diffusion, t: int, k: int, generator: torch.Generator) -> Api:
    """The black-box API as a closure: each row gets fresh noise to step ``t``, then DDIM back with stride ``k``.

    Only the closure leaves this function: an attacker holding it cannot reach the network."""
    check_stride(t, k, diffusion.T)

    def api(x: torch.Tensor) -> torch.Tensor:
        eps = torch.randn(x.shape, generator=generator, dtype=x.dtype)
        return diffusion.ddim_denoise(eps_fn, diffusion.q_sample(x, t, eps), t, k)

    return api


def distance(x: torch.Tensor, y: torch.Tensor, kind: str = "l2") -> np.ndarray:
    """Per-image distance between rows of ``x`` and ``y``: L2 norm, mean |.| or 1 - SSIM (images in [-1, 1])."""
    a = x.reshape(len(x), -1).double()
    b = y.reshape(len(y), -1).double()
    if kind == "l2":
        return (a - b).norm(dim=1).numpy()
    if kind == "l1":
        return (a - b).abs().mean(dim=1).numpy()
    if kind == "ssim":
        return np.array([1.0 - ssim(u, v) for u, v in zip(x.double().numpy(), y.double().numpy())])
    raise ValueError(f"unknown distance {kind!r}; allowed: {', '.join(DISTANCES)}")


def ssim(u: np.ndarray, v: np.ndarray) -> float:
    """SSIM of two images (flat 8x8 grey, or C x H x W) on the [-1, 1] range (scikit-image, 7x7 window)."""
    if u.ndim == 1:
        side = int(round(math.sqrt(u.size)))
        return float(structural_similarity(u.reshape(side, side), v.reshape(side, side), data_range=2.0))
    return float(structural_similarity(u, v, data_range=2.0, channel_axis=0))


def query_variations(api: Api, x: torch.Tensor, n: int) -> torch.Tensor:
    """``n`` independent API outputs per image, shape (n, *x.shape): one batched call of n copies."""
    out = api(x.repeat(n, *([1] * (x.ndim - 1))))
    return out.reshape(n, *x.shape)


def rediffuse_scores(x: torch.Tensor, outputs: torch.Tensor, n_list: tuple[int, ...],
                     kind: str = "l2") -> dict[int, np.ndarray]:
    """ReDiffuse: ``-d(x, mean of the first n outputs)`` for each n (nested prefixes of one draw)."""
    return {n: -distance(x, outputs[:n].mean(dim=0), kind) for n in n_list}


def avg_distance_scores(x: torch.Tensor, outputs: torch.Tensor, n_list: tuple[int, ...],
                        kind: str = "l2") -> dict[int, np.ndarray]:
    """The ablation: ``-mean_i d(x, V_i)`` over the first n outputs (average the distances, not the outputs)."""
    d = np.stack([distance(x, o, kind) for o in outputs])
    return {n: -d[:n].mean(axis=0) for n in n_list}


def attack_rediffuse(api: Api, x: torch.Tensor, n: int, kind: str = "l2") -> np.ndarray:
    """ReDiffuse score of each image through the API only: ``-d(x, mean of n variations)``."""
    return rediffuse_scores(x, query_variations(api, x, n), (n,), kind)[n]


def loss_error(eps_fn: EpsFn, diffusion: Diffusion, x: torch.Tensor, t: int,
               generator: torch.Generator) -> torch.Tensor:
    """Loss / Naive's per-pixel error ``eps - eps_theta(x_t, t)`` for one fresh noise draw ``eps``."""
    eps = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    return eps - eps_fn(diffusion.q_sample(x, t, eps), t)


def power_sum(err: torch.Tensor, p: int = 2) -> np.ndarray:
    """Per-image ``sum |err|^p`` (rows of ``err``), in float64."""
    return err.reshape(len(err), -1).double().abs().pow(p).sum(dim=1).numpy()


def attack_loss(eps_fn: EpsFn, diffusion: Diffusion, x: torch.Tensor, t: int, draws: int,
                generator: torch.Generator) -> np.ndarray:
    """Loss / Naive: ``-mean over draws of ||eps - eps_theta(x_t, t)||^2``."""
    total = sum(power_sum(loss_error(eps_fn, diffusion, x, t, generator)) for _ in range(draws))
    return -(total / draws)


def pia_error(eps_fn: EpsFn, diffusion: Diffusion, x: torch.Tensor, t: int, normalize: bool = False) -> torch.Tensor:
    """PIA's per-pixel error ``eps0 - eps_theta(x_t, t)``, ``eps0 = eps_theta(x, 0)``, ``x_t`` built from it."""
    eps0 = eps_fn(x, 0)
    if normalize:  # PIAN: rescale so that mean |eps0| = sqrt(2/pi), as for a standard normal
        dims = tuple(range(1, eps0.ndim))
        eps0 = eps0 / eps0.abs().mean(dim=dims, keepdim=True) * math.sqrt(2.0 / math.pi)
    return eps0 - eps_fn(diffusion.q_sample(x, t, eps0), t)


def attack_pia(eps_fn: EpsFn, diffusion: Diffusion, x: torch.Tensor, t: int, normalize: bool = False) -> np.ndarray:
    """PIA (PIAN with ``normalize``): ``-||eps0 - eps_theta(x_t, t)||_4^4`` (see :func:`pia_error`)."""
    return -power_sum(pia_error(eps_fn, diffusion, x, t, normalize), 4)


def secmi_pair(eps_fn: EpsFn, diffusion: Diffusion, x: torch.Tensor, t: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """SecMI: DDIM-invert x to ``x~_t`` (stride k), one more step to ``x~_{t+k}``, denoise one step back: (x^_t, x~_t)."""
    check_stride(t, k, diffusion.T)
    abar = diffusion.abar
    xj = x
    for j in range(0, t, k):
        xj = ddim_move(xj, eps_fn(xj, j), abar[j], abar[j + k])
    x_t = xj
    x_tk = ddim_move(x_t, eps_fn(x_t, t), abar[t], abar[t + k])
    x_hat = ddim_move(x_tk, eps_fn(x_tk, t + k), abar[t + k], abar[t])
    return x_hat, x_t


def attack_secmi(eps_fn: EpsFn, diffusion: Diffusion, x: torch.Tensor, t: int, k: int) -> np.ndarray:
    """SecMI-stat score: ``-||x^_t - x~_t||^2``."""
    x_hat, x_t = secmi_pair(eps_fn, diffusion, x, t, k)
    return -power_sum(x_hat - x_t)


def secmi_official_error(eps_fn: EpsFn, diffusion: Diffusion, x: torch.Tensor, interval: int) -> torch.Tensor:
    """The official code's SecMI attacker at ``interval`` (its map ``x^_0 - x``, 2 network evaluations).

    The official ``SecMIAttacker`` steps by ``interval`` only (it never reads the DDIM stride k): one
    deterministic inversion step from step 0 (the image, at alpha_bar_0 = 1 - beta_1) to ``interval``
    with ``eps_theta(x, 0)``, one deterministic denoising step back to step 0 with
    ``eps_theta(x~_interval, interval)``; the official ``main()`` compares entry 0 of both lists, the image
    and that round trip. (With ``attack_num`` > 1 the later entries are computed and never read.)"""
    if not 0 < interval < diffusion.T:
        raise ValueError(f"the SecMI interval {interval} must be in 1..{diffusion.T - 1}")
    a0, at = diffusion.abar[0], diffusion.abar[interval]
    x_t = ddim_move(x, eps_fn(x, 0), a0, at)
    return ddim_move(x_t, eps_fn(x_t, interval), at, a0) - x


def attack_secmi_official(eps_fn: EpsFn, diffusion: Diffusion, x: torch.Tensor, interval: int) -> np.ndarray:
    """The official SecMI attacker's threshold score ``-||x^_0 - x||^2`` (see :func:`secmi_official_error`)."""
    return -power_sum(secmi_official_error(eps_fn, diffusion, x, interval))


def mia_metrics(scores_mem: np.ndarray, scores_non: np.ndarray) -> tuple[float, float, float]:
    """(AUC, ASR, TPR at 1 % FPR) with members as positives and larger score = member (exact ROC)."""
    y = np.r_[np.ones(len(scores_mem)), np.zeros(len(scores_non))]
    s = np.r_[scores_mem, scores_non]
    fpr, tpr, _ = roc_curve(y, s)
    n_pos, n_neg = len(scores_mem), len(scores_non)
    # from integer counts: the rate formula lands a hair below a bar (0.65 -> 0.6499999999999999)
    hits = np.rint(tpr * n_pos) * n_neg + np.rint((1.0 - fpr) * n_neg) * n_pos
    asr = float(hits.max() / (2 * n_pos * n_neg))
    tpr1 = float(tpr[fpr <= 0.01].max())
    return float(roc_auc_score(y, s)), asr, tpr1
