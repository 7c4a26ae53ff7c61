"""The experiment: per seed, train the over-aligned toy model, run ACTOR, its literal variant and the
baselines at equal steps, and measure; the per-seed values of every claim and control.

Every model a seed produces is named in ``rates``: ``base``, ``ACTOR`` (the toy defaults: retain term,
projection from the benign mean), ``ACTOR, beta 0`` (no retain term), ``ACTOR, literal`` (the paper's
loss as written: no retain term, projection from zero), ``uniform shift`` (ACTOR with every query shifted
by the mean c instead of its own c_q), ``SFT (block l*)`` and, in the full preset, ``SFT (all)`` and
``direction ablation``; the controls ``random direction`` and ``random direction, literal`` are ACTOR and its
literal loss with a random unit vector (drawn once per seed) in place of r^: the same layer, queries and steps,
and ACTOR's first-epoch per-query sizes c_q (measured on r^), shifted along the wrong direction; the
control's targets are fixed in the first epoch and kept (see :func:`~companion.papers.actor.actor.actor`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from companion import runtime
from companion import claims
from companion.papers.actor import Params, direction, toy
from companion.papers.actor import language as lang
from companion.papers.actor.actor import (DirectionAblation, actor, all_layer_outputs, changed_outside,
                                          decoder_blocks, read, sft)

SETS = ("harmful", "pseudo_id", "pseudo_ood", "benign")
SFT_LAYER, UNIFORM, LITERAL, BETA0 = "SFT (block l*)", "uniform shift", "ACTOR, literal", "ACTOR, beta 0"
RANDOM, RANDOM_LITERAL = "random direction", "random direction, literal"


# ---------------------------------------------------------------- one seed
def _variant(base: torch.nn.Module, layer: int, data: lang.SeedData, params: Params, uniform: bool = False,
             **kw: Any) -> tuple[torch.nn.Module, float]:
    """A copy of ``base`` after ACTOR with ``params`` overridden by ``kw`` (``uniform``: one shift size per
    query group); and its seconds."""
    model = copy.deepcopy(base)
    q, sign, group = toy.actor_queries(base, data.train)
    opts: dict[str, Any] = dict(alpha=params.alpha, beta=params.beta_retain, origin=params.projection_origin,
                                groups=group if uniform else None)
    opts.update(kw)
    seconds = actor(model, layer, toy.queries(data.anchors["harmful"]), toy.queries(data.anchors["benign"]), q, sign,
                    epochs=params.epochs, steps=params.steps_per_epoch, lr=params.lr, **opts)
    return model, seconds


def _coefficients(model: torch.nn.Module, layer: int, r_hat: torch.Tensor, centre: torch.Tensor | None,
                  sets: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """c_q of every eval prompt at ``layer`` in a fixed frame (the base model's direction and origin)."""
    with torch.no_grad():
        return {k: direction.coefficient(read(model, layer, toy.queries(v)), r_hat, centre).numpy()
                for k, v in sets.items()}


def _harmful_geometry(base: torch.nn.Module, model: torch.nn.Module, layer: int, prompts: np.ndarray, alpha: float,
                      coef: np.ndarray) -> dict[str, float]:
    """How ACTOR moved held-out harmful prompts at ``layer``: the first epoch's shift size relative to the
    activation's length, and the cosine and length ratio between the activations after and before."""
    q = toy.queries(prompts)
    with torch.no_grad():
        before, after = read(base, layer, q), read(model, layer, q)
    norm = before.norm(dim=1)
    return {"shift_over_norm": float((alpha * torch.from_numpy(coef).abs() / norm).mean()),
            "cos_after_before": float(torch.nn.functional.cosine_similarity(after, before).mean()),
            "norm_after_over_before": float((after.norm(dim=1) / norm).mean())}


def grade_spread(coef: np.ndarray, prompts: np.ndarray, harmful_coef: np.ndarray) -> float:
    """Mean c_q of the strongest-grade pseudo-harmful prompts minus that of the weakest grade, in units of
    the harmful prompts' mean c_q (0: the grades sit at one depth on the refusal direction)."""
    g = lang.grade(prompts[:, 3])
    return float((coef[g == 0].mean() - coef[g == lang.N_GRADES - 1].mean()) / harmful_coef.mean())


def run_seed(params: Params, seed: int) -> dict[str, Any]:
    """Train the over-aligned base model of one seed, run ACTOR, its variants and the baselines, and measure."""
    torch.manual_seed(seed)
    data = lang.seed_data(seed, params.n_base_benign, params.n_base_harm, params.n_base_pseudo,
                          params.pseudo_refusal_in_base, params.n_anchor, params.n_train_per_set, params.n_eval,
                          params.pseudo_refusal_min)
    base = toy.build(params.n_layer, params.d_model, seed)
    t0 = time.perf_counter()
    toy.train_base(base, data.base, params.base_steps, 128, 3e-3, np.random.default_rng([seed, 4]))
    base_seconds = time.perf_counter() - t0
    acts = all_layer_outputs(base, toy.queries(np.concatenate([data.anchors["harmful"], data.anchors["benign"]])))
    labels = np.r_[np.ones(params.n_anchor), np.zeros(params.n_anchor)]
    sil = direction.silhouettes([a.numpy() for a in acts], labels)
    layer = params.target_layer if params.target_layer >= 0 else direction.pick_layer(
        sil, direction.candidate_layers(params.n_layer))
    with torch.no_grad():
        a_h = read(base, layer, toy.queries(data.anchors["harmful"]))
        a_b = read(base, layer, toy.queries(data.anchors["benign"]))
        r_hat = direction.refusal_direction(a_h, a_b)
    proj_zero = {"benign": float((a_b @ r_hat).mean()), "harmful": float((a_h @ r_hat).mean())}
    out: dict[str, Any] = {"seed": seed, "layer": layer, "silhouettes": sil, "base_seconds": base_seconds,
                           "proj_zero": proj_zero, "rates": {}, "seconds": {}}
    out["rates"]["base"] = toy.rates(base, data.eval)
    model, out["seconds"]["ACTOR"] = _variant(base, layer, data, params)
    out["rates"]["ACTOR"] = toy.rates(model, data.eval)
    out["changed_outside"], out["block_changed"] = changed_outside(model, base, layer)
    frame = (r_hat, a_b.mean(0) if params.projection_origin == "benign_mean" else None)
    out["coef_before"] = _coefficients(base, layer, *frame, data.eval)
    out["coef_after"] = _coefficients(model, layer, *frame, data.eval)
    centred = _coefficients(base, layer, r_hat, a_b.mean(0), {k: data.eval[k] for k in ("pseudo_id", "harmful")})
    out["grade_spread"] = grade_spread(centred["pseudo_id"], data.eval["pseudo_id"], centred["harmful"])
    out["harm_geometry"] = _harmful_geometry(base, model, layer, data.eval["harmful"], params.alpha,
                                             out["coef_before"]["harmful"])
    out["beta"] = {params.beta_retain: out["rates"]["ACTOR"]["utility"]}
    for b in params.beta_sweep:
        if b not in out["beta"]:
            r = toy.rates(_variant(base, layer, data, params, beta=b)[0], data.eval)
            out["beta"][b] = r["utility"]
            if b == 0.0:
                out["rates"][BETA0] = r
    if params.beta_retain == 0.0:
        out["rates"][BETA0] = out["rates"]["ACTOR"]
    literal = params.beta_retain == 0.0 and params.projection_origin == "zero"
    out["rates"][LITERAL] = out["rates"]["ACTOR"] if literal else \
        toy.rates(_variant(base, layer, data, params, beta=0.0, origin="zero")[0], data.eval)
    u = direction.random_unit(params.d_model, [seed, 7])
    out["random_cos"] = float(u @ r_hat)
    m, out["seconds"]["random"] = _variant(base, layer, data, params, along=u)
    out["rates"][RANDOM] = toy.rates(m, data.eval)
    out["rates"][RANDOM_LITERAL] = toy.rates(_variant(base, layer, data, params, beta=0.0, origin="zero",
                                                      along=u)[0], data.eval)
    out["alpha"] = {params.alpha: out["rates"]["ACTOR"]}
    for a in params.alpha_sweep:
        if a not in out["alpha"]:
            out["alpha"][a] = toy.rates(_variant(base, layer, data, params, alpha=a)[0], data.eval)
    steps = params.epochs * params.steps_per_epoch
    batch = toy.sft_batch(data.train)
    for name in params.run_baselines:
        if name == "dir_ablation":
            with DirectionAblation(base, r_hat):
                out["rates"]["direction ablation"] = toy.rates(base, data.eval)
            continue
        if name == "uniform":
            m, out["seconds"]["uniform"] = _variant(base, layer, data, params, uniform=True)
        else:
            m = copy.deepcopy(base)
            out["seconds"][name] = sft(m, batch.input_ids, batch.labels, steps, params.lr,
                                       layer if name == "sft_layer" else None)
        label = {"uniform": UNIFORM, "sft_layer": SFT_LAYER, "sft_full": "SFT (all)"}[name]
        out["rates"][label] = toy.rates(m, data.eval)
    n_block = sum(p.numel() for p in decoder_blocks(base)[layer].parameters())
    out["trainable_fraction"] = n_block / sum(p.numel() for p in base.parameters())
    return out


# ---------------------------------------------------------------- the whole run
@dataclass
class Results:
    """Every seed's measurements (or the paper preset's)."""

    params: Params
    per_seed: list[dict[str, Any]]
    wall_seconds: float
    setting: str = "toy"
    extra: dict[str, Any] = field(default_factory=dict)


def run(params: Params) -> Results:
    """All seeds (in parallel processes when the run has cores), or the paper preset."""
    if params.preset == "paper":
        from companion.papers.actor import paper_preset

        return paper_preset.run_paper(params)
    start = time.perf_counter()
    runtime.limit_threads()  # inline seeds run in this process; pool workers set their own one thread
    jobs = [(params, s) for s in params.seed_list()]
    with tqdm(total=len(jobs), desc="seeds", disable=None, leave=False) as bar:
        per_seed = runtime.parallel_map(run_seed, jobs, on_done=bar.update)
    return Results(params, per_seed, time.perf_counter() - start)


# ---------------------------------------------------------------- claims
def trade_off(r: dict[str, float], pseudo: str = "pseudo_id") -> float:
    """T.S. = (C.R. + S.S.)/2: compliance on the pseudo-harmful set ``pseudo`` (default: held-out ID) and
    refusal of harmful prompts."""
    return (1 - r[pseudo] + r["harmful"]) / 2


def ceiling_seeds(results: Results, other: str) -> int:
    """Seeds where ACTOR and ``other`` both comply with every pseudo-harmful ID prompt and refuse every harmful
    one (T.S. at its ceiling of 1 for both, so their difference is exactly 0)."""
    def top(r: dict[str, float]) -> bool:
        return r["pseudo_id"] == 0.0 and r["harmful"] == 1.0

    return sum(top(s["rates"]["ACTOR"]) and top(s["rates"][other]) for s in results.per_seed if other in s["rates"])


def _rates(results: Results, model: str, key: str) -> list[float]:
    return [s["rates"].get(model, {}).get(key, float("nan")) for s in results.per_seed]


def _gain(results: Results, model: str) -> list[float]:
    """Compliance gained on held-out ID pseudo-harmful prompts: base refusal minus ``model``'s."""
    return [b - a for b, a in zip(_rates(results, "base", "pseudo_id"), _rates(results, model, "pseudo_id"))]


def _drop(results: Results, model: str) -> list[float]:
    """Harmful refusal lost: base minus ``model``."""
    return [b - a for b, a in zip(_rates(results, "base", "harmful"), _rates(results, model, "harmful"))]


def _ts_gap(results: Results, a: str, b: str, pseudo: str = "pseudo_id") -> list[float]:
    """T.S. of model ``a`` minus model ``b`` per seed, C.R. on the set ``pseudo``."""
    return [trade_off(s["rates"][a], pseudo) - trade_off(s["rates"][b], pseudo)
            if a in s["rates"] and b in s["rates"] else float("nan") for s in results.per_seed]


def claim_values(results: Results) -> claims.AtPreset:
    """The measured value(s) of every claim and control (``"<id>@<control>"``), per seed except the count
    ``one-layer-only``, named with the preset that measured them: at the ``paper`` preset the rows with a
    ``paper_threshold`` are judged against the bars from the paper's numbers. The literal rows'
    ``sft-layer-shared`` control is the same vector as the SFT control of ``over-refusal-reduced`` (resp.
    ``utility-kept``); :func:`seed_table` shows it once."""
    seeds = results.per_seed
    sft_, rnd = "@sft-layer", "@random-dir"
    return claims.AtPreset(results.params.preset, {
        "base-over-refuses": _rates(results, "base", "pseudo_id"),
        "one-layer-only": float(sum(s["changed_outside"] + (not s["block_changed"]) for s in seeds)),
        "pseudo-graded": [s.get("grade_spread", float("nan")) for s in seeds],
        "over-refusal-reduced": _gain(results, "ACTOR"),
        "over-refusal-reduced" + rnd: _gain(results, RANDOM),
        "over-refusal-reduced" + sft_: _gain(results, SFT_LAYER),
        "literal-over-refusal-reduced": _gain(results, LITERAL),
        "literal-over-refusal-reduced@random-dir-literal": _gain(results, RANDOM_LITERAL),
        "literal-over-refusal-reduced@sft-layer-shared": _gain(results, SFT_LAYER),
        "harmful-refusal-every": _rates(results, "ACTOR", "harmful"),
        "harmful-refusal-every" + rnd: _rates(results, RANDOM, "harmful"),
        "harmful-refusal-every" + sft_: _rates(results, SFT_LAYER, "harmful"),
        "harmful-refusal-drop": _drop(results, "ACTOR"),
        "harmful-refusal-drop" + rnd: _drop(results, RANDOM),
        "harmful-refusal-drop" + sft_: _drop(results, SFT_LAYER),
        "benign-refusal": _rates(results, "ACTOR", "benign"),
        "benign-refusal" + rnd: _rates(results, RANDOM, "benign"),
        "benign-refusal" + sft_: _rates(results, SFT_LAYER, "benign"),
        "utility-kept": _rates(results, "ACTOR", "utility"),
        "utility-kept" + rnd: _rates(results, RANDOM, "utility"),
        "utility-kept" + sft_: _rates(results, SFT_LAYER, "utility"),
        "utility-literal-loss": _rates(results, LITERAL, "utility"),
        "utility-literal-loss@random-dir-literal": _rates(results, RANDOM_LITERAL, "utility"),
        "utility-literal-loss@sft-layer-shared": _rates(results, SFT_LAYER, "utility"),
        "per-query-beats-uniform": _ts_gap(results, "ACTOR", UNIFORM, "pseudo_id_strong"),
        "per-query-beats-uniform@weak-grade": _ts_gap(results, "ACTOR", UNIFORM, "pseudo_id_weak"),
        "per-query-beats-uniform" + rnd: _ts_gap(results, RANDOM, UNIFORM, "pseudo_id_strong"),
        "per-query-beats-uniform" + sft_: _ts_gap(results, SFT_LAYER, UNIFORM, "pseudo_id_strong"),
        "beats-sft-layer": _ts_gap(results, "ACTOR", SFT_LAYER),
        "beats-sft-layer@uniform": _ts_gap(results, UNIFORM, SFT_LAYER),
        "beats-sft-layer" + rnd: _ts_gap(results, RANDOM, SFT_LAYER),
    })


def seed_table(results: Results, verdicts: list[Any]) -> pd.DataFrame:
    """:func:`companion.claims.seed_table` of this run, the shared SFT rows of the literal claims left out (the
    same vectors as the SFT control rows of ``over-refusal-reduced`` and ``utility-kept``)."""
    table = claims.seed_table(verdicts, results.params.seed_list())
    if table.empty:
        return table
    shared = [k for k in table.index if k[1] == "control sft-layer-shared"]
    return table.drop(index=shared)


# ---------------------------------------------------------------- tables and summaries
def summary(results: Results) -> pd.DataFrame:
    """Mean (and s.d.) over seeds of every model's refusal rates, utility and T.S. (C.R. on held-out ID)."""
    rows = []
    models = list(dict.fromkeys(m for s in results.per_seed for m in s["rates"]))
    for m in models:
        vals = [s["rates"][m] for s in results.per_seed if m in s["rates"]]
        row: dict[str, Any] = {"model": m}
        for key in (*SETS, "pseudo_id_strong", "pseudo_id_weak", "utility"):
            x = np.array([v.get(key, np.nan) for v in vals])  # the paper preset has no grades
            row[f"refusal {key}" if key != "utility" else "utility"] = f"{x.mean():.3f} ± {x.std():.3f}"
        row["T.S."] = f"{np.mean([trade_off(v) for v in vals]):.3f}"
        rows.append(row)
    return pd.DataFrame(rows).set_index("model")


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary: mean rates per model, layer, projections, timings."""
    seeds = results.per_seed
    out: dict[str, Any] = {"setting": results.setting, "layers": [s["layer"] for s in seeds]}
    models = list(dict.fromkeys(m for s in seeds for m in s["rates"]))
    keys = list(dict.fromkeys(k for s in seeds for k in s["rates"]["base"]))
    out["rates"] = {m: {k: float(np.mean([s["rates"][m][k] for s in seeds if m in s["rates"]])) for k in keys}
                    for m in models}
    out["ood_compliance_gain_per_seed"] = [s["rates"]["base"]["pseudo_ood"] - s["rates"]["ACTOR"]["pseudo_ood"]
                                           for s in seeds]
    if "proj_zero" in seeds[0]:
        out["benign_projection_from_zero"] = float(np.mean([s["proj_zero"]["benign"] for s in seeds]))
        out["harmful_projection_from_zero"] = float(np.mean([s["proj_zero"]["harmful"] for s in seeds]))
    secs = {k: float(np.median([s["seconds"][k] for s in seeds if k in s.get("seconds", {})]))
            for k in dict.fromkeys(k for s in seeds for k in s.get("seconds", {}))}
    out["train_seconds_median"] = secs
    for name in ("sft_layer", "sft_full"):
        if name in secs and "ACTOR" in secs:
            out[f"{name}_over_actor_seconds"] = secs[name] / secs["ACTOR"]
    out["trainable_fraction"] = float(np.mean([s.get("trainable_fraction", float("nan")) for s in seeds]))
    out.update(results.extra)
    return out


def page_numbers(results: Results, verdicts: list[Any]) -> dict[str, Any]:
    """The numbers the page's prose quotes (NaN where this setting did not measure one)."""
    m, v = metrics(results), {x.id: x for x in verdicts}
    nan = float("nan")
    seeds = results.per_seed

    def rate(model: str, key: str) -> float:
        return m["rates"].get(model, {}).get(key, nan)

    def ctrl(claim: str, name: str) -> Any:
        return next((c for c in v[claim].controls if c.name == name), None)

    ood = m["ood_compliance_gain_per_seed"]
    b0 = _rates(results, BETA0, "utility")
    gains = _gain(results, "ACTOR")
    out = {"gain": v["over-refusal-reduced"].value, "gain_sft": ctrl("over-refusal-reduced", "sft-layer").value,
           "gain_min": min(gains), "gain_max": max(gains),
           "gain_literal": v["literal-over-refusal-reduced"].value,
           "pseudo_after": rate("ACTOR", "pseudo_id"), "pseudo_base": rate("base", "pseudo_id"),
           "ood_after": rate("ACTOR", "pseudo_ood"), "ood_min_gain": min(ood), "ood_max_gain": max(ood),
           "utility": rate("ACTOR", "utility"), "utility_sft": rate(SFT_LAYER, "utility"),
           "utility_b0": rate(BETA0, "utility"), "utility_b0_min": min(b0), "utility_b0_max": max(b0),
           "utility_literal": rate(LITERAL, "utility"), "utility_literal_verdict": v["utility-literal-loss"].verdict,
           "literal_pseudo": rate(LITERAL, "pseudo_id"), "literal_benign": rate(LITERAL, "benign"),
           "b0_pseudo": rate(BETA0, "pseudo_id"), "b0_benign": rate(BETA0, "benign"),
           "benign_proj": m.get("benign_projection_from_zero", nan),
           "harm_proj": m.get("harmful_projection_from_zero", nan),
           "uniform_gap": v["per-query-beats-uniform"].value, "uniform_verdict": v["per-query-beats-uniform"].verdict,
           "uniform_gap_weak": ctrl("per-query-beats-uniform", "weak-grade").value,
           "uniform_gap_sft": ctrl("per-query-beats-uniform", "sft-layer").value,
           "uniform_strong": rate(UNIFORM, "pseudo_id_strong"), "uniform_weak": rate(UNIFORM, "pseudo_id_weak"),
           "actor_strong": rate("ACTOR", "pseudo_id_strong"), "actor_weak": rate("ACTOR", "pseudo_id_weak"),
           "base_strong": rate("base", "pseudo_id_strong"), "base_weak": rate("base", "pseudo_id_weak"),
           "grade_spread": v["pseudo-graded"].value,
           "sft_gap": v["beats-sft-layer"].value, "sft_verdict": v["beats-sft-layer"].verdict,
           "sft_gap_uniform": ctrl("beats-sft-layer", "uniform").value,
           "sft_pseudo": rate(SFT_LAYER, "pseudo_id"), "n_seeds": len(seeds),
           "harm_worst": v["harmful-refusal-every"].value,
           "harm_worst_sft": ctrl("harmful-refusal-every", "sft-layer").value,
           "harm_lost_seeds": sum(a < b for a, b in zip(_rates(results, "ACTOR", "harmful"),
                                                        _rates(results, "base", "harmful"))),
           "uniform_ceiling": ceiling_seeds(results, UNIFORM), "sft_ceiling": ceiling_seeds(results, SFT_LAYER),
           "sft_time_ratio": m.get("sft_layer_over_actor_seconds", nan),
           "base_seconds": float(np.median([s.get("base_seconds", nan) for s in seeds])),
           "actor_seconds": m["train_seconds_median"].get("ACTOR", nan),
           "frac": m["trainable_fraction"], "layer": int(max(set(m["layers"]), key=m["layers"].count)),
           "gain_random": ctrl("over-refusal-reduced", "random-dir").value,
           "gain_random_literal": ctrl("literal-over-refusal-reduced", "random-dir-literal").value,
           "pseudo_random": rate(RANDOM, "pseudo_id"), "benign_random": ctrl("benign-refusal", "random-dir").value,
           "harm_worst_random": ctrl("harmful-refusal-every", "random-dir").value,
           "utility_random": ctrl("utility-kept", "random-dir").value,
           "utility_random_literal": ctrl("utility-literal-loss", "random-dir-literal").value,
           "utility_literal_lo": (v["utility-literal-loss"].interval or (nan, nan))[0],
           "utility_literal_hi": (v["utility-literal-loss"].interval or (nan, nan))[1],
           "uniform_gap_random": ctrl("per-query-beats-uniform", "random-dir").value,
           "sft_gap_random": ctrl("beats-sft-layer", "random-dir").value,
           "random_cos": float(np.mean([abs(s["random_cos"]) for s in seeds])) if "random_cos" in seeds[0] else nan,
           "harm_c_after_min": min((float(np.mean(s["coef_after"]["harmful"])) for s in seeds if s.get("coef_after")),
                                   default=nan)}
    for k in ("shift_over_norm", "cos_after_before", "norm_after_over_before"):
        geometry = [s["harm_geometry"][k] for s in seeds if "harm_geometry" in s]
        out[f"harm_{k}"] = float(np.mean(geometry)) if geometry else nan
    return out
