"""One seed of the experiment: train the USAE and its controls on aligned activations, score them.

Shared by the toy (digit models) and the ``paper`` preset (vision backbones): both hand over one
(N, d_m) activation matrix per model for training and for held-out samples, rows aligned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from companion.models.topk_sae import BatchNormTopKSAE
from companion.papers.usae import concepts
from companion.papers.usae.universal import Rows, Standardiser, TrainConfig, pair_permutations, train

# SeedSequence streams under a run's seed: the digits' augmentation draws from the bare seed, the SAE
# batches and source models from TRAIN_STREAM, the shuffled control's permutations from SHUFFLE_STREAM.
TRAIN_STREAM = 2
SHUFFLE_STREAM = 1


@dataclass(frozen=True)
class VariantEval:
    """Held-out scores of one trained variant (universal, shuffled or independent)."""

    r2: np.ndarray  # (M, M): rows encoder i, columns decoder j
    fe: np.ndarray  # firing entropy of the concepts with U >= min_fires, by energy (high first)
    cofire: np.ndarray  # (M, C) co-fire proportion, concepts sorted by energy (all concepts)
    union: np.ndarray  # U[c] in the same order
    cofire_top: float  # mean co-fire proportion of the top-energy concepts with U >= min_fires
    cofire_rest: float  # the same over the other concepts with U >= min_fires
    dead: int  # concepts that never fire in any model
    cpu_seconds: float  # CPU time of training

    @property
    def offdiag(self) -> float:
        """Mean off-diagonal R² (the official "cross_R2")."""
        return concepts.off_diagonal_mean(self.r2)

    @property
    def diag(self) -> float:
        """Mean diagonal R² (self-reconstruction)."""
        return float(np.diag(self.r2).mean())

    @property
    def diag_margin(self) -> float:
        """Min over rows of the diagonal minus the row's largest off-diagonal entry (> 0: diagonal highest)."""
        off = np.where(np.eye(len(self.r2), dtype=bool), -np.inf, self.r2)
        return float((np.diag(self.r2) - off.max(axis=1)).min())

    @property
    def fe_median(self) -> float:
        """Median firing entropy over concepts that fire at least ``min_fires`` times."""
        return float(np.median(self.fe)) if len(self.fe) else float("nan")


@dataclass(frozen=True)
class SeedRun:
    """Everything one seed gives: the variants' scores plus what the figures need."""

    seed: int
    variants: dict[str, VariantEval]
    extra: dict[str, float] = field(default_factory=dict)
    top_samples: np.ndarray | None = None  # (concepts, M, n) held-out samples that fire most
    top_concepts: np.ndarray | None = None  # concept ids of those rows
    cam: np.ndarray | None = None  # (concepts, M, h, w) CAM images
    cam_gain: np.ndarray | None = None  # (concepts, M) pre-activation after minus before
    cam_concepts: np.ndarray | None = None  # concept ids of the CAM rows


@torch.no_grad()
def score(saes: list[BatchNormTopKSAE], test_acts: list[Tensor], stds: list[Standardiser], tau: float,
          top: int, min_fires: int, cpu: float, chunk: int | None = None) -> tuple[VariantEval, Tensor]:
    """Held-out scores of one set of SAEs on ``[std(a) for a in test_acts]`` and the energy order, reading
    ``chunk`` held-out rows at a time (None: all at once, the toy).

    Only one chunk's standardised activations and codes exist at once: R²'s squared errors, the firing and
    co-firing counts and the code sums are accumulated (float64 sums; counts exact), so memory is bounded by
    ``chunk`` and not by the held-out set (the paper preset's ~1M tokens). The codes themselves are not
    kept (:func:`concept_codes`).
    """
    n_models, n = len(saes), len(test_acts[0])
    chunk = chunk or n
    for sae in saes:
        sae.eval()
    spans = [(lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]
    f64 = torch.float64
    means = [sum(float(std(a[lo:hi]).sum(dtype=f64)) for lo, hi in spans) / a.numel()
             for std, a in zip(stds, test_acts)]
    ss_res = np.zeros((n_models, n_models))
    ss_tot = np.zeros(n_models)
    counts = cofire = code_sums = None
    for lo, hi in spans:
        xs = [std(a[lo:hi]) for std, a in zip(stds, test_acts)]
        codes = xs[0].new_empty((n_models, hi - lo, saes[0].linear.out_features))
        for m, (sae, x) in enumerate(zip(saes, xs)):
            codes[m] = sae.encode(x)[1]
        for j, x in enumerate(xs):
            ss_tot[j] += float(((x - means[j]) ** 2).sum(dtype=f64))
            for i in range(n_models):
                ss_res[i, j] += float(((x - saes[j].decode(codes[i])) ** 2).sum(dtype=f64))
        fires = concepts.firing(codes, tau)
        part = (concepts.firing_counts(fires), concepts.cofire_counts(fires), codes.sum(dim=1, dtype=f64))
        counts, cofire, code_sums = part if counts is None else (counts + part[0], cofire + part[1],
                                                                  code_sums + part[2])
        del xs, codes, fires, part
    dims = [a.shape[1] for a in test_acts]
    r2 = np.array([[concepts.r2_from_means(ss_res[i, j] / (n * dims[j]), ss_tot[j] / (n * dims[j]))
                    for j in range(n_models)] for i in range(n_models)])
    code_means = [(code_sums[m] / n).float().cpu() for m in range(n_models)]
    energy = concepts.energy_of_means(code_means, [s.get_dictionary().detach().cpu() for s in saes])
    return _finish(r2, counts.cpu(), cofire.cpu(), energy, top, min_fires, cpu)


def _finish(r2: np.ndarray, counts: Tensor, cofire: Tensor, energy: Tensor, top: int, min_fires: int,
            cpu: float) -> tuple[VariantEval, Tensor]:
    """The scores from the R² matrix, firing counts (M, C), co-fire counts (C,) and energies (C,)."""
    union = counts.sum(0)
    order = energy.argsort(descending=True)
    prop = concepts.cofire_proportion(cofire, counts)[:, order]
    fe = concepts.firing_entropy(counts)[order]
    alive = (union[order] >= min_fires).numpy()
    top_ids = np.flatnonzero(alive)[:top]
    rest_ids = np.flatnonzero(alive)[top:]
    mean_prop = prop.mean(0).numpy()
    ev = VariantEval(
        r2=r2, fe=fe.numpy()[alive], cofire=prop.numpy(), union=union[order].numpy(),
        cofire_top=float(mean_prop[top_ids].mean()) if len(top_ids) else float("nan"),
        cofire_rest=float(mean_prop[rest_ids].mean()) if len(rest_ids) else float("nan"),
        dead=int((union == 0).sum()), cpu_seconds=cpu)
    return ev, order


@torch.no_grad()
def concept_codes(saes: list[BatchNormTopKSAE], test_acts: list[Tensor], stds: list[Standardiser], ids: Tensor,
                  chunk: int | None = None) -> Tensor:
    """Codes of concepts ``ids`` on every held-out row, (M, N, len(ids)) on the CPU, encoded ``chunk`` rows at a
    time (None: all at once)."""
    ids = ids.to(test_acts[0].device)
    chunk = chunk or len(test_acts[0])
    out = []
    for lo in range(0, len(test_acts[0]), chunk):
        out.append(torch.stack([sae.eval().encode(std(a[lo:lo + chunk]))[1][:, ids].cpu()
                                for sae, std, a in zip(saes, stds, test_acts)]))
    return torch.cat(out, dim=1)


def fit_variants(train_acts: list[Tensor], test_acts: list[Tensor], cfg: TrainConfig, seed: int,
                 tau: float, top: int, min_fires: int, controls: bool, ablation: bool = False,
                 chunk: int | None = None
                 ) -> tuple[dict[str, VariantEval], list[BatchNormTopKSAE], list[Standardiser], Tensor]:
    """Standardise, train every variant from the same initial weights and batch order, score it.

    Training rows are standardised per batch and the shuffled control reads them through index
    permutations (:class:`Rows`): no standardised or permuted copy of the training set is made; the
    held-out rows are standardised and scored ``chunk`` at a time (:func:`score`; None: at once). Returns
    the scores, the USAE's SAEs and standardisers, and its energy order.
    """
    stds = [Standardiser.fit(a) for a in train_acts]
    train_z = [Rows(a, s) for s, a in zip(stds, train_acts)]
    names = ("universal",) + (("shuffled", "independent") if controls else ()) + (("all-decoders",) if ablation else ())
    out, keep = {}, None
    for name in names:
        gen = torch.Generator().manual_seed(seed)
        rng = np.random.default_rng([seed, TRAIN_STREAM])
        if name == "shuffled":
            rng_pairs = np.random.default_rng([seed, SHUFFLE_STREAM])
            perms = pair_permutations(len(train_acts[0]), len(train_acts), rng_pairs)
            data = [Rows(a, s, p) for a, s, p in zip(train_acts, stds, perms)]
        else:
            data = train_z
        run_cfg = replace(cfg, update_all_decoders=True) if name == "all-decoders" else cfg
        start = time.process_time()
        saes = train(data, run_cfg, gen, rng, universal=name != "independent")
        ev, order = score(saes, test_acts, stds, tau, top, min_fires, time.process_time() - start, chunk)
        out[name] = ev
        if name == "universal":
            keep = (saes, order)
    saes, order = keep
    return out, saes, stds, order


def top_samples(codes: Tensor, n_samples: int) -> np.ndarray:
    """Each model's ``n_samples`` strongest samples of every concept in ``codes`` (M, N, c): (c, M, n_samples)."""
    picks = codes.argsort(dim=1, descending=True)[:, :n_samples, :]  # (M, n, concepts)
    return picks.permute(2, 0, 1).numpy()
