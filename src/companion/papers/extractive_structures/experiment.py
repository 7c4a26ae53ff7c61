"""The toy experiment: pretraining, the Stage-A orders, the test finetune, grafting, layer keeping and
the extractive scores, per seed; the claims' per-seed values and the page's tables."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from tqdm import tqdm
from transformers import GPT2Config, GPT2LMHeadModel

from companion import runtime
from companion.papers.extractive_structures import CONTRAST_ORDERS, LOG_EVERY_A, ORDERS, Params, pretrained_dax
from companion.papers.extractive_structures.fact_world import BOS, World, candidates, dax, make_world, zong
from companion.models import causal_lm
from companion.papers.extractive_structures import gpt2_attribution as attrib
from companion.papers.extractive_structures.weight_deltas import Delta, delta_since, snapshot, with_deltas

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
        if log is not None and ((epoch + 1) % log_every == 0 or epoch + 1 == epochs):  # the phase's end too
            history.append(log())
    return history


def logged_epochs(epochs: int, n_phases: int) -> np.ndarray:
    """The Stage-A epochs (counted from its start) at which :func:`train` logs with ``LOG_EVERY_A``: every
    ``LOG_EVERY_A``-th epoch of each phase and each phase's last epoch."""
    one = [e for e in range(1, epochs + 1) if e % LOG_EVERY_A == 0 or e == epochs]
    return np.concatenate([np.array(one) + k * epochs for k in range(n_phases)])


# ---------------------------------------------------------------- one seed

@dataclass
class SeedResult:
    """Everything measured for one seed."""

    ocr: dict[str, float] = field(default_factory=dict)  # zong(B) rank after the test finetune
    test_fact: dict[str, float] = field(default_factory=dict)  # dax(B) rank after the test finetune
    leak: dict[str, float] = field(default_factory=dict)  # zong(B) rank before the test finetune
    impl_memorised: float = float("nan")  # zong(A) rank of impl-first right after its implication phase
    impl_after_phase1: float = float("nan")  # zong(A) rank of impl-first right after its implication phase
    stage_a_end: dict[str, list[float]] = field(default_factory=dict)  # order -> [dax(A), zong(A)] at Stage A end
    traj_a: dict[str, np.ndarray] = field(default_factory=dict)  # (epochs, 2): dax(A), zong(A)
    traj_b: dict[str, np.ndarray] = field(default_factory=dict)  # (epochs+1, 2): dax(B), zong(B)
    graft: dict[str, list[float]] = field(default_factory=dict)  # weights -> [Impl(F'), Impl(F), F']
    layer_keep: dict[str, list[float]] = field(default_factory=dict)  # kept block -> [dax(B), zong(B)]
    scores: dict[str, np.ndarray] = field(default_factory=dict)  # kind -> (T, n_components)
    trainable_ocr: dict[str, float] = field(default_factory=dict)  # OCR ranks with trainable names


def _phases(order: str, world: World, replay: Tensor) -> list[Tensor]:
    """The Stage-A phases of one order, each with the pretraining replay appended."""
    facts, impls = dax(world, world.train), zong(world, world.train)
    plan = {"facts_first": [facts, impls], "impl_first": [impls, facts],
            # forgetting-matched facts-first (the control of the ordering gap): the same order, then the facts of
            # fresh names that have no implications, so Stage A ends on a new-fact phase as implications-first does
            "facts_first_refreshed": [facts, impls, dax(world, world.fresh)],
            # retention-matched (a reported diagnostic): the implications are replayed during the fact phase, so
            # Stage A ends with zong(train) known; that phase is joint's, so it cannot separate retention from joint
            "impl_first_retained": [impls, torch.cat([facts, impls])],
            "joint": [torch.cat([facts, impls])]}
    return [torch.cat([p, replay]) for p in plan[order]]


def run_seed(params: Params, seed: int) -> SeedResult:
    """Pretraining, the five orders with the test finetune, grafting and scores for one seed."""
    rng, gen = runtime.generators(seed)
    world = make_world(params.n_pre_names, params.n_train_names, params.n_test_names * params.test_slices,
                       params.n_cities, rng, n_fresh=params.n_train_names)
    model = build_model(world, params.n_layer, params.d_model, params.n_head, gen)
    train(model, dax(world, world.pre), params.epochs_pre, params.lr, params.batch_size, rng)
    names = torch.as_tensor(world.name_tok(np.arange(world.n_names)))
    frozen = names if params.freeze_name_embeddings else None
    replay = dax(world, rng.choice(world.pre, size=params.replay_size, replace=False))
    res = SeedResult()
    trace = seed - params.seed < params.trace_seeds  # per-epoch ranks for the figure on these seeds only
    deltas, (theta, new) = _orders(res, model, world, replay, frozen, params, rng, trace, ORDERS)
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
            if order == "impl_first" and k == 0:  # the spec's precondition: implications memorised
                res.impl_after_phase1 = res.impl_memorised = mean_rank(m, world, zong_a)
        res.stage_a_end[order] = list(mean_ranks(m, world, dax_a, zong_a))  # when Stage B starts
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
        from companion.papers.extractive_structures.paper_preset import run_pretrained
        return run_pretrained(params)
    runtime.limit_threads(1)  # tiny matmuls: processes over seeds use the cores better than threads
    seeds = params.seed_list()
    with tqdm(total=len(seeds), desc="seeds", disable=None, leave=False) as bar:
        per_seed = runtime.parallel_map(run_seed, [(params, s) for s in seeds], on_done=bar.update)
    if params.model_path:
        from companion.papers.extractive_structures.paper_preset import pretrained_ocr
        return Results(params, seeds, per_seed, pretrained_ocr(params))
    return Results(params, seeds, per_seed)


def claim_values(results: Results) -> dict[str, list[float]]:
    """The measured value of every claim and control (``"<id>@<control>"``) on every seed."""
    v, c = results.values, results.chance
    ocr = lambda o: v(lambda r: r.ocr.get(o, float("nan")))  # noqa: E731
    graft = {k: v(lambda r, k=k: r.graft[k][0] if r.graft else float("nan")) for k in ("W_F'", "graft", "control")}
    end = lambda o: v(lambda r: r.stage_a_end.get(o, [np.nan, np.nan])[1])  # noqa: E731  zong(train), Stage A end
    out = {
        "ordering-gap": ocr("impl_first") - ocr("facts_first"),
        "ordering-gap@facts-first-refreshed": ocr("facts_first_refreshed") - ocr("facts_first"),
        "facts-first-ocr": ocr("facts_first"),
        "facts-first-ocr@impl-first": ocr("impl_first"),
        "graft-margin": graft["control"] - graft["graft"],
        "graft-margin@impl-only-graft": graft["W_F'"] - graft["control"],
        "graft-ocr": graft["graft"],
        "graft-ocr@impl-only-graft": graft["control"],
        "impl-first-chance": ocr("impl_first"),
        "no-graft-chance": graft["W_F'"],
        "test-facts-learned": v(lambda r: max(r.test_fact.values())),
        "no-leakage": v(lambda r: max(abs(x - c) for x in r.leak.values())),
        "impl-memorised": v(lambda r: r.impl_after_phase1),
        "retention-matched": end("impl_first_retained"),
        "refresh-forgets": end("facts_first_refreshed") - end("impl_first"),
    }
    return {k: [float(x) for x in vals] for k, vals in out.items()}


def metrics(results: Results) -> dict:
    """Small JSON-able summary: means over seeds (and the smallest ordering gap)."""
    per = claim_values(results)
    out = {f"ocr_{o}": float(np.mean([r.ocr[o] for r in results.per_seed if o in r.ocr])) for o in ORDERS}
    out["gap_min"] = float(np.min(per["ordering-gap"]))
    out.update({f"claim_{k.replace('@', '_at_')}": float(np.mean(x)) for k, x in per.items()})
    for o in ORDERS:
        ends = [r.stage_a_end[o][1] for r in results.per_seed if o in r.stage_a_end]
        if ends:
            out[f"stage_a_end_impl_{o}"] = float(np.mean(ends))
    contrast = [r for r in results.per_seed if r.trainable_ocr]
    out.update({f"trainable_ocr_{o}": float(np.mean([r.trainable_ocr[o] for r in contrast]))
                for o in CONTRAST_ORDERS if contrast})
    for blk in results.per_seed[0].layer_keep:
        out[f"keep_{blk.replace(' ', '')}_ocr"] = float(results.values(lambda r, b=blk: r.layer_keep[b][1]).mean())
    if results.pretrained is not None:
        for hop, row in results.pretrained.iterrows():
            out.update({f"lm_{hop.replace(' ', '_')}_{k.replace(' ', '_')}": float(v) for k, v in row.items()})
    return out


def layer_keep_table(results: Results) -> pd.DataFrame:
    """Mean (s.d.) ranks when the test-fact change is kept in one block only, next to keeping all of it."""
    rows = {"all blocks": [results.values(lambda r: r.test_fact["facts_first"]),
                           results.values(lambda r: r.ocr["facts_first"])]}
    for blk in results.per_seed[0].layer_keep:
        rows[f"{blk} only"] = [results.values(lambda r, b=blk, j=j: r.layer_keep[b][j]) for j in (0, 1)]
    return pd.DataFrame({k: [f"{v.mean():.2f} ({v.std():.2f})" for v in vals] for k, vals in rows.items()},
                        index=["fact rank dax(test)", "OCR rank zong(test)"]).T.rename_axis("weight change kept in")


def contrast_table(results: Results) -> pd.DataFrame | str:
    """OCR ranks per seed with frozen and with trainable name embeddings (same seeds, model and data), and the
    mean over those seeds."""
    seeds = [(k, r) for k, r in zip(results.seeds, results.per_seed) if r.trainable_ocr]
    if not seeds:
        return "the trainable-name contrast did not run (contrast_seeds=0, or the paper preset)"
    rows = {}
    for k, r in seeds:
        row = {}
        for label, got in (("names frozen", r.ocr), ("names trainable", r.trainable_ocr)):
            row.update({(label, o): got[o] for o in CONTRAST_ORDERS})
            row[(label, "gap")] = got["impl_first"] - got["facts_first"]
        rows[str(k)] = row
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.loc["mean"] = df.mean()
    df.columns = pd.MultiIndex.from_tuples(df.columns)
    return df.round(2).rename_axis("seed")


def page_numbers(results: Results, verdicts) -> dict:
    """The numbers the page's prose glues in (one key each)."""
    per = {k: np.asarray(x, dtype=float) for k, x in claim_values(results).items()}
    end = lambda o: results.values(lambda r: r.stage_a_end.get(o, [np.nan, np.nan])[1])  # noqa: E731
    out = {"n_seeds": len(results.seeds), "seed0": results.seeds[0], "chance": results.chance}
    for short, o in (("ff", "facts_first"), ("if", "impl_first"), ("ffr", "facts_first_refreshed"),
                     ("ifr", "impl_first_retained"), ("joint", "joint")):
        out[f"ocr_{short}"] = float(np.nanmean(results.values(lambda r, o=o: r.ocr.get(o, np.nan))))
        out[f"end_{short}"] = float(np.nanmean(end(o)))
    out["after_phase1"] = float(np.nanmean(results.values(lambda r: r.impl_after_phase1)))
    ocr = lambda o: results.values(lambda r: r.ocr.get(o, np.nan))  # noqa: E731
    per["gap_deconf"] = ocr("impl_first") - ocr("facts_first_refreshed")  # both end Stage A on a fact phase
    per["gap_ret"] = ocr("impl_first_retained") - ocr("facts_first")
    per["gap_joint"] = ocr("joint") - ocr("facts_first")
    per["end_gap"] = end("facts_first_refreshed") - end("impl_first")
    for key, name in (("gap", "ordering-gap"), ("gap_ffr", "ordering-gap@facts-first-refreshed"),
                      ("gap_deconf", "gap_deconf"), ("gap_joint", "gap_joint"), ("end_gap", "end_gap"),
                      ("gap_ret", "gap_ret"), ("graft_margin", "graft-margin"),
                      ("graft_margin_ctrl", "graft-margin@impl-only-graft"), ("graft", "graft-ocr"),
                      ("graft_ctrl", "graft-ocr@impl-only-graft"), ("no_graft", "no-graft-chance")):
        out[key], out[f"{key}_min"], out[f"{key}_max"] = (float(np.nanmean(per[name])), float(np.nanmin(per[name])),
                                                          float(np.nanmax(per[name])))
    out["gap_ret_pos"] = int(np.sum(per["gap_ret"] > 0))
    out["gap_ffr_pass"] = int(np.sum(per["ordering-gap@facts-first-refreshed"] >= 3.0))
    out["gap_pass"] = int(np.sum(per["ordering-gap"] >= 3.0))
    nan2 = (float("nan"), float("nan"))
    for v in verdicts:
        key = "v_" + v.id.replace("-", "_")
        out[key] = v.verdict
        out[f"{key}_lo"], out[f"{key}_hi"] = (float(x) for x in (v.interval or nan2))
        if v.role == "finding":
            out[f"{key}_disc"] = "discriminates" if v.discriminates else "does not discriminate"
        for c in v.controls:
            ck = f"{key}_at_{c.name.replace('-', '_')}"
            out[ck], out[f"{ck}_val"] = c.verdict, float(c.value)
            out[f"{ck}_lo"], out[f"{ck}_hi"] = (float(x) for x in (c.interval or nan2))
    contrast = [r for r in results.per_seed if r.trainable_ocr]
    out["n_contrast"] = len(contrast)
    if contrast:
        frozen = np.array([r.ocr["impl_first"] - r.ocr["facts_first"] for r in contrast])
        free = np.array([r.trainable_ocr["impl_first"] - r.trainable_ocr["facts_first"] for r in contrast])
        out.update(tr_gap=float(free.mean()), tr_gap_min=float(free.min()), tr_gap_max=float(free.max()),
                   fr_gap=float(frozen.mean()), tr_gap_pass=int(np.sum(free >= 3.0)),
                   tr_ff_worse=int(sum(r.trainable_ocr["facts_first"] > r.ocr["facts_first"] for r in contrast)),
                   tr_ff=float(np.mean([r.trainable_ocr["facts_first"] for r in contrast])),
                   fr_ff=float(np.mean([r.ocr["facts_first"] for r in contrast])))
    else:
        out.update({k: float("nan") for k in ("tr_gap", "tr_gap_min", "tr_gap_max", "fr_gap", "tr_ff", "fr_ff")})
        out.update(tr_gap_pass=0, tr_ff_worse=0)
    return out


def stage_a_table(results: Results) -> pd.DataFrame | str:
    """Per seed: the implication rank zong(train) at the end of Stage A (when Stage B starts) and the OCR rank
    zong(test) after Stage B, for every order; implications-first's zong(train) rank right after its
    implication phase."""
    rows = {}
    for k, r in zip(results.seeds, results.per_seed):
        if not r.stage_a_end:
            return "Stage-A end ranks are not logged in this run"
        row = {}
        for o in ORDERS:
            if o == "impl_first":
                row[(o, "impl rank after its impl phase")] = r.impl_after_phase1
            if o in r.stage_a_end:
                row[(o, "impl rank end of Stage A")] = r.stage_a_end[o][1]
                row[(o, "OCR rank")] = r.ocr[o]
        rows[k] = row
    df = pd.DataFrame.from_dict(rows, orient="index").round(2)
    df.columns = pd.MultiIndex.from_tuples(df.columns)
    return df.rename_axis("seed")
