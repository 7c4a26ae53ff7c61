"""The toy experiment: the efficient Jacobian, training a JSAE pair, evaluation, the run and the claim values."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tqdm import tqdm
from torch import Tensor

from companion import runtime
from companion.models import optim
from companion.models.topk_sae import TopKSAE, constrained_step, fvu
from companion.papers.jsae import HI, TWIN, TWIN2, Params
from companion.papers.jsae.byte_lm import block_mlp, byte_gpt2, mean_ce, mlp_io, train_byte_lm
from companion.papers.jsae.docstring_corpus import sample_windows, split_tokens, tiled_windows

CLAIM_TAU = 0.01  # the threshold the paper's headline numbers use
CONTEXT = 64  # bytes per window
EVAL_WINDOWS = 128  # held-out windows: four batches of 32 x 64 bytes (8192 tokens; 256 before the cost trim of issue 53)
CHECK_TOKENS = 64  # tokens for the exactness and speed check inside a run
RANDOM_LM_SEED = 1_000_003  # offset so the random LM never shares the trained LM's init
RANDOM_LM2_SEED = 2_000_003  # the second random LM's offset: independent of the first
TWIN_SEED = 3_000_017  # the twin pair's SAE-seed offset: another init and batch order on the same activations
TWIN2_SEED = 4_000_037  # the second twin's SAE-seed offset: independent of the first twin's
WINDOW_STREAM = 7  # numpy stream id of the training windows: np.random.default_rng([seed, 7])
LM_THREADS = 2  # torch threads of the LM's training (the stored records' count; more threads change its bits)


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
                   idx_y: Tensor, x_at: Tensor | None = None) -> Tensor:
    """The same block via ``vmap(jacrev)`` of the full latent map s -> pre_y(f(x0 + (s - s_x) W_dec)), (batch, k, k).

    ``x_at`` None: x0 = d_x(s_x), the latent map's own Jacobian (phi' at x_hat); else x0 = ``x_at``,
    the map linearised at the true input (phi' at x, the Jacobian the official metrics and this page use).
    """
    def latent_map(s: Tensor, s0: Tensor, x0: Tensor) -> Tensor:
        return sae_y.pre(mlp((x0 + (s - s0) @ sae_x.W_dec)[None]))[0]

    x0 = sae_x.decode(s_x) if x_at is None else x_at
    full = torch.func.vmap(torch.func.jacrev(latent_map))(s_x, s_x, x0)  # (batch, n_y, n_x)
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
    opt = optim.Adam([*sae_x.parameters(), *sae_y.parameters()], lr=params.sae_lr)
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
    c_x = math.sqrt(float(x.pow(2).sum(1).mean().div(x.shape[1]))) if normalise else 1.0
    c_y = math.sqrt(float(y.pow(2).sum(1).mean().div(y.shape[1]))) if normalise else 1.0
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
    affine_r2: float = float("nan")


def affine_r2(x: Tensor, y: Tensor) -> float:
    """R^2 of the least-squares affine map x -> y: 1 - SSE / total sum of squares of y about its mean."""
    design = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1).double()
    coef = torch.linalg.lstsq(design, y.double()).solution
    sse = (design @ coef - y.double()).pow(2).sum()
    return float(1 - sse / (y.double() - y.double().mean(0)).pow(2).sum())


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
    """Sparsity of ``jac`` (fraction above each threshold, l1/(k l2)), FVU, dead latents and the MLP's affine R^2."""
    a = jac.abs()
    l1l2 = a.sum((1, 2)) / (a.shape[1] * a.flatten(1).norm(dim=1).clamp_min(1e-12))
    dead = [float((sae.encode(v)[0] > 0).sum(0).eq(0).float().mean())
            for sae, v in ((sae_x, acts.x_eval), (sae_y, acts.y_eval))]
    return PairEval(tuple(float((a > t).float().mean()) for t in thresholds),
                    float((a > CLAIM_TAU).float().mean()), float(l1l2.mean()),
                    fvu(acts.x_eval, sae_x(acts.x_eval)), fvu(acts.y_eval, sae_y(acts.y_eval)),
                    dead[0], dead[1], affine_r2=affine_r2(acts.x_eval.cpu(), acts.y_eval.cpu()))


def naive_active_jacobian(sae_x: TopKSAE, sae_y: TopKSAE, mlp: Mlp, s_x: Tensor, idx_x: Tensor,
                          idx_y: Tensor, x_at: Tensor | None = None) -> Tensor:
    """The same block by ``vmap(jacrev)`` of the map from the k active input values to the k active output
    pre-activations: autograd without the n x n Jacobian, for paper-size dictionaries; (batch, k, k).
    ``x_at`` as in :func:`naive_jacobian`."""
    def block(v: Tensor, v0: Tensor, ix: Tensor, iy: Tensor, x0: Tensor) -> Tensor:
        x_in = x0 + (v - v0) @ sae_x.W_dec[ix]
        return mlp(x_in[None])[0] @ sae_y.W_enc[:, iy] + sae_y.b_enc[iy]

    v = torch.gather(s_x, 1, idx_x)
    x0 = sae_x.decode(s_x) if x_at is None else x_at
    return torch.func.vmap(torch.func.jacrev(block))(v, v, idx_x, idx_y, x0)


def exactness_and_speed(sae_x: TopKSAE, sae_y: TopKSAE, acts: Acts, full_map: bool = True,
                        phi_at_reconstruction: bool = False, timed: bool = True) -> tuple[float, float]:
    """Max |efficient - jacrev| with phi' where the metrics take it, and the CPU-time ratio jacrev / efficient.

    ``phi_at_reconstruction`` False (the default, as the metrics): both linearise the MLP at the true
    input x; True: at x_hat. ``full_map``: jacrev of the whole n-latent map (the toy; timed); else of the
    active block only (the ``paper`` preset, where n x n per token does not fit: the speed-up is not
    measured, NaN). ``timed`` False: the error only (speed-up NaN).
    """
    with torch.no_grad():
        x, y = acts.x_eval[:CHECK_TOKENS], acts.y_eval[:CHECK_TOKENS]
        s_x, idx_x = sae_x.encode(x)
        idx_y = sae_y.encode(y)[1]

    x_at = None if phi_at_reconstruction else x

    def fast() -> Tensor:
        with torch.no_grad():
            return active_jacobian(sae_x, sae_y, acts.mlp, sae_x.decode(s_x) if x_at is None else x, idx_x, idx_y)

    def slow() -> Tensor:
        naive = naive_jacobian if full_map else naive_active_jacobian
        return naive(sae_x, sae_y, acts.mlp, s_x, idx_x, idx_y, x_at).detach()

    err = float((fast() - slow()).abs().max())
    if not (full_map and timed):
        return err, float("nan")
    # CPU-time medians of several calls: the other worker's load makes single timings vary twofold.
    t_fast = runtime.median_time(fast, 21, clock=time.process_time)
    t_slow = runtime.median_time(slow, 3, warmup=0, clock=time.process_time)
    return err, t_slow / t_fast


# --- the experiment ----------------------------------------------------------------------------

CONDITIONS = ("sae", "jsae", TWIN, TWIN2, HI, "jsae-random", "sae-random", "jsae-random2", "sae-random2")

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
            base: dict[str, float], keep_jac: bool = False, check: bool = False, full_map: bool = True,
            timed: bool = True) -> PairJob:
    """One pair (``lam``, SAE seed ``seed``) on collected activations, evaluated; ``check``: J's exactness too
    (and, if ``timed``, its speed-up)."""
    sx, sy, jac, ev = _fit_eval(acts, lam, params, seed, ce)
    err, speed = (exactness_and_speed(sx, sy, acts, full_map, params.use_reconstruction_for_phi, timed) if check
                  else (float("nan"), float("nan")))
    return PairJob(ev, (acts.c_x, acts.c_y), base, err, speed, jac.abs().cpu().numpy() if keep_jac else None)


_LM_CACHE: dict[tuple, tuple[torch.nn.Module, Acts, np.ndarray, dict[str, float]]] = {}


def lm_and_acts(params: Params, seed: int, lm_state: dict[str, Tensor] | None, lm_seed: int
                ) -> tuple[torch.nn.Module, Acts, np.ndarray, dict[str, float]]:
    """The LM of a job (the trained one from ``lm_state``, else the random LM initialised from ``lm_seed + seed``),
    its activations on the training tokens of ``seed`` and, on the trained LM, the CE baselines; kept per process
    for the run, so a worker that runs several pairs on one LM and seed computes them once (same values: nothing
    here draws from a generator)."""
    state_key = None if lm_state is None else tuple(float(v.float().sum()) for v in lm_state.values())
    key = (params, seed, lm_seed if lm_state is None else None, state_key)
    if key not in _LM_CACHE:
        # The random LM of this seed; a trained LM's weights then overwrite it.
        lm = byte_gpt2(params.lm_layers, params.d_model, params.d_mlp, seed=lm_seed + seed, context=CONTEXT)
        if lm_state is not None:
            lm.load_state_dict(lm_state)
        lm = lm.to(runtime.resolve_device(params.device))
        train_w, eval_w = _windows(seed, params)
        acts = collect(lm, params.hook_layer, train_w, eval_w, params.normalize_acts)
        base = ce_baselines(lm, params.hook_layer, eval_w) if lm_state is not None else {}
        _LM_CACHE[key] = (lm, acts, eval_w, base)
    return _LM_CACHE[key]


def pair_job(params: Params, seed: int, lam: float, lm_state: dict[str, Tensor] | None,
             keep_jac: bool = False, check: bool = False, timed: bool = False, lm_seed: int = RANDOM_LM_SEED,
             sae_seed: int | None = None) -> PairJob:
    """Worker job: one SAE pair (coefficient ``lam``) on the training tokens of ``seed``, on the trained LM
    (None: the random LM initialised from ``lm_seed + seed``); the SAEs from ``sae_seed`` (default ``seed``)."""
    runtime.limit_threads(1)
    lm, acts, eval_w, base = lm_and_acts(params, seed, lm_state, lm_seed)
    ce = None
    if lm_state is not None:

        def ce(sx: TopKSAE, sy: TopKSAE) -> float:
            return ce_of(lm, params.hook_layer, sx, sy, acts, eval_w, base)

    return fit_job(acts, params, seed if sae_seed is None else sae_seed, lam, ce, base, keep_jac, check,
                   timed=timed)


def _job(params: Params, kind: str, seed: int, lam: float, state: dict[str, Tensor] | None, lm_seed: int,
         sae_seed: int) -> PairJob:
    """A worker job: one pair of condition ``kind`` with SAE seed ``sae_seed + seed`` on ``state`` (None: the random LM
    initialised from ``lm_seed + seed``)."""
    first = seed == params.seed and state is not None
    return pair_job(params, seed, lam, state, keep_jac=first and kind in ("sae", "jsae"),
                    check=kind == "jsae", timed=first and kind == "jsae", lm_seed=lm_seed,
                    sae_seed=sae_seed + seed)


class Condition(NamedTuple):
    """One pair trained per seed: its name, its lambda, the offset added to the seed for its SAEs and, on a random
    LM, the offset added to the seed for that LM's initialisation (``None``: the trained LM)."""

    name: str
    lam: float
    sae_offset: int = 0
    lm_offset: int | None = None


def trained_conditions(params: Params) -> list[Condition]:
    """The pairs run on the trained LM, per seed: the traditional pair and the JSAE, the twin traditional pair (their
    control) and, with ``frontier_pairs``, the frontier check's JSAE at ``frontier_coef`` and the second twin (lambda
    = 0 beside them)."""
    pairs = [Condition("sae", 0.0), Condition("jsae", params.jac_coef), Condition(TWIN, 0.0, TWIN_SEED)]
    if params.frontier_pairs:
        pairs += [Condition(HI, params.frontier_coef), Condition(TWIN2, 0.0, TWIN2_SEED)]
    return pairs


def random_conditions(params: Params) -> list[Condition]:
    """The pairs run on the random LMs, per seed (SAE seed offset 0): the first LM's, then the second's."""
    if not params.run_random_baseline:
        return []
    first = [Condition("jsae-random", params.jac_coef, 0, RANDOM_LM_SEED)]
    first += [Condition("sae-random", 0.0, 0, RANDOM_LM_SEED)] * params.random_traditional
    return first + [Condition("jsae-random2", params.jac_coef, 0, RANDOM_LM2_SEED),
                    Condition("sae-random2", 0.0, 0, RANDOM_LM2_SEED)] * params.second_random


def run(params: Params, workers: int | None = None) -> Results:
    """Train one LM from the base seed, then per seed nine pairs: on it a traditional pair, a JSAE, a twin traditional
    pair, a JSAE at ``frontier_coef`` and a second twin (:func:`trained_conditions`); on each of two random LMs a JSAE
    and a traditional pair (:func:`random_conditions`).

    As in the paper, the claims are about SAEs trained on one given model: the seeds vary the SAEs
    (initialisation, batches, training tokens) and the random LM, and the LM is drawn from the base
    ``seed``, so another base seed means another LM. The LM trains here, then every pair runs in
    one pool of worker processes (each worker pays the import of torch and transformers once).
    The ``paper`` preset reads a local checkpoint and corpus instead (:func:`.paper_preset.run_paper`).
    """
    if params.preset == "paper":
        from companion.papers.jsae.paper_preset import run_paper

        return run_paper(params)
    seeds = params.seed_list()
    # Nothing else runs while the LM trains, so it takes two threads (25 vs 40 ms a step), never the machine's
    # core count: the thread count changes the LM's bits, and the records were stored with two.
    runtime.limit_threads(LM_THREADS)
    loss, lm_steps, state = train_lm(params)
    runtime.limit_threads(1)
    jobs = [(params, c.name, s, c.lam, state, RANDOM_LM_SEED, c.sae_offset)
            for s in seeds for c in trained_conditions(params)]
    jobs += [(params, "sweep", params.seed, lam, state, RANDOM_LM_SEED, 0) for lam in params.sweep_coefs]
    jobs += [(params, c.name, s, c.lam, None, c.lm_offset, c.sae_offset) for c in random_conditions(params)
             for s in seeds]
    # Jacobian-penalised pairs cost about 2.5x a traditional pair: start them first to balance the workers.
    jobs.sort(key=lambda job: job[3] == 0)
    bar = tqdm(total=len(jobs), desc="jsae pairs", disable=None, leave=False)
    out = runtime.parallel_map(_job, jobs, workers, bar.update)
    _LM_CACHE.clear()  # the LMs and activations of an inline run (workers drop theirs when they exit)
    bar.close()
    return assemble(params, loss, lm_steps, [job[1:4] for job in jobs], out)


def assemble(params: Params, lm_loss: float, lm_steps: int, keys: list[tuple[str, int, float]],
             out: list[PairJob], source: str = "") -> Results:
    """The run's :class:`Results` from its pair jobs, each keyed by (condition, seed, lambda)."""
    by_job = {(name, seed): r for (name, seed, _), r in zip(keys, out) if name != "sweep"}
    res = Results(params, lm_loss, lm_steps, by_job[("sae", params.seed)].ce_base, source=source)
    conds = [c for c in CONDITIONS if (c, params.seed) in by_job]
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

def per_seed_metric(results: Results, cond: str, attr: str) -> list[float]:
    """One metric of one condition, per seed (NaN where the condition was not run)."""
    return [getattr(row[cond], attr) if cond in row else float("nan") for row in results.per_seed]


def frontier_falls(frac: Sequence[np.ndarray], ce: Sequence[np.ndarray]) -> np.ndarray:
    """Per seed, the smallest of the successive falls of frac |J| > 0.01 and of the CE-loss score along three pairs
    (ordered by lambda): >= 0 when both fall, or stay, at each step."""
    steps = [a - b for v in (frac, ce) for a, b in zip(v, v[1:])]
    return np.min(np.stack(steps), axis=0)


def claim_values(results: Results) -> dict[str, list[float]]:
    """Per-seed values of every claim and control (the ``every`` rows are judged on their worst seed).

    The twin control trains another traditional pair per seed, from another SAE seed on the same
    activations: the same measurement with lambda = 0 in place of lambda. The random2 control repeats the
    paired trained-vs-random difference between the random LM and a second, independently initialised
    one. The frontier check has no control (a check: its CE fall from lambda 0 to 1 repeats ce-kept). The speed-up
    of the efficient Jacobian is a timing: reported in :func:`metrics` and gated in ``benchmarks/bench_jsae.py``,
    never a verdict line (a loaded machine moves it)."""
    frac = {c: np.array(per_seed_metric(results, c, "frac01")) for c in CONDITIONS}
    l1l2 = {c: np.array(per_seed_metric(results, c, "l1l2")) for c in CONDITIONS}
    ce = {c: np.array(per_seed_metric(results, c, "ce")) for c in CONDITIONS}
    fvu_worst = np.maximum(per_seed_metric(results, "jsae", "fvu_in"), per_seed_metric(results, "jsae", "fvu_out"))
    sae, js, tw = frac["sae"], frac["jsae"], frac[TWIN]
    ratio, ratio_c = list(js / sae), list(tw / sae)
    gap, gap_c = list(l1l2["sae"] - l1l2["jsae"]), list(l1l2["sae"] - l1l2[TWIN])
    drop = {m: {lm: v[f"sae{lm}"] - v[f"jsae{lm}"] for lm in ("", "-random", "-random2")}
            for m, v in (("frac", frac), ("l1l2", l1l2))}
    lams = ("sae", "jsae", HI)
    return {"jac-sparser": ratio, f"jac-sparser@{TWIN}": ratio_c,
            "jac-sparser-every": ratio, f"jac-sparser-every@{TWIN}": ratio_c,
            "l1l2-sparser": gap, f"l1l2-sparser@{TWIN}": gap_c,
            "l1l2-sparser@random": list(drop["l1l2"]["-random"]),
            "l1l2-sparser-every": gap, f"l1l2-sparser-every@{TWIN}": gap_c,
            "penalty-drop": list(sae - js), "penalty-drop@random": list(drop["frac"]["-random"]),
            f"penalty-drop@{TWIN}": list(sae - tw),
            "drop-vs-random": list(drop["frac"][""] - drop["frac"]["-random"]),
            "drop-vs-random@random2": list(drop["frac"]["-random"] - drop["frac"]["-random2"]),
            "drop-vs-random-l1l2": list(drop["l1l2"][""] - drop["l1l2"]["-random"]),
            "drop-vs-random-l1l2@random2": list(drop["l1l2"]["-random"] - drop["l1l2"]["-random2"]),
            "frontier": list(frontier_falls([frac[c] for c in lams], [ce[c] for c in lams])),
            "ce-kept": list(ce["jsae"] - ce["sae"]), "ce-jsae": list(ce["jsae"]), "fvu-jsae": list(fvu_worst),
            "jac-exact": list(results.exact_err)}


def summary(results: Results) -> pd.DataFrame:
    """Mean (sd) over seeds of every metric, one row per condition (SAE/JSAE x trained/random)."""
    names = [f"frac>{t:g}" for t in results.params.thresholds]
    rows = {}
    for cond in results.per_seed[0]:
        evs = [row[cond] for row in results.per_seed]
        cols = {n: [e.frac[i] for e in evs] for i, n in enumerate(names)}
        cols.update({a: [getattr(e, a) for e in evs]
                     for a in ("l1l2", "fvu_in", "fvu_out", "dead_in", "dead_out", "ce", "affine_r2", "train_s")})
        rows[cond] = {n: f"{np.mean(v):.3f} ({np.std(v):.3f})" for n, v in cols.items()}
    return pd.DataFrame(rows).T


def metrics(results: Results) -> dict[str, float]:
    """Small JSON-able summary: seed means of the headline quantities."""
    out: dict[str, float] = {"lm_loss": results.lm_loss, "lm_steps": results.lm_steps,
                             "ce_clean": results.ce_base["clean"],
                             "ce_zero_out": results.ce_base["zero_out"]}
    for cond in results.per_seed[0]:
        for attr in ("frac01", "l1l2", "fvu_in", "fvu_out", "dead_in", "dead_out", "ce", "affine_r2", "train_s"):
            vals = [v for v in per_seed_metric(results, cond, attr) if np.isfinite(v)]
            if vals:
                out[f"{cond}.{attr}"] = float(np.mean(vals))
    for lam, ev in results.sweep:
        out[f"sweep{lam:g}.frac01"], out[f"sweep{lam:g}.ce"] = ev.frac01, ev.ce
    timed = [s for s in results.speedup if np.isfinite(s)]  # the base seed's JSAE is timed (the toy only)
    out["jac_speedup"] = float(np.median(timed)) if timed else float("nan")
    return out
