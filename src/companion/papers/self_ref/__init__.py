"""Learning to Route LLMs with Confidence Tokens (Chuang, Sarma, Gopalan, Boccio, Bolouki, Hu, Zhou; ICML 2025).

arXiv: https://arxiv.org/abs/2410.13284 -- PMLR 267:10859-10878. No official code was found.

Reproduced at small scale: Self-REF adds two confidence tokens ``<CN>``/``<UN>`` to a language model's
vocabulary and fine-tunes it on its *own* answers, each followed by ``<CN>`` when the answer was right
and ``<UN>`` when it was wrong (Algorithm 1), with the wrong answers' tokens masked out of the loss. The
confidence ``sigmoid(z_CN - z_UN)`` after the answer then routes queries to a stronger model or rejects
them. We compare it with the base model's token probability (MSP) and with MSP after plain SFT on the
same data, on a synthetic single-token QA mixture (learnable, hard and memorised operations with
knowledge gaps) with a tiny ``GPT2LMHeadModel``, with and without a "sharpening" step that makes the
base model overconfident, and report routing, rejection and calibration.

Written by hand, because no library implements it and no official code exists: the QA mixture
(:mod:`.qa_data`), Algorithm 1, the label masking and the score (:mod:`.confidence`), the training and
scoring loop (:mod:`.lm`, :mod:`.pipeline`), the routing and rejection metrics (:mod:`.routing`). The
``paper`` preset (:mod:`.paper_llm`) fine-tunes a local instruct LLM with LoRA (``peft``) on local
JSONL copies of the paper's datasets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from tqdm import tqdm

from companion import plotting, runtime
from companion.claims import Claim, Verdict, evaluate_all, worst
from companion.params import BaseParams, ParamError, local_default, param, require_path
from companion.papers.self_ref import qa_data, routing
from companion.papers.self_ref.pipeline import SeedOut, run_seed

SLUG = "self-ref"
RATES = tuple(round(0.05 * i, 2) for i in range(21))


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the small-scale Self-REF reproduction (defaults: the quick preset)."""

    seeds: int = param(10, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    ops: tuple[str, ...] = param(qa_data.OPS, choices=qa_data.OPS, help="operations of the QA mixture")
    fact_seen_frac: float = param(0.5, lo=0.0, hi=1.0, help="share of FACT triples that appear in pre-training")
    n_layer: int = param(2, lo=1, hi=6, help="layers of the small GPT-2")
    n_embd: int = param(64, lo=32, hi=256, help="width of the small GPT-2 (4 heads)")
    base_steps: int = param(600, lo=100, hi=100_000, help="pre-training steps of the base model on P")
    sharpen_steps: int = param(100, lo=0, hi=100_000, help="steps on the base model's own answers (0 disables)")
    selfref_steps: int = param(300, lo=50, hi=100_000, help="Self-REF (and plain SFT) fine-tuning steps")
    strong_steps: int = param(1500, lo=100, hi=100_000, help="training steps of the trained strong model")
    lr_strong: float = param(1e-3, lo=1e-5, hi=1e-2, help="peak Adam step size of the trained strong model "
                             "(100 warm-up steps, then cosine decay)")
    strong_batch: int = param(128, lo=16, hi=1024, help="minibatch size of the trained strong model")
    batch_size: int = param(64, lo=16, hi=1024, help="minibatch size of every training stage")
    lr_base: float = param(5e-3, lo=1e-5, hi=1e-2, help="Adam step size of pre-training and sharpening")
    lr_ft: float = param(3e-3, lo=1e-5, hi=1e-2, help="Adam step size of Self-REF and SFT fine-tuning")
    un_ratio: float = param(0.5, lo=0.1, hi=0.9, help="target share of UN examples after subsampling")
    mask_wrong_answers: bool = param(True, help="mask the loss on the answers of UN examples")
    mask_ablation: bool = param(False, help="also train Self-REF without masking (sharpened base)")
    use_lora: bool = param(False, help="LoRA adapters via peft (paper preset; the toy trains all weights)")
    strong_model: str = param("simulated", choices=("simulated", "trained"),
                              help="simulated: right with probability strong_acc; trained: 4-layer 128-d GPT-2")
    strong_acc: float = param(0.95, lo=0.5, hi=1.0, help="accuracy of the simulated strong model")
    routing_rates: tuple[float, ...] = param(RATES, lo=0.0, hi=1.0, min_len=3, help="routing rates of the curves")
    report_rate: float = param(0.3, lo=0.0, hi=1.0, help="routing rate of the headline comparison")
    model_path: str = param(local_default(SLUG, "llm"), help="paper preset: local instruct LLM folder "
                            "(Hugging Face format)")
    data_path: str = param(local_default(SLUG, "data"), help="paper preset: folder of <dataset>.jsonl files "
                           "(prompt, answer, split[, strong_correct])")
    smoke: bool = param(False, help="paper preset on a tiny budget (a few examples and steps, < 2 min CPU)")
    lora_rank: int = param(16, lo=1, hi=256, help="paper preset: LoRA rank")

    PRESETS = {
        "full": {"seeds": 6, "base_steps": 1500, "sharpen_steps": 200, "selfref_steps": 400,
                 "mask_ablation": True, "strong_model": "trained"},
        "paper": {"seeds": 1, "use_lora": True, "lr_ft": 1e-4, "selfref_steps": 300, "batch_size": 16},
    }

    def __post_init__(self) -> None:
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a local instruct LLM saved with save_pretrained "
                         "(config.json, weights, tokenizer)", "dir")
            require_path("data_path", self.data_path, "<dataset>.jsonl files with prompt, answer and split "
                         "fields", "dir")
            return
        if self.use_lora:
            raise ParamError("parameter 'use_lora': True; allowed: False outside the paper preset "
                             "(the toy fine-tunes every weight)")
        if not any(abs(r - self.report_rate) < 1e-9 for r in self.routing_rates):
            raise ParamError(f"parameter 'report_rate': {self.report_rate}; allowed: one of routing_rates "
                             f"({', '.join(map(str, self.routing_rates))})")
        if min(self.routing_rates) > 0 or max(self.routing_rates) < 1 or list(self.routing_rates) != sorted(
                set(self.routing_rates)):
            raise ParamError(f"parameter 'routing_rates': {self.routing_rates}; allowed: increasing, "
                             "distinct, from 0 to 1")
        if self.n_embd % 4:
            raise ParamError(f"parameter 'n_embd': {self.n_embd}; allowed: a multiple of 4 (4 heads)")


@dataclass
class Results:
    """The per-seed test outputs, what ran, and the wall time."""

    params: Params
    seeds: list[SeedOut]
    rates: np.ndarray
    source: str
    seconds: float


def run(params: Params) -> Results:
    """Every seed of the toy (or the paper preset's local LLM), then nothing else: metrics are derived."""
    if params.preset == "paper":
        from companion.papers.self_ref import paper_llm

        return paper_llm.run_paper(params)
    runtime.limit_threads()
    start = time.perf_counter()
    p = params.to_dict()
    bar = tqdm(total=params.seeds, desc="seeds", disable=None, leave=False)
    outs = runtime.parallel_map(run_seed, [(p, s) for s in params.seed_list()], on_done=lambda: bar.update())
    bar.close()
    source = (f"tiny GPT-2 ({params.n_layer} layers, {params.n_embd}-d) on the synthetic QA mixture; strong "
              f"model {params.strong_model}")
    return Results(params, outs, np.asarray(params.routing_rates), source, time.perf_counter() - start)


# ---------------------------------------------------------------- per-seed measures
def curves(out: SeedOut, cond: str, rates: np.ndarray) -> dict[str, np.ndarray]:
    """Accuracy-vs-routing-rate curves of every method for one seed and condition."""
    c = out.conditions[cond]
    s = out.strong_ok
    cur = {"Self-REF": routing.routed_accuracy(c.conf, c.ok_sr, s, rates),
           "MSP (base)": routing.routed_accuracy(c.msp, c.ok_base, s, rates)}
    if c.ok_sft is not None:
        cur["MSP (SFT)"] = routing.routed_accuracy(c.msp_sft, c.ok_sft, s, rates)
    return cur | {"random": routing.random_accuracy(c.ok_sr, s, rates),
                  "oracle": routing.oracle_accuracy(c.ok_sr, s, rates)}


def seed_measures(out: SeedOut, cond: str, rates: np.ndarray, report_rate: float) -> dict[str, float]:
    """Every scalar the claims and the tables use, for one seed and condition."""
    c = out.conditions[cond]
    cur = curves(out, cond, rates)
    i = int(np.argmin(np.abs(rates - report_rate)))
    target = float(np.mean(out.strong_ok)) - 0.01
    m = {f"auc_{k}": routing.auc(rates, v) for k, v in cur.items()}
    m |= {f"acc_at_r_{k}": float(v[i]) for k, v in cur.items()}
    m |= {"rstar_selfref": routing.rate_to_match(rates, cur["Self-REF"], target),
          "rstar_random": routing.rate_to_match(rates, cur["random"], target),
          "rstar_msp": routing.rate_to_match(rates, cur["MSP (base)"], target),
          "auroc_selfref": routing.auroc(c.conf, c.ok_sr), "auroc_msp": routing.auroc(c.msp, c.ok_base),
          "acc_base": float(c.ok_base.mean()), "acc_selfref": float(c.ok_sr.mean()),
          "acc_strong": float(out.strong_ok.mean()),
          "ece_selfref": routing.ece(c.conf, c.ok_sr), "ece_msp": routing.ece(c.msp, c.ok_base),
          "unk_auroc_selfref": routing.auroc(np.r_[c.conf[c.ok_sr], c.conf_unans],
                                             np.r_[np.ones(c.ok_sr.sum(), bool), np.zeros(len(c.conf_unans), bool)]),
          "unk_auroc_msp": routing.auroc(np.r_[c.msp[c.ok_base], c.msp_unans],
                                         np.r_[np.ones(c.ok_base.sum(), bool), np.zeros(len(c.msp_unans), bool)]),
          "conf_val_std": float(np.std(c.conf_val)), "un_share": c.un_share, "n_aug": c.n_aug,
          "msp_mean": float(c.msp.mean()), "msp_saturated": float(np.mean(c.msp > 0.99))}
    # the deployment rule: threshold = report_rate quantile of the validation scores
    m["realised_rate"] = float(routing.threshold_mask(c.conf, c.conf_val, report_rate).mean())
    # op-aware check: AUROC within each operation, averaged over the ops where both classes occur
    within = [(routing.auroc(c.conf[out.op == o], c.ok_sr[out.op == o]),
               routing.auroc(c.msp[out.op == o], c.ok_base[out.op == o])) for o in np.unique(out.op)]
    within = [w for w in within if not np.isnan(w[0]) and not np.isnan(w[1])]
    m["within_op_auroc_selfref"] = float(np.mean([w[0] for w in within])) if within else float("nan")
    m["within_op_auroc_msp"] = float(np.mean([w[1] for w in within])) if within else float("nan")
    if c.ok_sft is not None:
        m["auroc_sft"], m["acc_sft"] = routing.auroc(c.msp_sft, c.ok_sft), float(c.ok_sft.mean())
    if c.ok_unmasked is not None:
        m["acc_unmasked"] = float(c.ok_unmasked.mean())
        m["auroc_unmasked"] = routing.auroc(c.conf_unmasked, c.ok_unmasked)
    return m


def measures(results: Results, cond: str) -> pd.DataFrame:
    """One row per seed of :func:`seed_measures` (empty when the condition did not run)."""
    rows = [{"seed": o.seed, **seed_measures(o, cond, results.rates, results.params.report_rate)}
            for o in results.seeds if cond in o.conditions]
    return pd.DataFrame(rows).set_index("seed") if rows else pd.DataFrame()


def sharp_condition(results: Results) -> str:
    """The paper's regime: the sharpened base when sharpening ran, else the plain one."""
    return "sharp" if "sharp" in results.seeds[0].conditions else "plain"


# ---------------------------------------------------------------- claims
CLAIMS = [
    Claim("route-vs-msp", "At routing rate 0.3, Self-REF routing is >= 2 pp more accurate than routing by the "
          "base model's token probability (sharpened base)", "RQ1, Fig. 2: best accuracy vs routing rate on "
          "all four datasets (numbers not retrieved)", 0.02),
    Claim("route-auc-vs-msp", "AUC-routing of Self-REF exceeds that of MSP (sharpened base)",
          "RQ1, Fig. 2 (numbers not retrieved)", 0.0),
    Claim("auroc-selfref", "Self-REF's score separates its right answers from its wrong ones: AUROC >= 0.70",
          "RQ2/RQ3 (numbers not retrieved)", 0.70),
    Claim("auroc-vs-msp", "Self-REF's AUROC exceeds MSP's by >= 0.05 (sharpened base)",
          "RQ2: confidence tokens more reliable than token probabilities (numbers not retrieved)", 0.05),
    Claim("auroc-noninferior-plain", "Without sharpening, Self-REF's AUROC is at least MSP's - 0.03",
          "spec's non-inferiority check (no paper number)", -0.03),
    Claim("route-auc-vs-random", "AUC-routing of Self-REF exceeds random routing's by >= 0.02",
          "Fig. 2 random-routing baseline (numbers not retrieved)", 0.02),
    Claim("rstar-vs-random", "Self-REF reaches the strong model's accuracy - 1 pp at a lower routing rate than "
          "random routing (difference >= one 0.05 grid step)", "Fig. 2 (numbers not retrieved)", 0.05),
    Claim("answers-kept", "Self-REF fine-tuning does not cost answer accuracy: acc(Self-REF) - acc(base) >= -2 pp",
          "Self-REF keeps the model's answers (no number)", -0.02),
    Claim("route-vs-msp-every-seed", "route-vs-msp's gain is positive in every seed", "-", 0.0, kind="exact"),
]


def claim_values(results: Results) -> dict[str, Any]:
    """Per-seed values of every claim (exact rows: one worst-seed value)."""
    sh, pl = measures(results, sharp_condition(results)), measures(results, "plain")
    gain = sh["acc_at_r_Self-REF"] - sh["acc_at_r_MSP (base)"]
    return {"route-vs-msp": gain.tolist(),
            "route-auc-vs-msp": (sh["auc_Self-REF"] - sh["auc_MSP (base)"]).tolist(),
            "auroc-selfref": sh["auroc_selfref"].tolist(),
            "auroc-vs-msp": (sh["auroc_selfref"] - sh["auroc_msp"]).tolist(),
            "auroc-noninferior-plain": (pl["auroc_selfref"] - pl["auroc_msp"]).tolist(),
            "route-auc-vs-random": (sh["auc_Self-REF"] - sh["auc_random"]).tolist(),
            "rstar-vs-random": (sh["rstar_random"] - sh["rstar_selfref"]).tolist(),
            "answers-kept": (sh["acc_selfref"] - sh["acc_base"]).tolist(),
            "route-vs-msp-every-seed": worst(gain, ">=")}


def check(results: Results) -> list[Verdict]:
    """Every claim of :data:`CLAIMS` evaluated on the run."""
    return evaluate_all(CLAIMS, claim_values(results))


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON summary: means over seeds of the headline measures in both conditions."""
    out: dict[str, Any] = {"source": results.source, "seconds": round(results.seconds, 1)}
    keys = ("acc_base", "acc_selfref", "acc_sft", "acc_strong", "auroc_selfref", "auroc_msp", "auroc_sft",
            "auc_Self-REF", "auc_MSP (base)", "auc_MSP (SFT)", "auc_random", "auc_oracle", "rstar_selfref",
            "rstar_random", "ece_selfref", "ece_msp", "unk_auroc_selfref", "unk_auroc_msp", "msp_saturated",
            "within_op_auroc_selfref", "within_op_auroc_msp", "un_share", "realised_rate", "acc_unmasked")
    for cond in ("sharp", "plain"):
        m = measures(results, cond)
        if len(m):
            out[cond] = {k: round(float(m[k].mean()), 4) for k in keys if k in m}
    if results.params.strong_model == "trained":
        out["strong_final_loss"] = round(float(np.mean([o.strong_loss for o in results.seeds])), 4)
    return out


# ---------------------------------------------------------------- tables
def per_op_table(results: Results, cond: str | None = None) -> pd.DataFrame:
    """Per operation (FACT split into known and unknown): accuracy and mean scores, pooled over seeds."""
    cond = cond or sharp_condition(results)
    rows = []
    for o in results.seeds:
        c = o.conditions[cond]
        for op_i, op in enumerate(qa_data.OPS):
            for known in (True, False):
                sel = (o.op == op_i) & (o.known == known)
                if not sel.any():
                    continue
                name = op if op != "FACT" else f"FACT ({'known' if known else 'unknown'})"
                rows.append({"item": name, "n": int(sel.sum()), "strong acc": o.strong_ok[sel].mean(),
                             "base acc": c.ok_base[sel].mean(),
                             "MSP": c.msp[sel].mean(), "Self-REF acc": c.ok_sr[sel].mean(),
                             "Self-REF conf": c.conf[sel].mean()})
    df = pd.DataFrame(rows)
    return df.groupby("item", sort=False).agg({"n": "sum", "strong acc": "mean", "base acc": "mean", "MSP": "mean",
                                               "Self-REF acc": "mean", "Self-REF conf": "mean"}).round(3)


def summary_table(results: Results) -> pd.DataFrame:
    """Means over seeds of the main measures, both conditions side by side."""
    cols = {"acc_base": "base accuracy", "acc_selfref": "Self-REF accuracy", "acc_sft": "SFT accuracy",
            "acc_strong": "strong accuracy", "auroc_selfref": "AUROC Self-REF", "auroc_msp": "AUROC MSP (base)",
            "auroc_sft": "AUROC MSP (SFT)", "within_op_auroc_selfref": "within-op AUROC Self-REF",
            "within_op_auroc_msp": "within-op AUROC MSP", "auc_Self-REF": "AUC-routing Self-REF",
            "auc_MSP (base)": "AUC-routing MSP", "auc_MSP (SFT)": "AUC-routing MSP (SFT)",
            "auc_random": "AUC-routing random", "auc_oracle": "AUC-routing oracle",
            "rstar_selfref": "r* Self-REF", "rstar_msp": "r* MSP", "rstar_random": "r* random",
            "ece_selfref": "ECE Self-REF", "ece_msp": "ECE MSP", "unk_auroc_selfref": "UNK rejection AUROC Self-REF",
            "unk_auroc_msp": "UNK rejection AUROC MSP", "msp_saturated": "share of MSP > 0.99",
            "un_share": "UN share of the Self-REF data", "conf_val_std": "s.d. of Self-REF score on V",
            "realised_rate": "test rate at the V threshold of report_rate",
            "acc_unmasked": "Self-REF accuracy, no masking", "auroc_unmasked": "AUROC Self-REF, no masking"}
    data = {}
    for cond, label in (("sharp", "sharpened base"), ("plain", "no sharpening")):
        m = measures(results, cond)
        if len(m):
            data[label] = {v: float(m[k].mean()) for k, v in cols.items() if k in m}
    return pd.DataFrame(data).round(3)


def glue_values(results: Results) -> dict[str, float]:
    """Numbers the page's prose quotes."""
    out = {}
    for cond in ("sharp", "plain"):
        m = measures(results, cond)
        for k in m.columns:
            out[f"{cond}_{k}".replace(" ", "_").replace("(", "").replace(")", "").replace("-", "_")] = float(m[k].mean())
    for v in check(results):  # each row's value; a statistical row's interval width and why (the seeds' spread)
        key = v.id.replace("-", "_")
        out[f"claim_{key}_value"] = float(v.value)
        if v.kind == "statistical" and len(v.per_seed) > 1:
            out[f"claim_{key}_sd"] = float(np.std(v.per_seed, ddof=1))
            out[f"claim_{key}_halfwidth"] = float((v.interval[1] - v.interval[0]) / 2)
    # the seed whose Self-REF score is flattest on V (the collapse the spec warns about), and what it does
    sh = measures(results, sharp_condition(results))
    flat = sh["conf_val_std"].idxmin()
    out["sharp_conf_val_std_min"] = float(sh.loc[flat, "conf_val_std"])
    out["sharp_auroc_selfref_flattest"] = float(sh.loc[flat, "auroc_selfref"])
    for stage in ("base", "sharpen", "selfref", "sft"):  # CPU seconds of one seed, by stage
        out[f"cpu_{stage}"] = float(np.mean([o.seconds.get(stage, 0.0) for o in results.seeds]))
    out["n_seeds"] = float(len(results.seeds))
    tab = per_op_table(results)
    for item, row in tab.iterrows():
        key = str(item).replace(" (", "_").replace(")", "").lower()
        out[f"op_{key}_base_acc"] = float(row["base acc"])
        out[f"op_{key}_conf"] = float(row["Self-REF conf"])
    return out


# ---------------------------------------------------------------- figures
COLORS = {"Self-REF": "C0", "MSP (base)": "C1", "MSP (SFT)": "C2", "random": "0.5", "oracle": "k"}


def plot_routing(results: Results) -> Figure:
    """Accuracy vs routing rate (mean over seeds): sharpened base and no sharpening."""
    conds = [c for c in ("sharp", "plain") if c in results.seeds[0].conditions]
    fig, axes = plotting.figure(len(conds), 1, width=5.0, height=3.6)
    for ax, cond in zip(axes, conds):
        cur = [curves(o, cond, results.rates) for o in results.seeds]
        for name in (n for n in COLORS if n in cur[0]):
            ax.plot(results.rates, np.mean([c[name] for c in cur], 0), label=name, color=COLORS[name],
                    ls="--" if name in ("random", "oracle") else "-")
        ax.axhline(np.mean([o.conditions[cond].ok_sr.mean() for o in results.seeds]), color="C0", lw=0.8, ls=":")
        ax.axhline(np.mean([o.strong_ok.mean() for o in results.seeds]), color="C3", lw=0.8, ls=":",
                   label="strong model")
        ax.set(xlabel="routing rate", ylabel="system accuracy",
               title="sharpened base" if cond == "sharp" else "no sharpening")
    axes[0].legend(fontsize=8)
    return fig


def plot_histograms(results: Results) -> Figure:
    """Self-REF confidence and MSP, split by right and wrong answers (sharpened base, pooled seeds)."""
    cond = sharp_condition(results)
    fig, axes = plotting.figure(2, 1, width=4.5, height=3.2)
    pairs = [("Self-REF", "conf", "ok_sr"), ("MSP (base)", "msp", "ok_base")]
    bins = np.linspace(0, 1, 21)
    for ax, (name, score, ok) in zip(axes, pairs):
        s = np.concatenate([getattr(o.conditions[cond], score) for o in results.seeds])
        y = np.concatenate([getattr(o.conditions[cond], ok) for o in results.seeds])
        ax.hist(s[y], bins, alpha=0.6, label="right", color="C2")
        ax.hist(s[~y], bins, alpha=0.6, label="wrong", color="C3")
        ax.set(title=name, xlabel="score", ylabel="test answers")
    axes[0].legend()
    return fig


def plot_reliability(results: Results) -> Figure:
    """Reliability diagrams (15 equal-mass bins, pooled seeds) with ECE, sharpened base."""
    cond = sharp_condition(results)
    fig, (ax,) = plotting.figure(1, 1, width=4.2, height=3.8)
    for name, score, ok, color in (("Self-REF", "conf", "ok_sr", "C0"), ("MSP (base)", "msp", "ok_base", "C1")):
        s = np.concatenate([getattr(o.conditions[cond], score) for o in results.seeds])
        y = np.concatenate([getattr(o.conditions[cond], ok) for o in results.seeds])
        x, acc = routing.reliability(s, y)
        ax.plot(x, acc, "o-", color=color, label=f"{name} (ECE {routing.ece(s, y):.3f})")
    ax.plot([0, 1], [0, 1], color="0.6", ls="--", lw=0.8)
    ax.set(xlabel="mean score in bin", ylabel="accuracy in bin", xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8)
    return fig


def plot_per_op(results: Results) -> Figure:
    """Per-op accuracy and mean confidence (bars), and the ROC of rejecting unanswerable (UNK) queries."""
    tab = per_op_table(results)
    fig, axes = plotting.figure(2, 1, width=5.0, height=3.4)
    x = np.arange(len(tab))
    w = 0.2
    for j, col in enumerate(("base acc", "MSP", "Self-REF acc", "Self-REF conf")):
        axes[0].bar(x + (j - 1.5) * w, tab[col], w, label=col)
    axes[0].set_xticks(x, tab.index, rotation=20, fontsize=8)
    axes[0].set(ylim=(0, 1.05), title="per operation (sharpened base)")
    axes[0].legend(fontsize=7)
    cond = sharp_condition(results)
    for name, score, unans, ok, color in (("Self-REF", "conf", "conf_unans", "ok_sr", "C0"),
                                         ("MSP (base)", "msp", "msp_unans", "ok_base", "C1")):
        pos = np.concatenate([getattr(o.conditions[cond], score)[getattr(o.conditions[cond], ok)] for o in results.seeds])
        neg = np.concatenate([getattr(o.conditions[cond], unans) for o in results.seeds])
        thr = np.unique(np.r_[pos, neg, np.inf])[::-1]
        tpr = [(pos >= t).mean() for t in thr]
        fpr = [(neg >= t).mean() for t in thr]
        s = np.r_[pos, neg]
        a = routing.auroc(s, np.r_[np.ones(len(pos), bool), np.zeros(len(neg), bool)])
        axes[1].plot(fpr, tpr, color=color, label=f"{name} (AUROC {a:.2f})")
    axes[1].plot([0, 1], [0, 1], color="0.6", ls="--", lw=0.8)
    axes[1].set(xlabel="unanswerable accepted", ylabel="right answers accepted", title="rejecting UNK queries")
    axes[1].legend(fontsize=8)
    return fig
