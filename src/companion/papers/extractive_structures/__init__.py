"""Extractive Structures Learned in Pretraining Enable Generalization on Finetuned Facts.

Jiahai Feng, Stuart Russell, Jacob Steinhardt. ICML 2025 (PMLR 267). https://arxiv.org/abs/2412.04614

What is reproduced, at toy scale, with a 2-block ``transformers`` GPT-2 trained here:

- the *data-ordering effect*: a model finetuned on facts ``name dax -> city`` then on implications
  ``name zong -> animal(city)`` answers the implication for *new* names after learning only their
  facts (out-of-context reasoning, OCR); trained implications-first it does not;
- *weight grafting*: the weight change that implications add on top of known facts, grafted onto a
  model that learned counterfactual facts, predicts the counterfactual implications; the change
  learned from implications alone does not;
- a two-block analogue of layer freezing, and the linearised extractive scores (informative,
  upstream, downstream) of the facts-first model on the test implications.

With ``model_path`` the paper's own two-hop OCR test also runs on a pretrained causal LM read from a
local folder (``companion.models.causal_lm``, ``companion.papers.extractive_structures.two_hop_facts``).
The ``paper`` preset runs the paper's experiments on that model instead of the toy: data ordering,
weight grafting and layer keeping on natural-language dax/zong facts
(``companion.papers.extractive_structures.pretrained_dax``), and the two-hop test.

The synthetic world of names, cities and animals is ``companion.papers.extractive_structures.fact_world``. Entity
representations come from pretraining in the paper; here a "pretraining" stage on other
names' facts builds a fact-storage pathway and the name embeddings are then frozen.
Written by hand because no maintained library does it: the rank metric, the phase schedule, the
grafting algebra (``companion.papers.extractive_structures.weight_deltas``) and the extractive scores
(``companion.papers.extractive_structures.gpt2_attribution``). The model classes are ``transformers``'.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from torch import Tensor
from tqdm import tqdm
from transformers import GPT2Config, GPT2LMHeadModel

from companion import plotting, runtime
from companion.claims import Claim, Verdict, evaluate_all
from companion.papers.extractive_structures import pretrained_dax, two_hop_facts
from companion.papers.extractive_structures.fact_world import BOS, World, candidates, dax, make_world, zong
from companion.models import causal_lm
from companion.papers.extractive_structures import gpt2_attribution as attrib
from companion.papers.extractive_structures.weight_deltas import Delta, delta_since, snapshot, with_deltas
from companion.fetch import Source
from companion.params import BaseParams, ParamError, local_default, param, require_path, resolve_path

ORDERS = ("facts_first", "impl_first", "joint")
CONTRAST_ORDERS = ("facts_first", "impl_first")  # joint already generalises with frozen names
SCORE_KINDS = ("informative", "upstream", "downstream")
LOG_EVERY_A = 3  # Stage-A trajectory resolution in epochs (evaluation only; training is unchanged)


FULL = {"seeds": 20, "n_pre_names": 300, "n_train_names": 200, "epochs_pre": 100, "epochs_phase": 80,
        "epochs_test": 40, "replay_size": 100, "trace_seeds": 5, "contrast_seeds": 5}


PAPER_PRESET = ("the paper's experiments on a local pretrained causal LM (model_path), not the toy: data "
                "ordering, weight grafting and layer keeping on generated dax/zong facts, and the two-hop test")

SOURCES = (
    Source("model", "OLMo-7B, the paper's main model (Hugging Face format)", "Apache-2.0",
           repo_id="allenai/OLMo-7B-hf", allow=("*.json", "*.safetensors", "*.txt", "*.model")),
)


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the toy reproduction (defaults = quick preset)."""

    seeds: int = param(8, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    n_pre_names: int = param(200, lo=50, hi=2000, help="pretraining names (dax facts only)")
    n_train_names: int = param(160, lo=40, hi=1000, help="training names (the three orders, grafting)")
    n_test_names: int = param(40, lo=5, hi=1000, help="test names per test finetune; a multiple of n_cities")
    test_slices: int = param(3, lo=1, hi=10, help="test finetunes per order, each from the same Stage-A "
                             "model on its own new names (more evaluation items)")
    n_cities: int = param(20, lo=5, hi=50, help="cities = animals = answer options")
    n_layer: int = param(2, lo=2, hi=4, help="GPT-2 blocks")
    d_model: int = param(64, lo=32, hi=256, help="residual width")
    n_head: int = param(4, lo=1, hi=16, help="attention heads; divides d_model")
    lr: float = param(1e-3, lo=3e-4, hi=3e-3, help="Adam learning rate, every phase")
    batch_size: int = param(64, lo=16, hi=256, help="batch size")
    epochs_pre: int = param(80, lo=40, hi=300, help="epochs of the pretraining stage")
    epochs_phase: int = param(60, lo=20, hi=200, help="epochs of each Stage-A phase")
    epochs_test: int = param(30, lo=10, hi=100, help="epochs of the test-fact finetune")
    replay_size: int = param(80, lo=0, hi=2000, help="pretraining facts replayed in Stage A")
    freeze_name_embeddings: bool = param(True, help="False shows the failure mode")
    run_grafting: bool = param(True, help="run the weight-grafting experiment")
    run_scores: bool = param(True, help="compute the extractive-score heatmaps")
    trace_seeds: int = param(2, lo=1, hi=64, help="the first seeds also run the joint order and log "
                             "per-epoch ranks (figures)")
    contrast_seeds: int = param(2, lo=0, hi=64, help="the first seeds rerun with trainable name embeddings")
    model_path: str = param("", help="local folder of a pretrained causal LM: quick and full also run the "
                            "paper's two-hop test on it (empty = toy only); the paper preset runs ordering, "
                            "grafting, layer keeping and the two-hop test on it, and no toy")
    lm_lr: float = param(3e-6, lo=1e-7, hi=1e-2, help="Adam learning rate of the pretrained-LM finetune")
    lm_epochs: int = param(8, lo=1, hi=100, help="epochs of every pretrained-LM finetune phase")
    smoke: bool = param(False, help="paper preset on a tiny budget (two seeds, two epochs per phase)")

    PRESETS = {
        "full": FULL,
        # the paper's experiments on the LM at model_path (required); the toy's parameters are unused
        "paper": {"seeds": 5, "model_path": local_default("extractive-structures", "model")},
    }

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ParamError(f"parameter 'n_head': {self.n_head} does not divide d_model={self.d_model}")
        if self.n_test_names % self.n_cities:
            raise ParamError(f"parameter 'n_test_names': {self.n_test_names} is not a multiple of "
                             f"n_cities={self.n_cities}")
        if self.replay_size > self.n_pre_names:
            raise ParamError(f"parameter 'replay_size': {self.replay_size} exceeds n_pre_names={self.n_pre_names}")
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a Hugging Face causal LM folder (config.json, "
                         "weights and tokenizer; the paper used OLMo-7B)", "dir")
        problem = causal_lm.model_dir_problem(str(resolve_path(self.model_path))) if self.model_path else None
        if problem:
            raise ParamError(f"parameter 'model_path': {problem}; give a local folder holding a Hugging Face "
                             "causal LM and its tokenizer")


# ---------------------------------------------------------------- metric and loss

def mean_logit_loss(last_logits: Tensor, options: Tensor, answer: Tensor) -> Tensor:
    """``-z_correct + mean_o z_o`` over the options; (B,)."""
    return -last_logits.gather(1, answer[:, None])[:, 0] + last_logits[:, options].mean(1)


@torch.no_grad()
def mean_ranks(model: GPT2LMHeadModel, world: World, *sets: Tensor) -> tuple[float, ...]:
    """Mean option rank of the answers of each set of sequences, in one forward (0 = best)."""
    logits = model(input_ids=torch.cat(sets)[:, :3], logits_to_keep=1).logits[:, -1]
    out, start = [], 0
    for seqs in sets:
        part = logits[start:start + len(seqs)]
        out.append(float(causal_lm.logit_ranks(part, candidates(world, seqs), seqs[:, 3]).float().mean()))
        start += len(seqs)
    return tuple(out)


def mean_rank(model: GPT2LMHeadModel, world: World, seqs: Tensor) -> float:
    """Mean option rank of the answers of ``seqs`` (chance = (C-1)/2)."""
    return mean_ranks(model, world, seqs)[0]


# ---------------------------------------------------------------- model and training

def build_model(world: World, n_layer: int, d_model: int, n_head: int, gen: torch.Generator) -> GPT2LMHeadModel:
    """A small untied GPT-2 whose initialisation is drawn from ``gen`` only."""
    config = GPT2Config(vocab_size=world.vocab, n_positions=8, n_embd=d_model, n_layer=n_layer, n_head=n_head,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False,
                        bos_token_id=BOS, eos_token_id=BOS, use_cache=False,
                        activation_function="gelu_pytorch_tanh")  # GPT-2's gelu_new, one fused kernel
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
        return GPT2LMHeadModel(config).eval()


def train(model: GPT2LMHeadModel, seqs: Tensor, epochs: int, lr: float, batch_size: int,
          rng: np.random.Generator, frozen_rows: Tensor | None = None, log=None, log_every: int = 1) -> list:
    """Adam (fresh) on next-token cross-entropy of the answer token; ``log()`` every ``log_every`` epochs.

    ``frozen_rows``: token ids whose input embeddings get zero gradient (so Adam never moves them).
    """
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    wte = model.transformer.wte.weight
    history = []
    for epoch in range(epochs):
        for idx in np.array_split(rng.permutation(len(seqs)), max(1, -(-len(seqs) // batch_size))):
            batch = seqs[torch.as_tensor(idx)]
            logits = model(input_ids=batch[:, :3], logits_to_keep=1).logits[:, -1]
            loss = torch.nn.functional.cross_entropy(logits, batch[:, 3])
            opt.zero_grad(set_to_none=False)
            loss.backward()
            if frozen_rows is not None:
                wte.grad[frozen_rows] = 0.0
            opt.step()
        if log is not None and (epoch + 1) % log_every == 0:
            history.append(log())
    return history


# ---------------------------------------------------------------- one seed

@dataclass
class SeedResult:
    """Everything measured for one seed."""

    ocr: dict[str, float] = field(default_factory=dict)  # zong(B) rank after the test finetune
    test_fact: dict[str, float] = field(default_factory=dict)  # dax(B) rank after the test finetune
    leak: dict[str, float] = field(default_factory=dict)  # zong(B) rank before the test finetune
    impl_memorised: float = float("nan")  # zong(A) rank after impl-first phase 1
    traj_a: dict[str, np.ndarray] = field(default_factory=dict)  # (epochs, 2): dax(A), zong(A)
    traj_b: dict[str, np.ndarray] = field(default_factory=dict)  # (epochs+1, 2): dax(B), zong(B)
    graft: dict[str, list[float]] = field(default_factory=dict)  # weights -> [Impl(F'), Impl(F), F']
    layer_keep: dict[str, list[float]] = field(default_factory=dict)  # kept block -> [dax(B), zong(B)]
    scores: dict[str, np.ndarray] = field(default_factory=dict)  # kind -> (T, n_components)
    trainable_ocr: dict[str, float] = field(default_factory=dict)  # OCR ranks with trainable names


def _phases(order: str, world: World, replay: Tensor) -> list[Tensor]:
    """The Stage-A phases of one order, each with the pretraining replay appended."""
    facts, impls = dax(world, world.train), zong(world, world.train)
    plan = {"facts_first": [facts, impls], "impl_first": [impls, facts], "joint": [torch.cat([facts, impls])]}
    return [torch.cat([p, replay]) for p in plan[order]]


def run_seed(params: Params, seed: int) -> SeedResult:
    """Pretraining, the three orders with the test finetune, grafting and scores for one seed."""
    rng, gen = runtime.generators(seed)
    world = make_world(params.n_pre_names, params.n_train_names, params.n_test_names * params.test_slices,
                       params.n_cities, rng)
    model = build_model(world, params.n_layer, params.d_model, params.n_head, gen)
    train(model, dax(world, world.pre), params.epochs_pre, params.lr, params.batch_size, rng)
    names = torch.as_tensor(world.name_tok(np.arange(world.n_names)))
    frozen = names if params.freeze_name_embeddings else None
    replay = dax(world, rng.choice(world.pre, size=params.replay_size, replace=False))
    res = SeedResult()
    trace = seed - params.seed < params.trace_seeds  # joint is reported, never checked: the figure's seeds only
    deltas, (theta, new) = _orders(res, model, world, replay, frozen, params, rng, trace,
                                   ORDERS if trace else CONTRAST_ORDERS)
    first = _test_slices(world, params)[0]  # the slice the kept facts-first model learned
    dax_b, zong_b = dax(world, first), zong(world, first)
    res.layer_keep = _layer_keep(new, theta, world, params.n_layer, dax_b, zong_b)
    if params.run_scores:
        res.scores = _scores(new, theta, world, zong_b, rng)
    if params.run_grafting:
        res.graft = _graft(model, world, replay, deltas, params, rng, frozen)
    if params.freeze_name_embeddings and seed - params.seed < params.contrast_seeds:
        other = SeedResult()
        _orders(other, model, world, replay, None, params, rng, trace=False, orders=CONTRAST_ORDERS)
        res.trainable_ocr = other.ocr
    return res


def _orders(res: SeedResult, model: GPT2LMHeadModel, world: World, replay: Tensor, frozen: Tensor | None,
            params: Params, rng: np.random.Generator, trace: bool = True,
            orders: tuple[str, ...] = ORDERS) -> tuple[dict, tuple[Delta, GPT2LMHeadModel]]:
    """Stage A in each order, then the test finetune; fills ``res`` (trajectories if ``trace``).

    Returns the Stage-A phase deltas by (order, phase) and the facts-first (theta, theta') pair.
    """
    fit = dict(lr=params.lr, batch_size=params.batch_size, rng=rng, frozen_rows=frozen)
    dax_a, zong_a = dax(world, world.train), zong(world, world.train)
    deltas, kept = {}, None
    for order in orders:
        m = copy.deepcopy(model)
        log_a = lambda: mean_ranks(m, world, dax_a, zong_a)  # noqa: E731
        traj = []
        for k, phase in enumerate(_phases(order, world, replay)):
            before = snapshot(m)
            traj += train(m, phase, params.epochs_phase, log=log_a if trace else None, log_every=LOG_EVERY_A, **fit)
            deltas[(order, k)] = delta_since(m, before)
            if order == "impl_first" and k == 0:
                res.impl_memorised = mean_rank(m, world, zong_a)
        theta, stage_a = snapshot(m), copy.deepcopy(m)
        traj_b = np.mean([_test_finetune(m if j == 0 else copy.deepcopy(stage_a), world, names, params, fit, trace)
                          for j, names in enumerate(_test_slices(world, params))], axis=0)
        if trace:
            res.traj_a[order], res.traj_b[order] = np.array(traj), traj_b
        res.leak[order] = traj_b[0][1]
        res.test_fact[order], res.ocr[order] = traj_b[-1]
        if order == "facts_first":
            kept = (theta, m)
    return deltas, kept


def _test_slices(world: World, params: Params) -> list[np.ndarray]:
    """The disjoint test slices; each covers every city equally often."""
    return np.split(world.test, params.test_slices)


def _test_finetune(m: GPT2LMHeadModel, world: World, names: np.ndarray, params: Params, fit: dict,
                   trace: bool) -> np.ndarray:
    """Stage B on one slice's facts: ranks [dax, zong] of the slice before, (each epoch if ``trace``) and after."""
    dax_b, zong_b = dax(world, names), zong(world, names)
    log_b = lambda: mean_ranks(m, world, dax_b, zong_b)  # noqa: E731
    traj_b = [log_b()] + train(m, dax_b, params.epochs_test, log=log_b if trace else None, **fit)
    return np.array(traj_b + ([] if trace else [log_b()]))


def _layer_keep(new: GPT2LMHeadModel, theta: Delta, world: World, n_layer: int, dax_b: Tensor,
                zong_b: Tensor) -> dict[str, list[float]]:
    """Keep the test-fact weight change only in one block: ranks of dax(B) and zong(B)."""
    delta_b = delta_since(new, theta)
    out = {}
    for l in range(n_layer):
        dropped = {k: -v for k, v in delta_b.items() if not k.startswith(f"transformer.h.{l}.")}
        with with_deltas(new, dropped):
            out[f"block {l}"] = list(mean_ranks(new, world, dax_b, zong_b))
    return out


def _scores(new: GPT2LMHeadModel, theta: Delta, world: World, zong_b: Tensor,
            rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Extractive scores of the test finetune on zong(B), mean over test points; (T, components)."""
    old = copy.deepcopy(new)
    with torch.no_grad():
        for name, p in old.named_parameters():
            p.copy_(theta[name])
    delta = delta_since(new, theta)
    n = len(zong_b)
    cf = torch.cat([zong_b[torch.as_tensor((np.arange(n) + rng.integers(1, n, size=n)) % n)] for _ in range(10)])
    options = candidates(world, zong_b)
    loss = lambda logits, ans=zong_b[:, 3]: mean_logit_loss(logits[:, -1], options, ans.repeat(len(logits) // n))  # noqa: E731
    s = attrib.extractive_scores(old, new, zong_b[:, :3], cf[:, :3], loss, delta)
    return {k: v.mean(0).numpy() for k, v in s.items()}


def _graft(w: GPT2LMHeadModel, world: World, replay: Tensor, deltas: dict, params: Params,
           rng: np.random.Generator, frozen: Tensor | None) -> dict[str, list[float]]:
    """Ranks [Impl(F'), Impl(F), F'] of W+D_F', the graft W+D_F'+D_{F,Impl} and the control W+D_F'+D_Impl."""
    before = snapshot(w)
    train(w, torch.cat([dax(world, world.train, True), replay]), params.epochs_phase, params.lr,
          params.batch_size, rng, frozen)
    d_cf = delta_since(w, before)
    with torch.no_grad():
        for name, p in w.named_parameters():
            p.copy_(before[name])
    evals = (zong(world, world.train, True), zong(world, world.train), dax(world, world.train, True))
    out = {}
    for label, extra in (("W_F'", []), ("graft", [deltas[("facts_first", 1)]]),
                         ("control", [deltas[("impl_first", 0)]])):
        with with_deltas(w, d_cf, *extra):
            out[label] = list(mean_ranks(w, world, *evals))
    return out


# ---------------------------------------------------------------- experiment, claims, figures

@dataclass
class Results:
    """The parameters, the seeds and one :class:`SeedResult` per seed."""

    params: Params
    seeds: list[int]
    per_seed: list[SeedResult]
    pretrained: pd.DataFrame | None = None  # the two-hop test on the model at ``model_path``
    on_lm: bool = False  # the per-seed results come from the pretrained LM (paper preset), not the toy

    @property
    def chance(self) -> float:
        """Mean rank of a random guess among the options."""
        return ((pretrained_dax.N_TEST if self.on_lm else self.params.n_cities) - 1) / 2

    def values(self, get) -> np.ndarray:
        """``get(seed_result)`` for every seed, as an array."""
        return np.array([get(r) for r in self.per_seed], dtype=float)


def run(params: Params) -> Results:
    """Run every seed, one worker process per core, then the pretrained-LM test if ``model_path`` is set.

    The ``paper`` preset runs :func:`run_pretrained` instead.
    """
    if params.preset == "paper":
        return run_pretrained(params)
    runtime.limit_threads(1)  # tiny matmuls: processes over seeds use the cores better than threads
    seeds = params.seed_list()
    with tqdm(total=len(seeds), desc="seeds", disable=None, leave=False) as bar:
        per_seed = runtime.parallel_map(run_seed, [(params, s) for s in seeds], on_done=bar.update)
    return Results(params, seeds, per_seed, pretrained_ocr(params) if params.model_path else None)


# ---------------------------------------------------------------- the paper's test on a pretrained LM

LM_BATCH = 8  # the official batch size
# fact and implication rank after finetuning on the facts, no layer frozen (layer-freezing table, OLMo-7b)
PAPER_LM_RANKS = {"first hop": (0.00, 0.00), "second hop": (0.00, 1.80)}


def run_pretrained(params: Params) -> Results:
    """The paper preset: ordering, grafting and layer keeping per seed, then the two-hop test, on the LM."""
    runtime.limit_threads()
    if params.smoke:
        params = replace(params, seeds=min(params.seeds, 2), lm_epochs=min(params.lm_epochs, 2))
    model, tok = causal_lm.load(str(resolve_path(params.model_path)), runtime.resolve_device(params.device))
    seeds = params.seed_list()
    per_seed = [SeedResult(**pretrained_dax.run_seed(model, tok, s, params.lm_epochs, params.lm_lr))
                for s in tqdm(seeds, desc="seeds", disable=None, leave=False)]
    return Results(params, seeds, per_seed, pretrained_ocr(params, model, tok), on_lm=True)


def pretrained_ocr(params: Params, model=None, tok=None) -> pd.DataFrame:
    """Finetune the model at ``model_path`` (or the one given) on each hop's 20 new facts; ranks and log-probs
    before and after."""
    if model is None:
        model, tok = causal_lm.load(str(resolve_path(params.model_path)), runtime.resolve_device(params.device))
    rng = np.random.default_rng(params.seed)
    saved = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}  # CPU: spare GPU memory
    rows = {}
    for hop in two_hop_facts.two_hops(rng):
        facts = causal_lm.encode(tok, hop.fact_prompts, hop.fact_answers)
        impls = causal_lm.encode(tok, hop.impl_prompts, hop.impl_answers)
        tests = [(facts, causal_lm.first_tokens(tok, hop.fact_options),
                  torch.tensor([hop.fact_options.index(a) for a in hop.fact_answers])),
                 (impls, causal_lm.first_tokens(tok, hop.impl_options),
                  torch.tensor([hop.impl_options.index(a) for a in hop.impl_answers]))]

        def measure() -> list[float]:
            ranks = [float(causal_lm.option_ranks(model, *t).float().mean()) for t in tests]
            return ranks + [float(causal_lm.answer_logprob(model, impls).mean())]

        before = measure()
        causal_lm.finetune(model, facts, params.lm_epochs, params.lm_lr, LM_BATCH, rng)
        after = measure()
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(saved[n])
        rows[hop.name] = before + after + list(PAPER_LM_RANKS[hop.name])
    cols = [f"{what} {when}" for when in ("before", "after") for what in ("fact rank", "impl rank", "impl log-prob")]
    return pd.DataFrame.from_dict(rows, orient="index", columns=cols + ["paper fact rank", "paper impl rank"])


def pretrained_table(results: Results) -> pd.DataFrame | str:
    """The two-hop test on the pretrained LM (ranks among 20 options, chance 9.5), or why it did not run."""
    if results.pretrained is None:
        return "model_path is empty: the pretrained-LM test did not run (see the paper preset)"
    return results.pretrained.round(2).rename_axis(f"{results.params.model_path} (chance 9.5)")


CLAIMS = [
    Claim("ordering-gap", "Implications-first leaves the test implications near chance while facts-first "
          "does not: mean OCR rank gap impl-first minus facts-first",
          "facts first gives OCR, impl. first stays near chance 9.5 (OLMo-7b, data-ordering figure)", 3.0, ">="),
    Claim("facts-first-ocr", "Facts-first training gives OCR on new facts: mean zong(test) rank after the test-fact "
          "finetune (chance 9.5)", "well below chance (OLMo-7b, data-ordering figure)", 5.5, "<="),
    Claim("impl-first-chance", "Implications-first training gives no OCR: mean zong(test) rank (chance 9.5)",
          "near chance 9.5 (OLMo-7b, data-ordering figure)", 6.5, ">="),
    Claim("graft-margin", "Grafting D_{F,Impl} beats the control graft D_Impl on counterfactual implications: "
          "rank(control) - rank(graft)", "8.42 - 1.13 = 7.29 (grafting table, OLMo-7b)", 2.5, ">="),
    Claim("graft-ocr", "The graft predicts the counterfactual implications Impl(F'): mean rank",
          "1.13 (grafting table, OLMo-7b)", 7.0, "<="),
    Claim("no-graft-chance", "Without a graft, W_F' does not know Impl(F'): mean rank", "9.12 (grafting table)",
          8.0, ">="),
    Claim("test-facts-learned", "Sanity: the test facts are learned in every order (worst order's dax(test) rank)",
          "0.00 (fact ranks)", 0.5, "<="),
    Claim("no-leakage", "Sanity: before the test finetune zong(test) is at chance (worst order's |rank - 9.5|)",
          "not reported", 2.5, "<="),
    Claim("impl-memorised", "Sanity: impl-first phase 1 memorises zong(train) (rank after the phase)",
          "not reported", 0.5, "<="),
]


def _per_seed(results: Results) -> dict[str, np.ndarray]:
    """The measured value of every claim on every seed."""
    v, c = results.values, results.chance
    out = {
        "ordering-gap": v(lambda r: r.ocr["impl_first"] - r.ocr["facts_first"]),
        "facts-first-ocr": v(lambda r: r.ocr["facts_first"]),
        "impl-first-chance": v(lambda r: r.ocr["impl_first"]),
        "test-facts-learned": v(lambda r: max(r.test_fact.values())),
        "no-leakage": v(lambda r: max(abs(x - c) for x in r.leak.values())),
        "impl-memorised": v(lambda r: r.impl_memorised),
    }
    graft = {k: v(lambda r, k=k: r.graft[k][0] if r.graft else float("nan")) for k in ("W_F'", "graft", "control")}
    out.update({"graft-margin": graft["control"] - graft["graft"], "graft-ocr": graft["graft"],
                "no-graft-chance": graft["W_F'"]})
    return out


def check(results: Results) -> list[Verdict]:
    """Evaluate :data:`CLAIMS` on the per-seed values (grafting claims are NaN without grafting)."""
    return evaluate_all(CLAIMS, {k: list(x) for k, x in _per_seed(results).items()})


def metrics(results: Results) -> dict:
    """Small JSON-able summary: means over seeds (and the smallest ordering gap)."""
    per = _per_seed(results)
    out = {f"ocr_{o}": float(np.mean([r.ocr[o] for r in results.per_seed if o in r.ocr])) for o in ORDERS}
    out["gap_min"] = float(per["ordering-gap"].min())
    out.update({f"claim_{k}": float(np.mean(x)) for k, x in per.items()})
    contrast = [r for r in results.per_seed if r.trainable_ocr]
    out.update({f"trainable_ocr_{o}": float(np.mean([r.trainable_ocr[o] for r in contrast]))
                for o in CONTRAST_ORDERS if contrast})
    for blk in results.per_seed[0].layer_keep:
        out[f"keep_{blk.replace(' ', '')}_ocr"] = float(results.values(lambda r, b=blk: r.layer_keep[b][1]).mean())
    if results.pretrained is not None:
        for hop, row in results.pretrained.iterrows():
            out.update({f"lm_{hop.replace(' ', '_')}_{k.replace(' ', '_')}": float(v) for k, v in row.items()})
    return out


def plot_ordering(results: Results) -> Figure:
    """Fact (dashed) and implication (solid) ranks per epoch: Stage A (train names), Stage B (test names)."""
    fig, (ax_a, ax_b) = plotting.figure(2, 1, width=4.2, height=3.0)
    if not any(r.traj_a for r in results.per_seed):
        for ax in (ax_a, ax_b):
            ax.text(0.5, 0.5, "per-epoch ranks are logged by the toy only\n(see the OCR rank per seed)",
                    ha="center", transform=ax.transAxes)
        return fig
    for i, order in enumerate(ORDERS):
        colour = f"C{i}"
        for ax, key in ((ax_a, "traj_a"), (ax_b, "traj_b")):
            runs = np.stack([getattr(r, key)[order] for r in results.per_seed if order in r.traj_a])
            x = (np.arange(runs.shape[1]) + 1) * LOG_EVERY_A if key == "traj_a" else np.arange(runs.shape[1])
            for j, style in ((0, "--"), (1, "-")):
                mean, sd = runs[..., j].mean(0), runs[..., j].std(0)
                ax.plot(x, mean, style, color=colour, label=f"{order} {'fact' if j == 0 else 'impl'}")
                ax.fill_between(x, mean - sd, mean + sd, color=colour, alpha=0.12, linewidth=0)
    for ax, title in ((ax_a, "Stage A: training names"), (ax_b, "Stage B: new facts only (test names)")):
        ax.axhline(results.chance, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="epoch", ylabel="mean rank (0 = best)", title=title)
    ax_b.legend(ncols=2, fontsize=7)
    return fig


def plot_grafting(results: Results) -> Figure:
    """Mean ± s.d. ranks of Impl(F'), Impl(F) and F' for W_F', the graft and the control graft."""
    fig, (ax,) = plotting.figure(1, 1, width=5.0, height=3.0)
    labels = ("W_F'", "graft", "control")
    names = ("W_F'", "W_F' + D_{F,Impl} (graft)", "W_F' + D_Impl (control)")
    cols = ("Impl(F')", "Impl(F)", "F'")
    vals = np.array([[r.graft[k] for k in labels] for r in results.per_seed if r.graft])
    if vals.size == 0:
        ax.text(0.5, 0.5, "run_grafting=False", ha="center", transform=ax.transAxes)
        return fig
    width = 0.27
    for j, col in enumerate(cols):
        ax.bar(np.arange(3) + (j - 1) * width, vals[..., j].mean(0), width, yerr=vals[..., j].std(0), label=col)
    ax.axhline(results.chance, color="grey", lw=0.8, ls=":")
    ax.set_xticks(np.arange(3), names, fontsize=8)
    ax.set(ylabel="mean rank (0 = best)")
    ax.legend(title="evaluated on")
    return fig


def plot_seeds(results: Results) -> Figure:
    """OCR rank of every seed and order, with frozen and (if run) trainable name embeddings."""
    toy = "names frozen" if results.params.freeze_name_embeddings else "names trainable"
    panels = [("ocr", "pretrained LM" if results.on_lm else toy, ORDERS)]
    if any(r.trainable_ocr for r in results.per_seed):
        panels.append(("trainable_ocr", "names trainable (contrast)", CONTRAST_ORDERS))
    fig, axes = plotting.figure(len(panels), 1, width=3.4, height=2.8)
    for ax, (key, title, orders) in zip(axes, panels):
        for i, order in enumerate(orders):
            y = np.array([getattr(r, key)[order] for r in results.per_seed if order in getattr(r, key)])
            ax.scatter(np.full(len(y), i) + np.linspace(-0.15, 0.15, len(y)), y, color=f"C{i}", s=18)
            ax.hlines(y.mean(), i - 0.25, i + 0.25, color="k", lw=1.2)
        ax.axhline(results.chance, color="grey", lw=0.8, ls=":")
        ax.set_xticks(range(len(orders)), orders)
        ax.set(title=title, ylabel="OCR rank on test names", ylim=(-0.5, 2 * results.chance + 0.5))
    return fig


def plot_scores(results: Results) -> Figure:
    """Heatmaps of the three extractive scores over (token position) x (block, MLP or attention)."""
    fig, axes = plotting.figure(3, 1, width=2.6, height=2.6)
    if not results.per_seed[0].scores:
        axes[0].text(0.5, 0.5, "no scores (run_scores=False,\nor the paper preset)", ha="center",
                     transform=axes[0].transAxes)
        return fig
    p = results.params
    rows = [f"L{l} {kind}" for l in range(p.n_layer) for kind in ("attn", "mlp")]
    for ax, kind in zip(axes, SCORE_KINDS):
        s = np.mean([r.scores[kind] for r in results.per_seed], axis=0).reshape(3, p.n_layer, 1 + p.n_head)
        grid = np.stack([s[:, :, 1:].sum(-1), s[:, :, 0]], axis=-1).reshape(3, -1).T
        lim = np.abs(grid).max() or 1.0
        im = ax.imshow(grid, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(3), ["BOS", "name", "zong"])
        ax.set_yticks(range(len(rows)), rows)
        ax.set_title(kind)
        ax.grid(False)
        fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def layer_keep_table(results: Results) -> pd.DataFrame:
    """Mean (s.d.) ranks when the test-fact change is kept in one block only, next to keeping all of it."""
    rows = {"all blocks": [results.values(lambda r: r.test_fact["facts_first"]),
                           results.values(lambda r: r.ocr["facts_first"])]}
    for blk in results.per_seed[0].layer_keep:
        rows[f"{blk} only"] = [results.values(lambda r, b=blk, j=j: r.layer_keep[b][j]) for j in (0, 1)]
    return pd.DataFrame({k: [f"{v.mean():.2f} ({v.std():.2f})" for v in vals] for k, vals in rows.items()},
                        index=["fact rank dax(test)", "OCR rank zong(test)"]).T.rename_axis("weight change kept in")


def contrast_table(results: Results) -> pd.DataFrame | str:
    """OCR ranks with frozen and with trainable name embeddings on the same seeds: mean (s.d.)."""
    seeds = [(k, r) for k, r in zip(results.seeds, results.per_seed) if r.trainable_ocr]
    if not seeds:
        return "the trainable-name contrast did not run (contrast_seeds=0, or the paper preset)"
    rows = {}
    for label, key in (("names frozen", "ocr"), ("names trainable", "trainable_ocr")):
        vals = np.array([[getattr(r, key)[o] for o in CONTRAST_ORDERS] for _, r in seeds])
        vals = np.column_stack([vals, vals[:, 1] - vals[:, 0]])
        rows[label] = [f"{m:.2f} ({sd:.2f})" for m, sd in zip(vals.mean(0), vals.std(0))]
    cols = [f"OCR rank {o}" for o in CONTRAST_ORDERS] + ["gap impl_first - facts_first"]
    return pd.DataFrame.from_dict(rows, orient="index", columns=cols).rename_axis(
        f"seeds {', '.join(str(k) for k, _ in seeds)}")
