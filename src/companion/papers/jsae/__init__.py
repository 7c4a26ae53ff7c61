"""Jacobian Sparse Autoencoders: Sparsify Computations, Not Just Activations.

Lucy Farnik, Tim Lawson, Conor Houghton, Laurence Aitchison. ICML 2025 (PMLR 267).
arXiv: https://arxiv.org/abs/2502.18147 ; official code: lucyfarnik/jacobian-saes (MIT).

A JSAE is a pair of TopK SAEs, one on an MLP's input and one on its output, trained with an extra
L1 penalty on the Jacobian between the active latents of the two. The paper's technical point is
that this k x k Jacobian has a closed form, J = Q[:, A_y]^T diag(phi'(z)) P[A_x, :]^T with the
cached weight products P = W_dec^x W_in and Q = W_out W_enc^y, so the penalty is cheap.

Reproduced here at toy scale, on CPU: a byte-level 2-layer GPT-2 trained on standard-library
docstrings (and the same architecture left at its random initialisation); a traditional SAE pair
vs a JSAE pair on its last MLP; the paper's threshold sparsity metric and a scale-free one, the
CE-loss score and FVU; the efficient Jacobian checked against ``torch.func.jacrev`` and timed. The
``paper`` preset runs the same pipeline on a local Pythia checkpoint and corpus (:mod:`.paper_lm`).

Written by hand, because no well-kept library does it: the TopK SAE pair with the Jacobian
penalty and the efficient Jacobian (SAELens has TopK SAEs but not the pair or the penalty).
Deviation from the official code: activations are normalised to unit mean-square norm and the
scales folded into the MLP (the official code forbids normalisation); see the notebook. As in the
paper, which studies one pretrained model, a run trains one LM (from the base seed) and the claim
seeds vary the SAEs and the random LM. The LM trains to the spec's loss rather than for a fixed
number of steps (see :func:`train_lm`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from tqdm import tqdm
from torch import Tensor

from companion import runtime
from companion.claims import Claim, Verdict, evaluate_all, worst
from companion.papers.jsae.docstring_corpus import sample_windows, split_tokens, tiled_windows
from companion.papers.jsae.byte_lm import block_mlp, byte_gpt2, mean_ce, mlp_io, train_byte_lm
from companion.models.topk_sae import TopKSAE, constrained_step, fvu
from companion.fetch import Source
from companion.params import BaseParams, ParamError, local_default, param, require_path
from companion.plotting import figure

CLAIM_TAU = 0.01  # the threshold the paper's headline numbers use
CONTEXT = 64  # bytes per window
EVAL_WINDOWS = 256  # held-out windows: eight batches of 32 x 64 bytes
CHECK_TOKENS = 64  # tokens for the exactness and speed check inside a run
RANDOM_LM_SEED = 1_000_003  # offset so the random LM never shares the trained LM's init
WINDOW_STREAM = 7  # numpy stream id of the training windows: np.random.default_rng([seed, 7])
SLUG = "jsae"
PAPER_PRESET = ("the paper's setting on a local GPT-NeoX/Pythia checkpoint (model_path) and a local text corpus "
                "(data_path, e.g. the uncopyrighted Pile): an SAE pair and a JSAE on one MLP with the official "
                "Pythia-70m settings (layer 3, 32x expansion, k 32, lambda 1, 300 M token-steps), the same "
                "architecture re-initialised as the baseline; needs a GPU; smoke=true runs it on 4096 tokens")

SOURCES = (
    Source("pythia-70m-deduped", "Pythia-70m-deduped, the paper's lambda-sweep model (Hugging Face format)",
           "Apache-2.0", repo_id="EleutherAI/pythia-70m-deduped",
           allow=("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json")),
)


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the toy JSAE reproduction (defaults: the quick preset)."""

    lm_layers: int = param(2, lo=1, hi=4, help="transformer blocks of the byte-level LM")
    d_model: int = param(64, lo=32, hi=256, help="residual width d")
    d_mlp: int = param(256, lo=64, hi=2048, help="MLP hidden width m (2-8 x d_model)")
    seeds: int = param(3, lo=1, hi=64, help="SAE seeds the claims are evaluated over (one LM per run)")
    lm_steps: int = param(1000, lo=200, hi=5000, help="most LM training steps (batch 32 x 64 bytes)")
    lm_target_loss: float = param(2.62, lo=0.0, hi=6.0,
                                  help="stop LM training once its last-50-step loss is at most this (0: all steps)")
    hook_layer: int = param(1, lo=0, hi=63, help="block whose MLP is studied (< the LM's layers)")
    n_tokens: int = param(32768, lo=8192, hi=2**27, help="training tokens collected per LM")
    expansion: int = param(8, lo=4, hi=64, help="SAE latents n: expansion x d_model")
    k: int = param(8, lo=4, hi=64, help="active latents per token (TopK)")
    jac_coef: float = param(1.0, lo=0.0, hi=100.0, help="Jacobian penalty coefficient lambda")
    sweep_coefs: tuple[float, ...] = param((), lo=0.0, hi=100.0, min_len=0,
                                           help="extra lambdas for the trade-off sweep (base seed only)")
    sae_steps: int = param(600, lo=200, hi=200_000, help="SAE training steps")
    sae_lr: float = param(1e-3, lo=1e-4, hi=3e-3, help="Adam learning rate of the SAEs")
    sae_batch: int = param(256, lo=128, hi=4096, help="tokens per SAE step")
    thresholds: tuple[float, ...] = param((0.005, 0.01, 0.02, 0.05), lo=1e-6, hi=1.0,
                                          help="|J| thresholds for the sparsity metric")
    normalize_acts: bool = param(True, help="train on unit-RMS activations (False: pitfall demo)")
    use_reconstruction_for_phi: bool = param(False, help="phi' at x_hat (exact) instead of x (official)")
    run_random_baseline: bool = param(True, help="train a JSAE pair on the random-init LM")
    random_traditional: bool = param(False, help="also a traditional pair on the random LM")
    model_path: str = param(local_default(SLUG, "pythia-70m-deduped"),
                            help="paper preset: local GPT-NeoX (Pythia) folder saved with save_pretrained")
    data_path: str = param(local_default(SLUG, "pile"),
                           help="paper preset: a .txt/.jsonl text file, or a folder of them (jsonl: 'text' field)")
    smoke: bool = param(False, help="paper preset on a tiny budget (4096 tokens, 40 SAE steps; < 2 min CPU)")

    PRESETS = {
        "full": {"seeds": 5, "n_tokens": 65536, "sae_steps": 1500, "sae_batch": 512,
                 "sweep_coefs": (0.3, 3.0, 10.0), "random_traditional": True},
        # Pythia-70m-deduped as in the official runner's default: layer 3, 32x expansion, k 32, lambda 1;
        # 73 242 steps of 4096 tokens are the paper's 300 M tokens, drawn from a pool of n_tokens.
        "paper": {"seeds": 3, "hook_layer": 3, "n_tokens": 2**22, "expansion": 32, "k": 32, "jac_coef": 1.0,
                  "sae_steps": 73_242, "sae_lr": 5e-4, "sae_batch": 4096, "normalize_acts": False,
                  "device": "cuda", "random_traditional": True},
    }

    def __post_init__(self) -> None:
        if self.preset == "paper":
            from companion.papers.jsae.paper_lm import checkpoint_problem

            path = require_path("model_path", self.model_path, "a GPT-NeoX (Pythia) checkpoint saved with "
                                "save_pretrained (config.json, model.safetensors, tokenizer.json)", "dir")
            require_path("data_path", self.data_path, "a text corpus: a .txt or .jsonl file (one JSON "
                         "object with a 'text' field per line), or a folder of them")
            problem = checkpoint_problem(path, self.hook_layer, self.k, self.expansion)
            if problem:
                raise ParamError(f"parameter {problem[0]!r}: {problem[1]}")
            return
        if self.hook_layer >= self.lm_layers:
            raise ParamError(f"parameter 'hook_layer': {self.hook_layer} is out of range; "
                             f"allowed: int in [0, lm_layers - 1 = {self.lm_layers - 1}]")
        if not 2 <= self.d_mlp / self.d_model <= 8:
            raise ParamError(f"parameter 'd_mlp': {self.d_mlp} is out of range; "
                             f"allowed: 2-8 x d_model = [{2 * self.d_model}, {8 * self.d_model}]")
        if self.k > self.expansion * self.d_model:
            raise ParamError(f"parameter 'k': {self.k} is out of range; allowed: <= n latents")


# --- the MLP in (normalised) coordinates -------------------------------------------------------

def gelu_new(z: Tensor) -> Tensor:
    """GPT-2's tanh-approximate GELU."""
    return 0.5 * z * (1 + torch.tanh(0.7978845608028654 * (z + 0.044715 * z**3)))


def gelu_new_grad(z: Tensor) -> Tensor:
    """Closed-form derivative of :func:`gelu_new` (differentiable, for phi' at x_hat)."""
    t = torch.tanh(0.7978845608028654 * (z + 0.044715 * z**3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t**2) * 0.7978845608028654 * (1 + 3 * 0.044715 * z**2)


def gelu_grad(z: Tensor) -> Tensor:
    """Derivative of the exact (erf) GELU, Pythia's activation: Phi(z) + z phi(z)."""
    return 0.5 * (1 + torch.erf(z * 0.7071067811865476)) + z * torch.exp(-0.5 * z * z) * 0.3989422804014327


ACTIVATIONS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]] = {
    "gelu_new": (gelu_new, gelu_new_grad),
    "gelu": (F.gelu, gelu_grad),
    "identity": (lambda z: z, torch.ones_like),
}


@dataclass(frozen=True)
class Mlp:
    """f(x) = phi(x W_in + b_in) W_out + b_out with W_in (d, m), W_out (m, d)."""

    w_in: Tensor
    b_in: Tensor
    w_out: Tensor
    b_out: Tensor
    act: str = "gelu_new"

    def pre(self, x: Tensor) -> Tensor:
        """Hidden pre-activations z, (batch, m)."""
        return x @ self.w_in + self.b_in

    def __call__(self, x: Tensor) -> Tensor:
        """MLP output, (batch, d)."""
        return ACTIVATIONS[self.act][0](self.pre(x)) @ self.w_out + self.b_out

    def dphi(self, x: Tensor) -> Tensor:
        """Activation derivative phi'(z) at the input ``x``, (batch, m)."""
        return ACTIVATIONS[self.act][1](self.pre(x))


def folded_mlp(module: torch.nn.Module, c_x: float, c_y: float, act: str = "gelu_new") -> Mlp:
    """A GPT-2 or GPT-NeoX MLP acting on x / c_x and returning f(x) / c_y (scales folded into the weights)."""
    if hasattr(module, "c_fc"):  # GPT-2's Conv1D stores (in, out)
        lin_in, lin_out, w_in, w_out = module.c_fc, module.c_proj, module.c_fc.weight, module.c_proj.weight
    else:  # GPT-NeoX's nn.Linear stores (out, in)
        lin_in, lin_out = module.dense_h_to_4h, module.dense_4h_to_h
        w_in, w_out = lin_in.weight.T, lin_out.weight.T
    w_in, w_out = w_in.detach().contiguous(), w_out.detach().contiguous()
    return Mlp(w_in * c_x, lin_in.bias.detach().clone(), w_out / c_y, lin_out.bias.detach() / c_y, act)


# --- the efficient Jacobian --------------------------------------------------------------------

def weight_products(sae_x: TopKSAE, sae_y: TopKSAE, mlp: Mlp) -> tuple[Tensor, Tensor]:
    """P = W_dec^x W_in (n_x, m) and Q^T = (W_out W_enc^y)^T (n_y, m), once per step; both row-contiguous."""
    return sae_x.W_dec @ mlp.w_in, sae_y.W_enc.T @ mlp.w_out.T


def gather_rows(w: Tensor, idx: Tensor) -> Tensor:
    """``w[idx]`` for an (n, m) matrix and integer indices of any shape, shape (*idx.shape, m)."""
    return torch.index_select(w, 0, idx.reshape(-1)).view(*idx.shape, w.shape[1])


class ActiveJacobian(torch.autograd.Function):
    """J[b] = (Q^T[idx_y[b]] * phi'[b]) P[idx_x[b]]^T, (batch, k_out, k_in), with a hand-written backward.

    Profiled at the benchmark's size (batch 512, k 8, m 256), autograd's own backward of this product
    returned the P-side gradient as a transposed (batch, m, k) product, which then went through the
    strided slow path of the gathers' backward, and ``F.embedding``'s CPU backward adds rows one
    dispatcher call at a time. Here both row gradients come out as contiguous (batch, k, m) products
    and each goes into P's or Q^T's gradient with one ``index_add_``. Values and gradients are tested
    against autograd's dense Jacobian of the latent map.
    """

    @staticmethod
    def forward(ctx, p: Tensor, qt: Tensor, dphi: Tensor, idx_x: Tensor, idx_y: Tensor) -> Tensor:
        rows_y = gather_rows(qt, idx_y).mul_(dphi[:, None, :])
        rows_x = gather_rows(p, idx_x)
        ctx.save_for_backward(qt, dphi, idx_x, idx_y, rows_y, rows_x)
        ctx.n_x = p.shape[0]
        return torch.bmm(rows_y, rows_x.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        qt, dphi, idx_x, idx_y, rows_y, rows_x = ctx.saved_tensors
        m = qt.shape[1]
        g_rows_y = torch.bmm(grad, rows_x)  # d loss / d (Q^T rows * phi')
        g_rows_x = torch.bmm(grad.transpose(1, 2), rows_y)
        g_dphi = (g_rows_y * gather_rows(qt, idx_y)).sum(1) if ctx.needs_input_grad[2] else None
        g_p = g_rows_x.new_zeros(ctx.n_x, m).index_add_(0, idx_x.reshape(-1), g_rows_x.view(-1, m))
        g_qt = qt.new_zeros(qt.shape).index_add_(0, idx_y.reshape(-1), g_rows_y.mul_(dphi[:, None, :]).view(-1, m))
        return g_p, g_qt, g_dphi, None, None


def jacobian_from_products(p: Tensor, qt: Tensor, dphi: Tensor, idx_x: Tensor, idx_y: Tensor) -> Tensor:
    """J[b, i, j] = sum_a Q[a, idx_y[b,i]] phi'[b,a] P[idx_x[b,j], a], shape (batch, k_out, k_in)."""
    return ActiveJacobian.apply(p, qt, dphi, idx_x, idx_y)


def active_jacobian(sae_x: TopKSAE, sae_y: TopKSAE, mlp: Mlp, x_phi: Tensor, idx_x: Tensor,
                    idx_y: Tensor) -> Tensor:
    """Jacobian of output latents idx_y w.r.t. input latents idx_x, phi' taken at ``x_phi``."""
    p, qt = weight_products(sae_x, sae_y, mlp)
    return jacobian_from_products(p, qt, mlp.dphi(x_phi), idx_x, idx_y)


def naive_jacobian(sae_x: TopKSAE, sae_y: TopKSAE, mlp: Mlp, s_x: Tensor, idx_x: Tensor,
                   idx_y: Tensor) -> Tensor:
    """The same block via ``vmap(jacrev)`` of the full latent map s_x -> pre_y, (batch, k, k)."""
    def latent_map(s: Tensor) -> Tensor:
        return sae_y.pre(mlp(sae_x.decode(s[None])))[0]

    full = torch.func.vmap(torch.func.jacrev(latent_map))(s_x)  # (batch, n_y, n_x)
    rows = torch.gather(full, 1, idx_y[:, :, None].expand(-1, -1, full.shape[2]))
    return torch.gather(rows, 2, idx_x[:, None, :].expand(-1, idx_y.shape[1], -1))


# --- training a pair ---------------------------------------------------------------------------

def lr_factor(step: int, steps: int) -> float:
    """Learning-rate multiplier: 1 % linear warm-up, constant, linear decay over the last 20 %."""
    warm, decay = max(1, steps // 100), max(1, steps // 5)
    return min(1.0, (step + 1) / warm, (steps - step) / decay)


def pair_loss(sae_x: TopKSAE, sae_y: TopKSAE, mlp: Mlp, x: Tensor, y: Tensor, lam: float,
              phi_at_reconstruction: bool = False, dphi: Tensor | None = None) -> Tensor:
    """MSE(x_hat, x) + MSE(y_hat, y) + lam * mean |J| for a batch x, y of shape (batch, d).

    ``dphi``: phi'(x) of this batch when the caller has it (it depends on the data only, so
    :func:`train_pair` computes it once per token); ignored when phi' is taken at x_hat.
    """
    v_x, idx_x = sae_x.topk(x)
    x_hat = sae_x.decode_topk(v_x, idx_x)
    v_y, idx_y = sae_y.topk(y)
    loss = F.mse_loss(x_hat, x) + F.mse_loss(sae_y.decode_topk(v_y, idx_y), y)
    if lam > 0:
        if phi_at_reconstruction or dphi is None:
            dphi = mlp.dphi(x_hat if phi_at_reconstruction else x)
        loss = loss + lam * jacobian_from_products(*weight_products(sae_x, sae_y, mlp), dphi, idx_x, idx_y).abs().mean()
    return loss


# phi'(x) of every training token is kept when it takes at most this many bytes.
DPHI_CACHE_BYTES = 256 * 2**20


def train_pair(x: Tensor, y: Tensor, mlp: Mlp, lam: float, params: Params, rng: np.random.Generator,
               gen: torch.Generator) -> tuple[TopKSAE, TopKSAE]:
    """Train an SAE pair on (x, y) with Jacobian coefficient ``lam`` warmed up over 5 % of steps."""
    d, n, steps = x.shape[1], params.expansion * x.shape[1], params.sae_steps
    sae_x = TopKSAE(d, n, params.k, gen).to(x.device)
    sae_y = TopKSAE(d, n, params.k, gen).to(x.device)
    opt = torch.optim.Adam([*sae_x.parameters(), *sae_y.parameters()], lr=params.sae_lr)
    warm = max(1, steps // 20)
    dphi_all = None
    cache_bytes = x.shape[0] * mlp.w_in.shape[1] * x.element_size()
    if lam > 0 and not params.use_reconstruction_for_phi and cache_bytes <= DPHI_CACHE_BYTES:
        with torch.no_grad():
            dphi_all = mlp.dphi(x)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = params.sae_lr * lr_factor(step, steps)
        idx = torch.from_numpy(rng.integers(0, len(x), size=params.sae_batch)).to(x.device)
        lam_t = lam * min(1.0, (step + 1) / warm)
        loss = pair_loss(sae_x, sae_y, mlp, x[idx], y[idx], lam_t, params.use_reconstruction_for_phi,
                         None if dphi_all is None else dphi_all[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        constrained_step([sae_x, sae_y], opt)
    return sae_x, sae_y


# --- evaluation --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Acts:
    """One LM's MLP activations (normalised), its folded MLP and the scales c_x, c_y."""

    x: Tensor
    y: Tensor
    x_eval: Tensor
    y_eval: Tensor
    mlp: Mlp
    c_x: float
    c_y: float


def collect(model: torch.nn.Module, layer: int, train_w: np.ndarray, eval_w: np.ndarray,
            normalise: bool, act: str = "gelu_new") -> Acts:
    """MLP I/O of ``model`` on training and held-out windows, scaled to unit mean-square norm."""
    x, y = mlp_io(model, layer, train_w)
    x_eval, y_eval = mlp_io(model, layer, eval_w)
    c_x = float(x.pow(2).sum(1).mean().div(x.shape[1]).sqrt()) if normalise else 1.0
    c_y = float(y.pow(2).sum(1).mean().div(y.shape[1]).sqrt()) if normalise else 1.0
    mlp = folded_mlp(block_mlp(model, layer)[1], c_x, c_y, act)
    return Acts(x / c_x, y / c_y, x_eval / c_x, y_eval / c_y, mlp, c_x, c_y)


def ce_score(clean: float, spliced: float, zero: float) -> float:
    """(CE_zero - CE_spliced) / (CE_zero - CE_clean): 1 = perfect splice, 0 = as bad as zero-ablation."""
    return (zero - spliced) / (zero - clean)


def through(sae: TopKSAE, scale: float) -> Callable[[Tensor], Tensor]:
    """A hook function replacing raw activations (..., d) with the SAE reconstruction."""
    return lambda o: (sae(o.reshape(-1, o.shape[-1]) / scale) * scale).reshape(o.shape)


@dataclass(frozen=True)
class PairEval:
    """Held-out metrics of one SAE pair."""

    frac: tuple[float, ...]
    frac01: float
    l1l2: float
    fvu_in: float
    fvu_out: float
    dead_in: float
    dead_out: float
    ce: float = float("nan")
    train_s: float = float("nan")


@torch.no_grad()
def jacobians(sae_x: TopKSAE, sae_y: TopKSAE, acts: Acts, phi_at_reconstruction: bool,
              chunk: int = 4096) -> Tensor:
    """Active-latent Jacobians of every held-out token, (tokens, k, k)."""
    out = []
    for i in range(0, len(acts.x_eval), chunk):
        x, y = acts.x_eval[i:i + chunk], acts.y_eval[i:i + chunk]
        v_x, idx_x = sae_x.topk(x)
        x_phi = sae_x.decode_topk(v_x, idx_x) if phi_at_reconstruction else x
        out.append(active_jacobian(sae_x, sae_y, acts.mlp, x_phi, idx_x, sae_y.topk(y)[1]))
    return torch.cat(out)


@torch.no_grad()
def evaluate_pair(sae_x: TopKSAE, sae_y: TopKSAE, acts: Acts, jac: Tensor,
                  thresholds: tuple[float, ...]) -> PairEval:
    """Sparsity of ``jac`` (fraction above each threshold, l1/(k l2)), FVU and dead latents."""
    a = jac.abs()
    l1l2 = a.sum((1, 2)) / (a.shape[1] * a.flatten(1).norm(dim=1).clamp_min(1e-12))
    dead = [float((sae.encode(v)[0] > 0).sum(0).eq(0).float().mean())
            for sae, v in ((sae_x, acts.x_eval), (sae_y, acts.y_eval))]
    return PairEval(tuple(float((a > t).float().mean()) for t in thresholds),
                    float((a > CLAIM_TAU).float().mean()), float(l1l2.mean()),
                    fvu(acts.x_eval, sae_x(acts.x_eval)), fvu(acts.y_eval, sae_y(acts.y_eval)),
                    dead[0], dead[1])


def naive_active_jacobian(sae_x: TopKSAE, sae_y: TopKSAE, mlp: Mlp, s_x: Tensor, idx_x: Tensor,
                          idx_y: Tensor) -> Tensor:
    """The same block by ``vmap(jacrev)`` of the map from the k active input values to the k active output
    pre-activations: autograd without the n x n Jacobian, for paper-size dictionaries; (batch, k, k)."""
    def block(v: Tensor, ix: Tensor, iy: Tensor) -> Tensor:
        x_hat = v @ sae_x.W_dec[ix] + sae_x.b_dec
        return mlp(x_hat[None])[0] @ sae_y.W_enc[:, iy] + sae_y.b_enc[iy]

    return torch.func.vmap(torch.func.jacrev(block))(torch.gather(s_x, 1, idx_x), idx_x, idx_y)


def exactness_and_speed(sae_x: TopKSAE, sae_y: TopKSAE, acts: Acts, full_map: bool = True) -> tuple[float, float]:
    """Max |efficient - jacrev| at phi'(x_hat), and the CPU-time ratio jacrev / efficient.

    ``full_map``: jacrev of the whole n-latent map (the toy; timed); else of the active block only
    (the ``paper`` preset, where n x n per token does not fit: the speed-up is not measured, NaN).
    """
    with torch.no_grad():
        x, y = acts.x_eval[:CHECK_TOKENS], acts.y_eval[:CHECK_TOKENS]
        s_x, idx_x = sae_x.encode(x)
        idx_y = sae_y.encode(y)[1]

    def fast() -> Tensor:
        with torch.no_grad():
            return active_jacobian(sae_x, sae_y, acts.mlp, sae_x.decode(s_x), idx_x, idx_y)

    def slow() -> Tensor:
        naive = naive_jacobian if full_map else naive_active_jacobian
        return naive(sae_x, sae_y, acts.mlp, s_x, idx_x, idx_y).detach()

    err = float((fast() - slow()).abs().max())
    if not full_map:
        return err, float("nan")
    # CPU-time medians of several calls: the other worker's load makes single timings vary twofold.
    t_fast = runtime.median_time(fast, 21, clock=time.process_time)
    t_slow = runtime.median_time(slow, 3, warmup=0, clock=time.process_time)
    return err, t_slow / t_fast


# --- the experiment ----------------------------------------------------------------------------

@dataclass
class Results:
    """Everything the page shows: per-seed pair metrics by condition, examples, the sweep."""

    params: Params
    lm_loss: float
    lm_steps: int
    ce_base: dict[str, float]
    scales: dict[str, tuple[float, float]] = field(default_factory=dict)
    per_seed: list[dict[str, PairEval]] = field(default_factory=list)
    exact_err: list[float] = field(default_factory=list)
    speedup: list[float] = field(default_factory=list)
    abs_j: dict[str, np.ndarray] = field(default_factory=dict)
    examples: dict[str, np.ndarray] = field(default_factory=dict)
    sweep: list[tuple[float, PairEval]] = field(default_factory=list)
    source: str = ""


def describe(results: Results) -> str:
    """One line on the LM the pairs were trained on: the toy LM's training, or the paper preset's checkpoint."""
    if results.source:
        return results.source
    return f"LM train loss (nats/byte, last 50 steps): {results.lm_loss:.3f} after {results.lm_steps} steps"


@torch.no_grad()
def ce_baselines(model: torch.nn.Module, layer: int, eval_w: np.ndarray) -> dict[str, float]:
    """Held-out CE of the clean LM and with the MLP input or output of ``layer`` zero-ablated."""
    ln, mlp = block_mlp(model, layer)
    return {"clean": mean_ce(model, eval_w, {}), "zero_in": mean_ce(model, eval_w, {ln: torch.zeros_like}),
            "zero_out": mean_ce(model, eval_w, {mlp: torch.zeros_like})}


def ce_of(model: torch.nn.Module, layer: int, sae_x: TopKSAE, sae_y: TopKSAE, acts: Acts,
          eval_w: np.ndarray, base: dict[str, float]) -> float:
    """CE-loss score averaged over the input splice and the output splice."""
    ln, mlp = block_mlp(model, layer)
    ce_in = mean_ce(model, eval_w, {ln: through(sae_x, acts.c_x)})
    ce_out = mean_ce(model, eval_w, {mlp: through(sae_y, acts.c_y)})
    return 0.5 * (ce_score(base["clean"], ce_in, base["zero_in"])
                  + ce_score(base["clean"], ce_out, base["zero_out"]))


def _fit_eval(acts: Acts, lam: float, params: Params, seed: int, ce: Callable[..., float] | None
              ) -> tuple[TopKSAE, TopKSAE, Tensor, PairEval]:
    """Train one pair from ``seed`` and evaluate it (CE only when ``ce`` is given)."""
    rng, gen = runtime.generators(seed)
    t0 = time.perf_counter()
    sae_x, sae_y = train_pair(acts.x, acts.y, acts.mlp, lam, params, rng, gen)
    train_s = time.perf_counter() - t0
    jac = jacobians(sae_x, sae_y, acts, params.use_reconstruction_for_phi)
    ev = evaluate_pair(sae_x, sae_y, acts, jac, params.thresholds)
    with torch.no_grad():
        score = ce(sae_x, sae_y) if ce is not None else float("nan")
    return sae_x, sae_y, jac, PairEval(**{**ev.__dict__, "ce": score, "train_s": train_s})


def _windows(seed: int, params: Params) -> tuple[np.ndarray, np.ndarray]:
    """Training windows drawn from ``seed`` (shared by the trained and the random LM) and held-out ones."""
    train, heldout = split_tokens()
    rng = np.random.default_rng([seed, WINDOW_STREAM])
    return (sample_windows(train, params.n_tokens // CONTEXT, CONTEXT, rng),
            tiled_windows(heldout, EVAL_WINDOWS, CONTEXT))


@dataclass(frozen=True)
class PairJob:
    """Output of one worker job: a pair's metrics and what the page draws from it."""

    ev: PairEval
    scales: tuple[float, float]
    ce_base: dict[str, float] = field(default_factory=dict)
    exact_err: float = float("nan")
    speedup: float = float("nan")
    abs_j: np.ndarray | None = None


def train_lm(params: Params) -> tuple[float, int, dict[str, Tensor]]:
    """Train the run's LM from the base seed; returns its final loss, its steps and its weights.

    A byte-level LM leaves its early plateau after 240 to 700 steps depending on the seed (measured),
    so a fixed step count gives LMs of very different quality; training to the spec's loss makes the
    LM, not the step count, the same across base seeds.
    """
    rng, _ = runtime.generators(params.seed)
    lm = byte_gpt2(params.lm_layers, params.d_model, params.d_mlp, seed=params.seed, context=CONTEXT)
    lm = lm.to(runtime.resolve_device(params.device))
    loss, steps = train_byte_lm(lm, split_tokens()[0], params.lm_steps, rng, params.lm_target_loss)
    return loss, steps, {k: v.cpu() for k, v in lm.state_dict().items()}


def fit_job(acts: Acts, params: Params, seed: int, lam: float, ce: Callable[..., float] | None,
            base: dict[str, float], keep_jac: bool = False, check: bool = False, full_map: bool = True) -> PairJob:
    """One pair (``lam``, SAE seed ``seed``) on collected activations, evaluated; ``check``: J's exactness too."""
    sx, sy, jac, ev = _fit_eval(acts, lam, params, seed, ce)
    err, speed = exactness_and_speed(sx, sy, acts, full_map) if check else (float("nan"), float("nan"))
    return PairJob(ev, (acts.c_x, acts.c_y), base, err, speed, jac.abs().cpu().numpy() if keep_jac else None)


def pair_job(params: Params, seed: int, lam: float, lm_state: dict[str, Tensor] | None,
             keep_jac: bool = False, check_speed: bool = False) -> PairJob:
    """Worker job: one SAE pair (coefficient ``lam``, SAE seed ``seed``) on the trained LM (None: a random LM)."""
    runtime.limit_threads(1)
    arch = (params.lm_layers, params.d_model, params.d_mlp)
    # The random LM of this seed; a trained LM's weights then overwrite it.
    lm = byte_gpt2(*arch, seed=RANDOM_LM_SEED + seed, context=CONTEXT)
    if lm_state is not None:
        lm.load_state_dict(lm_state)
    lm = lm.to(runtime.resolve_device(params.device))
    train_w, eval_w = _windows(seed, params)
    acts = collect(lm, params.hook_layer, train_w, eval_w, params.normalize_acts)
    ce, base = None, {}
    if lm_state is not None:
        base = ce_baselines(lm, params.hook_layer, eval_w)

        def ce(sx: TopKSAE, sy: TopKSAE) -> float:
            return ce_of(lm, params.hook_layer, sx, sy, acts, eval_w, base)

    return fit_job(acts, params, seed, lam, ce, base, keep_jac, check_speed)


def _job(params: Params, kind: str, seed: int, lam: float, state: dict[str, Tensor] | None) -> PairJob:
    """A worker job: one pair of condition ``kind`` with SAE seed ``seed`` on ``state`` (None: random LM)."""
    first = seed == params.seed and state is not None
    return pair_job(params, seed, lam, state, keep_jac=first and kind != "sweep",
                    check_speed=kind == "jsae")


def run(params: Params, workers: int | None = None) -> Results:
    """Train one LM from the base seed, then per seed a traditional pair and a JSAE on it, and a JSAE on a random LM.

    As in the paper, the claims are about SAEs trained on one given model: the seeds vary the SAEs
    (initialisation, batches, training tokens) and the random LM, and the LM is drawn from the base
    ``seed``, so another base seed means another LM. The LM trains here, then every pair runs in
    one pool of worker processes (each worker pays the import of torch and transformers once).
    The ``paper`` preset reads a local checkpoint and corpus instead (:func:`.paper_lm.run_paper`).
    """
    if params.preset == "paper":
        from companion.papers.jsae.paper_lm import run_paper

        return run_paper(params)
    seeds = params.seed_list()
    # Nothing else runs while the LM trains, so it takes every core (25 vs 40 ms a step on two).
    runtime.limit_threads(workers or runtime.cores())
    loss, lm_steps, state = train_lm(params)
    runtime.limit_threads(1)
    conds = [("jsae-random", params.jac_coef)] + [("sae-random", 0.0)] * params.random_traditional
    jobs = [(params, name, s, lam, state) for s in seeds for name, lam in (("sae", 0.0), ("jsae", params.jac_coef))]
    jobs += [(params, "sweep", params.seed, lam, state) for lam in params.sweep_coefs]
    jobs += [(params, name, s, lam, None) for name, lam in conds if params.run_random_baseline for s in seeds]
    # Jacobian-penalised pairs cost about 2.5x a traditional pair: start them first to balance the workers.
    jobs.sort(key=lambda job: job[3] == 0)
    bar = tqdm(total=len(jobs), desc="jsae pairs", disable=None, leave=False)
    out = runtime.parallel_map(_job, jobs, workers, bar.update)
    bar.close()
    return assemble(params, loss, lm_steps, [job[1:4] for job in jobs], out)


def assemble(params: Params, lm_loss: float, lm_steps: int, keys: list[tuple[str, int, float]],
             out: list[PairJob], source: str = "") -> Results:
    """The run's :class:`Results` from its pair jobs, each keyed by (condition, seed, lambda)."""
    by_job = {(name, seed): r for (name, seed, _), r in zip(keys, out) if name != "sweep"}
    res = Results(params, lm_loss, lm_steps, by_job[("sae", params.seed)].ce_base, source=source)
    conds = [c for c in ("sae", "jsae", "jsae-random", "sae-random") if (c, params.seed) in by_job]
    for seed in params.seed_list():
        res.per_seed.append({name: by_job[(name, seed)].ev for name in conds})
        res.scales[f"trained-{seed}"] = by_job[("jsae", seed)].scales
        if ("jsae-random", seed) in by_job:
            res.scales[f"random-{seed}"] = by_job[("jsae-random", seed)].scales
        res.exact_err.append(by_job[("jsae", seed)].exact_err)
        res.speedup.append(by_job[("jsae", seed)].speedup)
    res.sweep = [(lam, r.ev) for (name, _, lam), r in zip(keys, out) if name == "sweep"]
    sae, js = by_job[("sae", params.seed)], by_job[("jsae", params.seed)]
    pick = np.random.default_rng(params.seed)
    tok = pick.choice(len(sae.abs_j), 4, replace=False)
    perm_r, perm_c = pick.permutation(params.k), pick.permutation(params.k)
    for name, job in (("sae", sae), ("jsae", js)):
        res.abs_j[name] = job.abs_j.flatten()[:200_000]
        res.examples[name] = job.abs_j[tok][:, perm_r][:, :, perm_c]
    return res


# --- claims, metrics, tables -------------------------------------------------------------------

CLAIMS: list[Claim] = [
    Claim("jac-sparser", "JSAE / SAE fraction of |J| > 0.01 on the trained LM (<= 0.7)",
          "6.2 % vs 58.3 % of entries, ratio 0.11 (Pythia-410m L15, Fig. 1)", 0.7, "<="),
    Claim("jac-sparser-every", "the same ratio in every seed: the largest over seeds (<= 0.7)",
          "6.2 % vs 58.3 % of entries, ratio 0.11 (Pythia-410m L15, Fig. 1)", 0.7, "<=", kind="exact"),
    Claim("l1l2-sparser", "scale-free l1/(k l2) of J: SAE minus JSAE (>= 0.05)",
          "not reported (our scale-free check)", 0.05, ">="),
    Claim("l1l2-sparser-every", "the same difference in every seed: the smallest over seeds (>= 0.05)",
          "not reported (our scale-free check)", 0.05, ">=", kind="exact"),
    Claim("ce-kept", "CE-loss score: JSAE minus SAE (>= -0.15)",
          "a drop of a few points (Pythia-70m lambda sweep)", -0.15, ">="),
    Claim("ce-jsae", "CE-loss score of the JSAE pair (>= 0.75)",
          "close to the SAE's (Pythia-70m lambda sweep)", 0.75, ">="),
    Claim("fvu-jsae", "worst FVU of the JSAE pair, input or output (<= 0.10)",
          "explained variance close to the SAE's", 0.10, "<="),
    Claim("trained-vs-random", "frac |J| > 0.01: random-LM JSAE minus trained-LM JSAE (>= 0.15)",
          "trained model sparser than re-initialised ('randomized' figure)", 0.15, ">="),
    Claim("trained-vs-random-l1l2", "scale-free l1/(k l2): random-LM JSAE minus trained-LM JSAE (>= 0.05)",
          "trained model sparser than re-initialised ('randomized' figure)", 0.05, ">="),
    Claim("jac-exact", "max |efficient J - jacrev J| at phi'(x_hat), worst over seeds (<= 1e-5)",
          "exact closed form (Sec. 4)", 1e-5, "<=", kind="exact"),
]


def _per(results: Results, cond: str, attr: str) -> list[float]:
    """One metric of one condition, per seed (NaN where the condition was not run)."""
    return [getattr(row[cond], attr) if cond in row else float("nan") for row in results.per_seed]


def claim_values(results: Results) -> dict[str, float | list[float]]:
    """The value each claim is tested on: per seed, or the worst seed for the exact rows.

    The speed-up of the efficient Jacobian is a timing: reported in :func:`metrics` and gated
    in ``benchmarks/bench_jsae.py``, never a verdict line (a loaded machine moves it)."""
    sae, js = (np.array(_per(results, c, "frac01")) for c in ("sae", "jsae"))
    l_sae, l_js = (np.array(_per(results, c, "l1l2")) for c in ("sae", "jsae"))
    ce_sae, ce_js = (np.array(_per(results, c, "ce")) for c in ("sae", "jsae"))
    fvu_worst = np.maximum(_per(results, "jsae", "fvu_in"), _per(results, "jsae", "fvu_out"))
    rand, l_rand = (np.array(_per(results, "jsae-random", a)) for a in ("frac01", "l1l2"))
    return {"jac-sparser": list(js / sae), "jac-sparser-every": worst(js / sae, "<="),
            "l1l2-sparser": list(l_sae - l_js), "l1l2-sparser-every": worst(l_sae - l_js, ">="),
            "ce-kept": list(ce_js - ce_sae), "ce-jsae": list(ce_js), "fvu-jsae": list(fvu_worst),
            "trained-vs-random": list(rand - js), "trained-vs-random-l1l2": list(l_rand - l_js),
            "jac-exact": max(results.exact_err)}


def check(results: Results) -> list[Verdict]:
    """Evaluate :data:`CLAIMS` over seeds."""
    return evaluate_all(CLAIMS, claim_values(results))


def summary(results: Results) -> pd.DataFrame:
    """Mean (sd) over seeds of every metric, one row per condition (SAE/JSAE x trained/random)."""
    names = [f"frac>{t:g}" for t in results.params.thresholds]
    rows = {}
    for cond in results.per_seed[0]:
        evs = [row[cond] for row in results.per_seed]
        cols = {n: [e.frac[i] for e in evs] for i, n in enumerate(names)}
        cols.update({a: [getattr(e, a) for e in evs]
                     for a in ("l1l2", "fvu_in", "fvu_out", "dead_in", "dead_out", "ce", "train_s")})
        rows[cond] = {n: f"{np.mean(v):.3f} ({np.std(v):.3f})" for n, v in cols.items()}
    return pd.DataFrame(rows).T


def metrics(results: Results) -> dict[str, float]:
    """Small JSON-able summary: seed means of the headline quantities."""
    out: dict[str, float] = {"lm_loss": results.lm_loss, "lm_steps": results.lm_steps,
                             "ce_clean": results.ce_base["clean"],
                             "ce_zero_out": results.ce_base["zero_out"]}
    for cond in results.per_seed[0]:
        for attr in ("frac01", "l1l2", "fvu_in", "fvu_out", "dead_in", "dead_out", "ce", "train_s"):
            vals = [v for v in _per(results, cond, attr) if np.isfinite(v)]
            if vals:
                out[f"{cond}.{attr}"] = float(np.mean(vals))
    for lam, ev in results.sweep:
        out[f"sweep{lam:g}.frac01"], out[f"sweep{lam:g}.ce"] = ev.frac01, ev.ce
    out["jac_speedup"] = float(np.median(results.speedup))
    return out


# --- figures -----------------------------------------------------------------------------------

LABELS = {"sae": "SAE, trained LM", "jsae": "JSAE, trained LM", "jsae-random": "JSAE, random LM",
          "sae-random": "SAE, random LM"}


def plot_jacobian_hist(results: Results) -> Figure:
    """Histogram and CDF of |J| (first seed, held-out tokens), SAE vs JSAE, x cut at 0.1."""
    fig, (ax_h, ax_c) = figure(2, 1, 4.0, 2.8)
    bins = np.linspace(0, 0.1, 51)
    for name in ("sae", "jsae"):
        vals = results.abs_j[name]
        ax_h.hist(vals, bins=bins, histtype="step", density=True, label=LABELS[name])
        ax_c.plot(np.sort(vals), np.linspace(0, 1, len(vals)), label=LABELS[name])
    ax_h.set(xlabel="|J| element", ylabel="density", yscale="log", title="|J| histogram")
    ax_c.set(xlabel="|J| element", ylabel="fraction <= x", xlim=(0, 0.1), title="CDF")
    ax_c.axvline(CLAIM_TAU, color="grey", ls=":", lw=1)
    ax_h.legend()
    return fig


def plot_sparsity_bars(results: Results) -> Figure:
    """Fraction of |J| above each threshold and the scale-free l1/(k l2), mean and sd over seeds."""
    fig, (ax_f, ax_l) = figure(2, 1, 4.4, 2.9)
    conds = list(results.per_seed[0])
    taus = results.params.thresholds
    width = 0.8 / len(conds)
    for c, cond in enumerate(conds):
        fr = np.array([row[cond].frac for row in results.per_seed])
        ax_f.bar(np.arange(len(taus)) + c * width, fr.mean(0), width, yerr=fr.std(0), label=LABELS[cond])
        l12 = _per(results, cond, "l1l2")
        ax_l.bar(c, np.mean(l12), 0.7, yerr=np.std(l12))
    ax_f.set(xticks=np.arange(len(taus)) + 0.4 - width / 2, xticklabels=[f"{t:g}" for t in taus],
             xlabel="threshold tau", ylabel="fraction |J| > tau", title="threshold metric (paper)")
    ax_l.set(xticks=range(len(conds)), ylabel="mean ||J||_1 / (k ||J||_2)", title="scale-free metric")
    ax_l.set_xticklabels([LABELS[c].replace(", ", "\n") for c in conds], fontsize=7)
    ax_f.legend()
    return fig


def plot_example_jacobians(results: Results) -> Figure:
    """|J| of four held-out tokens, SAE (top) vs JSAE (bottom); rows and columns shuffled."""
    fig, axes = figure(4, 2, 1.7, 1.7)
    vmax = max(results.examples[n].max() for n in ("sae", "jsae"))
    for r, name in enumerate(("sae", "jsae")):
        for t in range(4):
            ax = axes[4 * r + t]
            im = ax.imshow(results.examples[name][t], cmap="Greys", vmin=0, vmax=vmax)
            ax.set(xticks=[], yticks=[], title=f"{name.upper()} token {t}" if r == 0 or t == 0 else "")
            ax.grid(False)
    fig.colorbar(im, ax=axes, shrink=0.7, label="|J|")
    return fig


def plot_tradeoff(results: Results) -> Figure:
    """CE-loss score (x) vs fraction |J| > 0.01 (y) for every trained-LM pair, labelled by lambda."""
    fig, (ax,) = figure(1, 1, 4.5, 3.0)
    points = [(0.0, row["sae"]) for row in results.per_seed]
    points += [(results.params.jac_coef, row["jsae"]) for row in results.per_seed]
    points += results.sweep
    for lam in sorted({lam for lam, _ in points}):
        sel = [ev for l_, ev in points if l_ == lam]
        ax.scatter([e.ce for e in sel], [e.frac01 for e in sel], label=f"lambda = {lam:g}")
    ax.set(xlabel="CE-loss score (1 = perfect splice)", ylabel="fraction |J| > 0.01",
           title="sparsity / fidelity trade-off")
    ax.legend()
    return fig
