"""The experiment: every seed of the toy (or the paper preset), per-seed measures of every scorer, the
per-seed values of every claim and control, and the tables.

Four scorers rank the test answers: Self-REF's confidence (on the Self-REF model's answers), the base
model's MSP, MSP after plain SFT on the same data (on the SFT model's answers) and an operation-only
score (the base model's accuracy on S in the item's operation, on the Self-REF model's answers). A
finding about Self-REF is a difference; its controls are the same difference with MSP (SFT) or the
operation-only score in Self-REF's place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from companion import runtime
from companion.claims import AtPreset, evaluate_all
from companion.papers.self_ref import Params, qa_data, routing
from companion.papers.self_ref.pipeline import Condition, SeedOut, run_seed

# scorer key -> (curve label, score attribute, correctness attribute of the answers it ranks)
SCORERS = {"selfref": ("Self-REF", "conf", "ok_sr"), "msp": ("MSP (base)", "msp", "ok_base"),
           "sft": ("MSP (SFT)", "msp_sft", "ok_sft"), "oponly": ("op-only", "op_only", "ok_sr")}
# claim control name -> the scorer put in Self-REF's place
CONTROL_SCORER = {"msp-sft": "sft", "op-only": "oponly"}


@dataclass
class Results:
    """The per-seed test outputs, the names of the item groups (operations or datasets), what ran, wall time."""

    params: Params
    seeds: list[SeedOut]
    rates: np.ndarray
    source: str
    seconds: float
    op_names: tuple[str, ...] = qa_data.OPS


def run(params: Params) -> Results:
    """Every seed of the toy (or the paper preset's local LLM), then nothing else: metrics are derived."""
    if params.preset == "paper":
        from companion.papers.self_ref import paper_preset

        return paper_preset.run_paper(params)
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
def scorer(c: Condition, key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(score, correctness of the answers it ranks) of one scorer; None when it did not run."""
    _, score, ok = SCORERS[key]
    s, y = getattr(c, score), getattr(c, ok)
    return None if s is None or y is None else (s, y)


def curves(out: SeedOut, cond: str, rates: np.ndarray) -> dict[str, np.ndarray]:
    """Accuracy-vs-routing-rate curves of every scorer, random and oracle routing, for one seed and condition."""
    c, s = out.conditions[cond], out.strong_ok
    cur = {SCORERS[k][0]: routing.routed_accuracy(*sy, s, rates) for k in SCORERS if (sy := scorer(c, k))}
    return cur | {"random": routing.random_accuracy(c.ok_sr, s, rates),
                  "oracle": routing.oracle_accuracy(c.ok_sr, s, rates)}


def within_op_auroc(score: np.ndarray, ok: np.ndarray, op: np.ndarray) -> float:
    """AUROC within each operation, averaged over the operations where both classes occur."""
    vals = [routing.auroc(score[op == o], ok[op == o]) for o in np.unique(op)]
    vals = [v for v in vals if not np.isnan(v)]
    return float(np.mean(vals)) if vals else float("nan")


def seed_measures(out: SeedOut, cond: str, rates: np.ndarray, report_rate: float) -> dict[str, float]:
    """Every scalar the claims and the tables use, for one seed and condition (``<measure>_<scorer>``)."""
    c, strong = out.conditions[cond], out.strong_ok
    i = int(np.argmin(np.abs(rates - report_rate)))
    target = float(np.mean(strong)) - 0.01
    m: dict[str, float] = {}
    for k in SCORERS:
        sy = scorer(c, k)
        if sy is None:
            continue
        s, ok = sy
        acc, rnd = routing.routed_accuracy(s, ok, strong, rates), routing.random_accuracy(ok, strong, rates)
        m |= {f"auc_{k}": routing.auc(rates, acc), f"acc_at_r_{k}": float(acc[i]),
              f"rstar_{k}": routing.rate_to_match(rates, acc, target), f"auroc_{k}": routing.auroc(s, ok),
              f"within_op_auroc_{k}": within_op_auroc(s, ok, out.op), f"acc_{k}": float(ok.mean()),
              # random routing of this scorer's own answers: the line its routing gain is measured against
              f"auc_random_{k}": routing.auc(rates, rnd), f"rstar_random_{k}": routing.rate_to_match(rates, rnd, target)}
    m |= {"auc_oracle": routing.auc(rates, routing.oracle_accuracy(c.ok_sr, strong, rates)),
          "acc_strong": float(strong.mean()), "n_test": float(len(strong)),
          "ece_selfref": routing.ece(c.conf, c.ok_sr), "ece_msp": routing.ece(c.msp, c.ok_base),
          "unk_auroc_selfref": _unk_auroc(c.conf, c.ok_sr, c.conf_unans),
          "unk_auroc_msp": _unk_auroc(c.msp, c.ok_base, c.msp_unans),
          "conf_val_std": float(np.std(c.conf_val)), "un_share": c.un_share, "n_aug": c.n_aug,
          "msp_mean": float(c.msp.mean()), "msp_saturated": float(np.mean(c.msp > 0.99)),
          # the deployment rule: threshold = report_rate quantile of the validation scores
          "realised_rate": float(routing.threshold_mask(c.conf, c.conf_val, report_rate).mean())}
    if c.ok_unmasked is not None:
        m["acc_unmasked"] = float(c.ok_unmasked.mean())
        m["auroc_unmasked"] = routing.auroc(c.conf_unmasked, c.ok_unmasked)
    return m


def _unk_auroc(score: np.ndarray, ok: np.ndarray, unans: np.ndarray) -> float:
    """AUROC of accepting right answers (positives) against unanswerable queries (negatives)."""
    return routing.auroc(np.r_[score[ok], unans], np.r_[np.ones(int(ok.sum()), bool), np.zeros(len(unans), bool)])


def measures(results: Results, cond: str) -> pd.DataFrame:
    """One row per seed of :func:`seed_measures` (empty when the condition did not run)."""
    rows = [{"seed": o.seed, **seed_measures(o, cond, results.rates, results.params.report_rate)}
            for o in results.seeds if cond in o.conditions]
    return pd.DataFrame(rows).set_index("seed") if rows else pd.DataFrame()


def sharp_condition(results: Results) -> str:
    """The paper's regime: the sharpened base when sharpening ran, else the plain one."""
    return "sharp" if "sharp" in results.seeds[0].conditions else "plain"


# ---------------------------------------------------------------- claims
def claim_values(results: Results) -> AtPreset:
    """Per-seed values of every claim and control (``route-vs-msp-seed-share``: 1 where the seed gains at least
    one test item, else 0), named with the preset that measured them, so that each claim is judged against its
    bar at that preset."""
    sh, pl = measures(results, sharp_condition(results)), measures(results, "plain")
    out: dict[str, Any] = {}

    def put(cid: str, fn, frame: pd.DataFrame, controls: tuple[str, ...]) -> None:
        """``fn(frame, scorer)`` per seed for Self-REF, and for each control with its scorer in Self-REF's place."""
        out[cid] = fn(frame, "selfref").tolist()
        for ctrl in controls:
            out[f"{cid}@{ctrl}"] = fn(frame, CONTROL_SCORER[ctrl]).tolist()

    both = ("msp-sft", "op-only")
    put("route-vs-msp", lambda f, k: f[f"acc_at_r_{k}"] - f["acc_at_r_msp"], sh, both)
    put("route-auc-vs-msp", lambda f, k: f[f"auc_{k}"] - f["auc_msp"], sh, both)
    put("auroc-selfref", lambda f, k: f[f"auroc_{k}"], sh, both)
    put("auroc-vs-msp", lambda f, k: f[f"auroc_{k}"] - f["auroc_msp"], sh, both)
    put("within-op-auroc-vs-msp", lambda f, k: f[f"within_op_auroc_{k}"] - f["within_op_auroc_msp"], sh,
        ("msp-sft",))
    put("route-vs-sft", lambda f, k: f[f"acc_at_r_{k}"] - f["acc_at_r_sft"], sh, ("op-only",))
    put("route-auc-vs-sft", lambda f, k: f[f"auc_{k}"] - f["auc_sft"], sh, ("op-only",))
    put("auroc-vs-sft", lambda f, k: f[f"auroc_{k}"] - f["auroc_sft"], sh, ("op-only",))
    put("auroc-noninferior-plain", lambda f, k: f[f"auroc_{k}"] - f["auroc_msp"], pl, ("op-only",))
    put("route-auc-vs-random", lambda f, k: f[f"auc_{k}"] - f[f"auc_random_{k}"], sh, both)
    put("rstar-vs-random", lambda f, k: f[f"rstar_random_{k}"] - f[f"rstar_{k}"], sh, both)
    for key in [k for k in out if k.split("@")[0] == "route-vs-msp"]:
        cid, at, ctrl = key.partition("@")
        items = (np.asarray(out[key]) * sh["n_test"].to_numpy()).round()  # test items gained, per seed
        out[f"{cid}-seed-share{at}{ctrl}"] = (items >= 1).astype(float).tolist()
    out["answers-kept"] = (sh["acc_selfref"] - sh["acc_msp"]).tolist()
    return AtPreset(results.params.preset, out)


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON summary: means over seeds of the headline measures in both conditions."""
    out: dict[str, Any] = {"source": results.source, "seconds": round(results.seconds, 1)}
    for cond in ("sharp", "plain"):
        m = measures(results, cond)
        if len(m):
            out[cond] = {k: round(float(m[k].mean()), 4) for k in m.columns if k != "n_aug"}
    if results.params.strong_model == "trained":
        out["strong_final_loss"] = round(float(np.mean([o.strong_loss for o in results.seeds])), 4)
    return out


# ---------------------------------------------------------------- tables
def per_op_table(results: Results, cond: str | None = None) -> pd.DataFrame:
    """Per operation (FACT split into known and unknown; datasets in the paper preset): accuracy and mean
    scores, pooled over seeds."""
    cond = cond or sharp_condition(results)
    rows = []
    for o in results.seeds:
        c = o.conditions[cond]
        for op_i, op in enumerate(results.op_names):
            for known in (True, False):
                sel = (o.op == op_i) & (o.known == known)
                if not sel.any():
                    continue
                name = op if op != "FACT" else f"FACT ({'known' if known else 'unknown'})"
                rows.append({"item": name, "n": int(sel.sum()), "strong acc": o.strong_ok[sel].mean(),
                             "base acc": c.ok_base[sel].mean(), "MSP": c.msp[sel].mean(),
                             "Self-REF acc": c.ok_sr[sel].mean(), "Self-REF conf": c.conf[sel].mean(),
                             "op-only score": c.op_only[sel].mean()})
    df = pd.DataFrame(rows)
    agg = {k: "mean" for k in df.columns if k not in ("item", "n")} | {"n": "sum"}
    return df.groupby("item", sort=False).agg(agg)[list(df.columns[1:])].round(3)


SUMMARY_ROWS = {
    "acc_msp": "base accuracy", "acc_selfref": "Self-REF accuracy", "acc_sft": "SFT accuracy",
    "acc_strong": "strong accuracy", "auroc_selfref": "AUROC Self-REF", "auroc_msp": "AUROC MSP (base)",
    "auroc_sft": "AUROC MSP (SFT)", "auroc_oponly": "AUROC op-only",
    "within_op_auroc_selfref": "within-op AUROC Self-REF", "within_op_auroc_msp": "within-op AUROC MSP (base)",
    "within_op_auroc_sft": "within-op AUROC MSP (SFT)", "auc_selfref": "AUC-routing Self-REF",
    "auc_msp": "AUC-routing MSP (base)", "auc_sft": "AUC-routing MSP (SFT)", "auc_oponly": "AUC-routing op-only",
    "auc_random_selfref": "AUC-routing random (Self-REF answers)", "auc_oracle": "AUC-routing oracle",
    "acc_at_r_selfref": "accuracy at report_rate, Self-REF", "acc_at_r_msp": "accuracy at report_rate, MSP (base)",
    "acc_at_r_sft": "accuracy at report_rate, MSP (SFT)", "acc_at_r_oponly": "accuracy at report_rate, op-only",
    "rstar_selfref": "r* Self-REF", "rstar_msp": "r* MSP (base)", "rstar_sft": "r* MSP (SFT)",
    "rstar_random_selfref": "r* random", "ece_selfref": "ECE Self-REF", "ece_msp": "ECE MSP (base)",
    "unk_auroc_selfref": "UNK rejection AUROC Self-REF", "unk_auroc_msp": "UNK rejection AUROC MSP (base)",
    "msp_saturated": "share of MSP > 0.99", "un_share": "UN share of the Self-REF data",
    "conf_val_std": "s.d. of Self-REF score on V", "realised_rate": "test rate at the V threshold of report_rate",
    "acc_unmasked": "Self-REF accuracy, no masking", "auroc_unmasked": "AUROC Self-REF, no masking"}


def summary_table(results: Results) -> pd.DataFrame:
    """Means over seeds of the main measures, both conditions side by side."""
    data = {}
    for cond, label in (("sharp", "sharpened base"), ("plain", "no sharpening")):
        m = measures(results, cond)
        if len(m):
            data[label] = {v: float(m[k].mean()) for k, v in SUMMARY_ROWS.items() if k in m}
    return pd.DataFrame(data).round(3)


def glue_values(results: Results) -> dict[str, float | str]:
    """Numbers (and verdicts) the page's prose quotes: means over seeds, every claim's and control's value and
    verdict, the seed spread of the claims, per-op numbers and the CPU seconds of a seed by stage."""
    out: dict[str, float | str] = {}
    from companion.papers import self_ref

    for v in evaluate_all(self_ref.CLAIMS, claim_values(results)):
        key = v.id.replace("-", "_")
        out[f"claim_{key}_value"], out[f"claim_{key}_verdict"] = float(v.value), v.verdict
        if v.kind == "statistical" and len(v.per_seed) > 1:
            out[f"claim_{key}_sd"] = float(np.std(v.per_seed, ddof=1))
            out[f"claim_{key}_halfwidth"] = float((v.interval[1] - v.interval[0]) / 2)
        for c in v.controls:
            ckey = f"claim_{key}__{c.name.replace('-', '_')}"
            out[f"{ckey}_value"], out[f"{ckey}_verdict"] = float(c.value), c.verdict
    for cond in ("sharp", "plain"):
        m = measures(results, cond)
        for k in m.columns:
            out[f"{cond}_{k}"] = float(m[k].mean())
    # the seed whose Self-REF score is flattest on V (the collapse the spec warns about), and what it does
    sh = measures(results, sharp_condition(results))
    flat = sh["conf_val_std"].idxmin()
    out["sharp_conf_val_std_min"] = float(sh.loc[flat, "conf_val_std"])
    out["sharp_auroc_selfref_flattest"] = float(sh.loc[flat, "auroc_selfref"])
    for stage in ("base", "sharpen", "selfref", "sft"):  # CPU seconds of one seed, by stage
        out[f"cpu_{stage}"] = float(np.mean([o.seconds.get(stage, 0.0) for o in results.seeds]))
    out["cpu_seed"] = float(np.mean([sum(o.seconds.values()) for o in results.seeds]))
    out["n_seeds"] = float(len(results.seeds))
    out["n_test"] = float(len(results.seeds[0].op))
    for item, row in per_op_table(results).iterrows():
        key = str(item).replace(" (", "_").replace(")", "").lower()
        for col in ("base acc", "Self-REF acc", "Self-REF conf", "MSP", "op-only score"):
            out[f"op_{key}_{col.replace(' ', '_').replace('-', '').lower()}"] = float(row[col])
    return out
