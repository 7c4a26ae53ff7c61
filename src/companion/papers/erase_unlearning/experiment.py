"""The experiment of the small-scale ERASE reproduction: data, one seed, the scaling sweep, the
exact-in-distribution test, the holistic cost, and the values every claim is judged on."""

from __future__ import annotations

import copy
import math
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy import stats
from tqdm import tqdm

from companion import runtime
from companion.papers.erase_unlearning import Params, cost, embed, icl, intents, sisa
from companion.papers.erase_unlearning import qkmeans as qk
from companion.papers.erase_unlearning.erase import Deletion, Erase, PerClassErase, RandomK, projection, select


def qk_config(params: Params, n0: int, k: int | None = None) -> qk.Config:
    """Q-k-means settings for a pool of ``n0`` points and ``k`` clusters (default k_shots); the momentum
    threshold ``m = gamma n0 / k`` is fixed at construction."""
    k = k or params.k_shots
    return qk.Config(k, params.iters_T, params.eps, params.gamma_momentum * n0 / k)


# ---------------------------------------------------------------- data
@dataclass
class Task:
    """One classification task: unit embeddings, integer labels, texts (when any) and label names."""

    name: str
    E_train: np.ndarray
    y_train: np.ndarray
    E_test: np.ndarray
    y_test: np.ndarray
    texts_train: list[str] = field(default_factory=list)
    texts_test: list[str] = field(default_factory=list)
    label_names: list[str] = field(default_factory=list)

    @property
    def n_classes(self) -> int:
        """Number of classes."""
        return len(self.label_names)


def synthetic_tasks(params: Params) -> tuple[list[Task], str]:
    """One task per seed from the chosen dataset, embedded by MiniLM or a fallback; and what ran."""
    tasks: list[Task] = []
    use = params.dataset
    path = embed.minilm_path() if use == "intents" else None
    if use == "intents" and path is None:
        use = "digits"
    source = {"intents": embed.MINILM + " on the template intent corpus",
              "digits": "fallback: scikit-learn digits (pixels / 16, L2-normalised)"
              + (" -- MiniLM or sentence-transformers missing" if params.dataset == "intents" else ""),
              "gmm": "fallback: synthetic Gaussian mixture, 6 classes x 3 modes in 64-d"}[use]
    corpora = []
    for s in params.seed_list():
        rng = np.random.default_rng([s, 1])
        if use == "intents":
            tr = intents.make_split(params.n_train, rng, params.label_noise)
            te = intents.make_split(params.n_test, rng)
            corpora.append((s, tr, te))
        elif use == "digits":
            Xtr, ytr, Xte, yte = embed.digits(params.n_train, params.n_test, rng)
            tasks.append(Task(f"seed {s}", Xtr, ytr, Xte, yte, label_names=[str(c) for c in range(10)]))
        else:
            Xtr, ytr = embed.gaussian_mixture(params.n_train, rng)
            Xte, yte = embed.gaussian_mixture(params.n_test, rng)
            tasks.append(Task(f"seed {s}", Xtr, ytr, Xte, yte, label_names=[str(c) for c in range(6)]))
    if corpora:
        model = embed.load_encoder(path)
        texts = [t for _, tr, te in corpora for t in tr.texts + te.texts]
        E = embed.encode(model, texts)
        at = 0
        for s, tr, te in corpora:
            a, b = at + len(tr.texts), at + len(tr.texts) + len(te.texts)
            tasks.append(Task(f"seed {s}", E[at:a], tr.labels, E[a:b], te.labels, tr.texts, te.texts,
                              list(intents.INTENTS)))
            at = b
    return tasks, source


# ---------------------------------------------------------------- one seed
@dataclass
class SeedResult:
    """Everything measured on one seed of one task."""

    seed: int
    task: str
    acc: dict[str, float]  # ERASE, random-k (mean of random_prompts), single random-k, per-class ERASE, FT, SISA
    acc_k: dict[str, list[float]]
    coverage: float
    deletions: dict[str, list[Deletion]]
    always_flops: list[float]  # the control: each request answered by a recluster (no certificate)
    sisa_flops: list[float]
    sisa_seconds: list[float]
    ft_flops: float
    ft_seconds: list[float]
    coupled_certified: tuple[int, int]  # (equal to the coupled retrain, checked)
    replay_recluster: tuple[int, int]  # (equal to the replayed refit and consistent, checked)
    sisa_exact: bool
    consistent_after: bool
    erase_fit_flops: float
    demo_tokens: float
    query_tokens: float


Learner = Callable[[np.ndarray], float]  # demonstration ids -> test accuracy


def attention_learner(task: Task, tau: float) -> Learner:
    """Test accuracy of the attention read-out prompted with the given training ids."""
    def acc(demo_ids: np.ndarray) -> float:
        pred = icl.attention_predict(task.E_test, task.E_train[demo_ids], task.y_train[demo_ids],
                                     task.n_classes, tau)
        return float(np.mean(pred == task.y_test))
    return acc


def always_flops(n: Any, k: int, d: int, iters: int, seed_share: Any) -> Any:
    """The recluster-always control: ERASE's own recluster on every request, without the certificate --
    T Lloyd steps from the kept seeds and the selection, plus the k-means++ race pass for the share of
    requests that delete a seed (1 or 0 for a known request; k / n for a uniform one)."""
    return (qk.flops_lloyd(n, k, d, iters) + qk.flops_distances(n, k, d) + n * k
            + seed_share * qk.flops_kmeanspp(n, k, d))


def tokens(text: str) -> float:
    """Rough LLM token count of a short English text: 4/3 tokens per word."""
    return 4.0 / 3.0 * len(text.split())


def run_seed(params: Params, task: Task, seed: int, learner: Learner) -> SeedResult:
    """Fit ERASE, random-k, per-class ERASE, SISA and the fine-tuned head; unlearn a stream of requests."""
    n, D = task.E_train.shape
    ids = np.arange(n)
    Z_all = task.E_train @ projection(D, params.proj_dim, seed)
    cfg = qk_config(params, n)
    head = sisa.HeadConfig(128, task.n_classes, params.ft_epochs)
    models = {"ERASE": Erase(Z_all, ids, cfg, np.random.default_rng([seed, 5])),
              "random-k": RandomK(ids, params.k_shots, np.random.default_rng([seed, 6])),
              "per-class ERASE": PerClassErase(Z_all, ids, task.y_train, cfg, np.random.default_rng([seed, 7]))}

    def random_mean(k: int) -> float:
        """Mean test accuracy over ``random_prompts`` independent random-k prompts (the k_shots model first)."""
        first = [models["random-k"]] if k == params.k_shots else []
        more = [RandomK(ids, k, np.random.default_rng([seed, 3, k, j]))
                for j in range(params.random_prompts - len(first))]
        return float(np.mean([learner(m.selected) for m in first + more]))

    acc = {"ERASE": learner(models["ERASE"].selected), "random-k": random_mean(params.k_shots),
           "per-class ERASE": learner(models["per-class ERASE"].selected)}
    acc["single random-k"] = learner(RandomK(ids, params.k_shots, np.random.default_rng([seed, 11])).selected)
    # accuracy against k (fresh models per k; at k = k_shots the models unlearned below)
    acc_k: dict[str, list[float]] = {"ERASE": [], "random-k": [], "per-class ERASE": []}
    for k in params.k_grid:
        if k == params.k_shots:
            for name in acc_k:
                acc_k[name].append(acc[name])
            continue
        acc_k["ERASE"].append(learner(Erase(Z_all, ids, qk_config(params, n, k), np.random.default_rng([seed, 2, k])).selected))
        acc_k["random-k"].append(random_mean(k))
        acc_k["per-class ERASE"].append(learner(PerClassErase(Z_all, ids, task.y_train, qk_config(params, n, k),
                                                              np.random.default_rng([seed, 4, k])).selected))
    coverage = len(np.unique(task.y_train[models["ERASE"].selected])) / task.n_classes
    ft_model, ft_examples = sisa.train_full(task.E_train, task.y_train, head, seed)
    acc["FT"] = float(np.mean(sisa.predict(ft_model, task.E_test) == task.y_test))
    shards = sisa.Sisa(task.E_train, task.y_train, ids, params.sisa_shards, params.sisa_slices, head, seed)
    acc["SISA"] = float(np.mean(shards.predict(task.E_test) == task.y_test))
    # the request stream
    requests = np.random.default_rng([seed, 8]).choice(ids, size=params.n_deletions, replace=False)
    erase = models["ERASE"]
    deletions: dict[str, list[Deletion]] = {name: [] for name in models}
    always: list[float] = []
    cert_ok = cert_n = recl_ok = recl_n = 0
    k, d = params.k_shots, params.proj_dim
    for pid in requests:
        before_rng = copy.deepcopy(erase.rng.bit_generator.state)
        before = copy.deepcopy(erase.state) if recl_n < params.exact_checks else None
        n_rest = erase.state.n_alive - 1
        is_seed = qk.row_of(erase.state, int(pid)) in erase.state.init_rows
        always.append(float(always_flops(n_rest, k, d, params.iters_T, float(is_seed))))
        rec = erase.unlearn(int(pid))
        deletions["ERASE"].append(rec)
        if rec.path.startswith("certified") and cert_n < params.exact_checks:
            twin = qk.coupled_retrain(erase.state)
            cert_n += 1
            cert_ok += qk.same_state(erase.state, twin) and np.array_equal(select(twin), erase.selected)
        elif rec.path.startswith("recluster") and before is not None:
            r = qk.row_of(before, int(pid))
            before.alive[r] = False
            if rec.path == "recluster":
                twin = qk.coupled_retrain(before)
            elif rec.path == "recluster-seed":
                twin = qk.race_retrain(before)
            else:
                gen = np.random.default_rng()
                gen.bit_generator.state = before_rng
                rest_X, rest_ids = qk.compact(before)
                twin = qk.fit_random(rest_X, rest_ids, cfg, gen)
            recl_n += 1
            recl_ok += (qk.same_state(erase.state, twin) and np.array_equal(select(twin), erase.selected)
                        and qk.consistent(erase.state))
        for name in ("random-k", "per-class ERASE"):
            deletions[name].append(models[name].unlearn(int(pid)))
    consistent_after = (qk.consistent(erase.state) and len(set(erase.selected.tolist())) == params.k_shots
                        and bool(np.all(erase.state.alive[np.searchsorted(erase.state.ids, erase.selected)])))
    sisa_flops, sisa_seconds = [], []
    dim = task.E_train.shape[1]
    last_shard = 0
    for pid in requests[: params.sisa_deletions]:
        done, secs, last_shard = shards.unlearn(int(pid))
        sisa_flops.append(sisa.flops_training(dim, head, done))
        sisa_seconds.append(secs)
    fresh = shards.retrain_shard(last_shard)
    sisa_exact = all(np.array_equal(a.detach().numpy(), b.detach().numpy()) for a, b in
                     zip(shards.shards[last_shard].model.state_dict().values(), fresh.state_dict().values()))
    ft_seconds = []
    keep = np.ones(n, dtype=bool)
    for pid in requests[: params.ft_deletions]:
        keep[pid] = False
        start = time.perf_counter()
        sisa.train_full(task.E_train[keep], task.y_train[keep], head, seed)
        ft_seconds.append(time.perf_counter() - start)
    demo_tokens = float(np.mean([tokens(t) for t in task.texts_train])) + 6.0 if task.texts_train else 20.0
    query_tokens = float(np.mean([tokens(t) for t in task.texts_test])) + 4.0 if task.texts_test else 18.0
    return SeedResult(
        seed=seed, task=task.name, acc=acc, acc_k=acc_k, coverage=coverage, deletions=deletions,
        always_flops=always, sisa_flops=sisa_flops, sisa_seconds=sisa_seconds,
        ft_flops=float(sisa.flops_training(dim, head, ft_examples * (n - 1) // n)), ft_seconds=ft_seconds,
        coupled_certified=(cert_ok, cert_n), replay_recluster=(recl_ok, recl_n), sisa_exact=sisa_exact,
        consistent_after=consistent_after, erase_fit_flops=float(qk.flops_fit(n, k, d, params.iters_T)),
        demo_tokens=demo_tokens, query_tokens=query_tokens)


# ---------------------------------------------------------------- scaling sweep
def sisa_expected_flops(n: int, dim: int, params: Params, rng: np.random.Generator, draws: int) -> float:
    """Mean counted FLOPs of a SISA deletion at size n (uniform slice; slices retrained on the cumulative data)."""
    head = sisa.HeadConfig(128, 6, params.ft_epochs)
    per_slice = n / params.sisa_shards / params.sisa_slices
    e = max(1, math.ceil(params.ft_epochs / params.sisa_slices))
    r = rng.integers(params.sisa_slices, size=draws)
    examples = [sum(e * per_slice * (q + 1) for q in range(ri, params.sisa_slices)) for ri in r]
    return float(np.mean([sisa.flops_training(dim, head, int(x)) for x in examples]))


def scaling_point(params: Params, n: int, seed: int, eps: float, proj_dim: int) -> dict[str, Any]:
    """Pass rate and mean / median ERASE cost per deletion at size n on the synthetic mixture (384-d)."""
    rng = np.random.default_rng([seed, 9, n])
    X, _ = embed.gaussian_mixture(n, rng, dim=384, layout_seed=seed)
    Z = X @ projection(384, proj_dim, seed)
    p = replace(params, eps=eps, proj_dim=proj_dim)
    model = Erase(Z, np.arange(n), qk_config(p, n), np.random.default_rng([seed, 10, n]))
    recs = [model.unlearn(int(i)) for i in rng.choice(n, size=params.scaling_deletions, replace=False)]
    flops = np.array([r.flops for r in recs], dtype=float)
    k, m = params.k_shots, n - 1 - np.arange(len(recs))
    always = always_flops(m, k, proj_dim, params.iters_T, k / (m + 1))
    return {"seed": seed, "n": n, "eps": eps, "proj_dim": proj_dim,
            "pass_rate": float(np.mean([not r.path.startswith("recluster") for r in recs])),
            "always_mean_flops": float(np.mean(always)),
            "erase_mean_flops": float(flops.mean()), "erase_median_flops": float(np.median(flops)),
            "erase_mean_seconds": float(np.mean([r.seconds for r in recs])),
            "sisa_mean_flops": sisa_expected_flops(n, 384, params, rng, 200)}


def scaling(params: Params) -> pd.DataFrame:
    """The scaling sweep over ``scaling_ns`` (every seed at eps, d'; variants on the first seed)."""
    jobs = [(n, s, params.eps, params.proj_dim) for s in params.seed_list() for n in params.scaling_ns]
    if params.scaling_variants:
        s = params.seed
        for eps, d in ((params.eps / 2, params.proj_dim), (2 * params.eps, params.proj_dim),
                       (params.eps, max(2, params.proj_dim // 2)), (params.eps, min(64, 2 * params.proj_dim))):
            jobs += [(n, s, eps, d) for n in params.scaling_ns]
    return pd.DataFrame([scaling_point(params, *job) for job in tqdm(jobs, desc="scaling sweep", disable=None, leave=False)])


# ---------------------------------------------------------------- exact in distribution
DISTR_ARMS = ("unlearned", "fresh-refit", "keep-seeds", "retrained")
DISTR_Z = (3.43, 1.47, -0.03, 1.18, -1.86)  # the cold read's 5-point case (1-d), x = id 4 deleted
DISTR_X = 4
DISTR_K, DISTR_T, DISTR_EPS, DISTR_M = 2, 1, 2.0, 0.5  # m = gamma n0 / k with gamma = 0.2, n0 = 5


def distr_config() -> qk.Config:
    """Q-k-means settings of the exact-in-distribution test (k = 2: the seed rule matters)."""
    return qk.Config(DISTR_K, DISTR_T, DISTR_EPS, DISTR_M)


def distribution_draws(params: Params, seed: int) -> dict[str, Any]:
    """The ordered prompt (the k = 2 demonstration ids in centroid order) over ``distr_draws`` independent
    draws per arm on the fixed 5-point set ``DISTR_Z``, deleting ``DISTR_X``: ERASE then unlearning (id-keyed
    race seeding, same-randomness refit), ERASE with the fresh-refit rule (control), the previous
    keep-seeds rule with the position-keyed sequential k-means++ sampler (control), and the textbook
    (sequential) ERASE trained on D minus x. Every draw also checks that the unlearned model equals the
    model trained on D minus x with the same randomness, bit for bit."""
    Z = np.asarray(DISTR_Z, dtype=float)[:, None]
    ids = np.arange(len(Z))
    keep = ids != DISTR_X
    cfg = distr_config()
    counts = {arm: Counter() for arm in DISTR_ARMS}
    paths: Counter = Counter()
    same = 0
    for i in range(params.distr_draws):
        model = Erase(Z, ids, cfg, np.random.default_rng([seed, 31, i]))
        paths[model.unlearn(DISTR_X).path] += 1
        twin = Erase(Z[keep], ids[keep], cfg, np.random.default_rng([seed, 31, i]))
        same += qk.same_state(model.state, twin.state) and np.array_equal(model.selected, twin.selected)
        fresh = Erase(Z, ids, cfg, np.random.default_rng([seed, 33, i]), refit="fresh")
        fresh.unlearn(DISTR_X)
        old = Erase(Z, ids, cfg, np.random.default_rng([seed, 34, i]), seeding="sequential")
        old.unlearn(DISTR_X)
        textbook = Erase(Z[keep], ids[keep], cfg, np.random.default_rng([seed, 32, i]), seeding="sequential")
        for arm, m in (("unlearned", model), ("fresh-refit", fresh), ("keep-seeds", old), ("retrained", textbook)):
            counts[arm][",".join(str(int(q)) for q in m.selected)] += 1
    return {"seed": seed, "x": DISTR_X, "Z": list(DISTR_Z), "counts": {a: dict(c) for a, c in counts.items()},
            "paths": dict(paths), "same_randomness_equal": same}


def keep_seeds_law_gap() -> dict[str, float]:
    """Exact seed-sequence laws on ``DISTR_Z`` (enumeration): total variation between k-means++ on D minus x
    and the keep-seeds rule (k-means++ on D conditioned on never picking x, or on D minus x afresh when x
    was picked); and the cold read's example (points 0, 1, 10, k = 2, x = 10): the order (0, 1) has
    probability 0.5 on D minus x and ``cond_01`` given x never picked."""
    Z = np.asarray(DISTR_Z, dtype=float)
    rest = qk.kmeanspp_law(np.delete(Z, DISTR_X), DISTR_K)
    cond = qk.kmeanspp_law_avoiding(Z, DISTR_K, DISTR_X)
    p_seed = sum(v for s, v in qk.kmeanspp_law(Z, DISTR_K).items() if DISTR_X in s)
    mix = {s: (1 - p_seed) * cond.get(s, 0.0) + p_seed * rest.get(s, 0.0) for s in set(rest) | set(cond)}
    tv = 0.5 * sum(abs(mix.get(s, 0.0) - rest.get(s, 0.0)) for s in set(mix) | set(rest))
    toy = qk.kmeanspp_law_avoiding(np.array([0.0, 1.0, 10.0]), 2, 2)
    toy_rest = qk.kmeanspp_law(np.array([0.0, 1.0]), 2)
    return {"seed_tv": float(tv), "p_x_seed": float(p_seed), "cond_01": float(toy[(0, 1)]),
            "cond_10": float(toy[(1, 0)]), "rest_01": float(toy_rest[(0, 1)])}


def homogeneity(a: dict[int, int], b: dict[int, int], min_count: int = 10) -> tuple[float, int, float]:
    """Chi-square homogeneity test of two count tables (outcomes with fewer than ``min_count`` draws in
    both arms pooled into one cell): (statistic, degrees of freedom, total variation distance)."""
    keys = sorted(set(a) | set(b))
    tab = np.array([[a.get(k, 0) for k in keys], [b.get(k, 0) for k in keys]], dtype=float)
    tv = 0.5 * float(np.abs(tab[0] / tab[0].sum() - tab[1] / tab[1].sum()).sum())
    big = tab.sum(axis=0) >= min_count
    cells = tab[:, big]
    if (~big).any():
        cells = np.column_stack([cells, tab[:, ~big].sum(axis=1)])
    cells = cells[:, cells.sum(axis=0) > 0]
    if cells.shape[1] < 2:
        return 0.0, 0, tv
    stat, _, dof, _ = stats.chi2_contingency(cells, correction=False)
    return float(stat), int(dof), tv


def distribution_table(results: "Results") -> pd.DataFrame:
    """Per seed: total variation and chi-square p-value of each arm against retraining on D minus x."""
    rows = []
    for dr in results.distribution:
        row: dict[str, Any] = {"seed": dr["seed"],
                               "x-is-seed share": dr["paths"].get("recluster-seed", 0) / results.params.distr_draws,
                               "recluster share": (dr["paths"].get("recluster", 0) + dr["paths"].get("recluster-seed", 0))
                               / results.params.distr_draws,
                               "same-randomness equal": dr["same_randomness_equal"] / results.params.distr_draws}
        for arm in ("unlearned", "fresh-refit", "keep-seeds"):
            stat, dof, tv = homogeneity(dr["counts"][arm], dr["counts"]["retrained"])
            row[f"TV {arm}"] = tv
            row[f"p {arm}"] = float(stats.chi2.sf(stat, dof)) if dof else 1.0
        rows.append(row)
    return pd.DataFrame(rows).set_index("seed")


def exact_in_distribution(results: "Results", arm: str = "unlearned") -> float:
    """Pooled chi-square p-value over seeds (statistics and degrees of freedom summed) of ``arm`` against
    retraining on D minus x."""
    tests = [homogeneity(dr["counts"][arm], dr["counts"]["retrained"]) for dr in results.distribution]
    dof = sum(t[1] for t in tests)
    return float(stats.chi2.sf(sum(t[0] for t in tests), dof)) if dof else 1.0


# ---------------------------------------------------------------- the run
@dataclass
class Results:
    """All seeds, the scaling sweep, the exact-in-distribution draws, and the holistic cost."""

    params: Params
    source: str
    learner: str
    per_seed: list[SeedResult]
    sweep: pd.DataFrame
    holistic: dict[str, Any]
    seconds: float
    distribution: list[dict[str, Any]] = field(default_factory=list)


def run(params: Params) -> Results:
    """Run every seed (and task), the exact-in-distribution draws, the scaling sweep and the holistic cost."""
    start = time.perf_counter()
    runtime.limit_threads()
    if params.preset == "paper":
        from companion.papers.erase_unlearning import paper_preset

        return paper_preset.run_paper(params)
    tasks, source = synthetic_tasks(params)
    per_seed = [run_seed(params, task, s, attention_learner(task, params.tau_icl))
                for task, s in tqdm(list(zip(tasks, params.seed_list())), desc="seeds", disable=None, leave=False)]
    distribution = [distribution_draws(params, s) for s in params.seed_list()]
    sweep = scaling(params)
    learner = (f"attention read-out (tau = {params.tau_icl:g}) over the "
               f"{tasks[0].E_train.shape[1]}-d embeddings")
    return Results(params, source, learner, per_seed, sweep, holistic(params, per_seed), time.perf_counter() - start,
                   distribution)


def holistic(params: Params, per_seed: list[SeedResult]) -> dict[str, Any]:
    """ERASE + LLM against SISA fine-tuning of the same LLM, at ``llm_params_for_cost``, with rho*."""
    N, nq = params.llm_params_for_cost, params.queries_for_cost
    demo = float(np.mean([r.demo_tokens for r in per_seed]))
    query = float(np.mean([r.query_tokens for r in per_seed]))
    unlearn = float(np.mean([np.mean([d.flops for d in r.deletions["ERASE"]]) for r in per_seed]))
    learn = float(np.mean([r.erase_fit_flops for r in per_seed]))
    icl_dep = cost.icl_deployment(N, params.k_shots, demo, query, 2.0, learn, unlearn)
    ft_dep = cost.sisa_deployment(N, params.n_train, params.sisa_shards, params.sisa_slices, params.ft_epochs,
                                  query, 2.0)
    rho = cost.break_even(icl_dep, ft_dep, nq)
    cross = cost.crossing(icl_dep, ft_dep, nq)
    gap = 0.0 if rho == 0.0 and math.isnan(cross) else abs(cross - rho) / rho if rho > 0 else float("nan")
    return {"icl": icl_dep, "sisa": ft_dep, "rho_star": rho, "crossing": cross, "crossing_gap": gap,
            "demo_tokens": demo, "query_tokens": query, "n_params": N, "n_queries": nq}


def cost_ratios(r: SeedResult) -> dict[str, float]:
    """One seed's FLOP ratios against SISA (median, mean; ERASE and the recluster-always control) and its
    SISA / ERASE wall ratio."""
    e = np.array([d.flops for d in r.deletions["ERASE"]], dtype=float)
    always = np.asarray(r.always_flops)
    secs = np.array([d.seconds for d in r.deletions["ERASE"]])
    sisa_med, sisa_mean = float(np.median(r.sisa_flops)), float(np.mean(r.sisa_flops))
    return {"median": float(np.median(e)) / sisa_med, "mean": float(e.mean()) / sisa_mean,
            "always_median": float(np.median(always)) / sisa_med, "always_mean": float(always.mean()) / sisa_mean,
            "wall": float(np.mean(r.sisa_seconds) / secs.mean())}


def scale_ratios(sweep: pd.DataFrame, params: Params, column: str = "erase_mean_flops") -> list[float]:
    """Per seed, mean FLOPs per deletion at n_max / at n_min (``column``: ERASE, recluster-always or SISA)."""
    main = sweep[(sweep.eps == params.eps) & (sweep.proj_dim == params.proj_dim)]
    lo, hi = min(params.scaling_ns), max(params.scaling_ns)
    out = []
    for _, g in main.groupby("seed"):
        at = g.set_index("n")
        out.append(float(at.loc[hi, column] / at.loc[lo, column]))
    return out


def _share(pairs: list[tuple[int, int]]) -> float:
    """Pooled share ok / checked (NaN when nothing was checked)."""
    ok, n = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    return ok / n if n else float("nan")


def claim_values(results: Results) -> dict[str, Any]:
    """Every claim's measured values (per seed, or one value for an exact claim) and its controls'."""
    rs, p = results.per_seed, results.params
    ratios = [cost_ratios(r) for r in rs]
    growth = max(p.scaling_ns) / min(p.scaling_ns)
    return {
        "exact-in-distribution": exact_in_distribution(results, "unlearned"),
        "exact-in-distribution@fresh-refit": exact_in_distribution(results, "fresh-refit"),
        "exact-in-distribution@keep-seeds": exact_in_distribution(results, "keep-seeds"),
        "same-randomness": _share([(dr["same_randomness_equal"], p.distr_draws) for dr in results.distribution]),
        "coupled-certified": _share([r.coupled_certified for r in rs]),
        "replay-recluster": _share([r.replay_recluster for r in rs]),
        "cost-median": [x["median"] for x in ratios],
        "cost-median@recluster-always": [x["always_median"] for x in ratios],
        "cost-mean": [x["mean"] for x in ratios],
        "cost-mean@recluster-always": [x["always_mean"] for x in ratios],
        "scale-erase": scale_ratios(results.sweep, p),
        "scale-erase@recluster-always": scale_ratios(results.sweep, p, "always_mean_flops"),
        "scale-sisa": float(np.mean(scale_ratios(results.sweep, p, "sisa_mean_flops"))) / growth,
        "acc-vs-ft": [r.acc["ERASE"] - r.acc["FT"] for r in rs],
        "acc-vs-ft@random-k": [r.acc["random-k"] - r.acc["FT"] for r in rs],
        "acc-vs-random": [r.acc["ERASE"] - r.acc["random-k"] for r in rs],
        "acc-vs-random@single-random-k": [r.acc["single random-k"] - r.acc["random-k"] for r in rs],
        "holistic-crossing": results.holistic["crossing_gap"],
    }


def paths(results: Results) -> pd.DataFrame:
    """Share of ERASE deletions by path, and mean FLOPs and milliseconds per path (all seeds)."""
    recs = [d for r in results.per_seed for d in r.deletions["ERASE"]]
    df = pd.DataFrame({"path": [d.path for d in recs], "flops": [d.flops for d in recs],
                       "ms": [1e3 * d.seconds for d in recs]})
    out = df.groupby("path").agg(share=("flops", "size"), mean_flops=("flops", "mean"), mean_ms=("ms", "mean"))
    out["share"] = out["share"] / len(df)
    return out


def accuracy_table(results: Results) -> pd.DataFrame:
    """Mean and s.d. of test accuracy over seeds per method (k = k_shots for the ICL methods)."""
    df = pd.DataFrame([r.acc for r in results.per_seed])
    return pd.DataFrame({"mean": df.mean(), "sd": df.std(ddof=1) if len(df) > 1 else 0.0}).round(3)


def cost_table(results: Results) -> pd.DataFrame:
    """Per unlearning request, mean over seeds: counted FLOPs and milliseconds per method."""
    rs = results.per_seed
    rows = {}
    for name in ("ERASE", "per-class ERASE", "random-k"):
        rows[name] = (np.mean([np.mean([d.flops for d in r.deletions[name]]) for r in rs]),
                      np.mean([1e3 * np.mean([d.seconds for d in r.deletions[name]]) for r in rs]))
    rows["SISA"] = (np.mean([np.mean(r.sisa_flops) for r in rs]), np.mean([1e3 * np.mean(r.sisa_seconds) for r in rs]))
    rows["FT (full retrain)"] = (np.mean([r.ft_flops for r in rs]), np.mean([1e3 * np.mean(r.ft_seconds) for r in rs]))
    return pd.DataFrame(rows, index=["FLOPs per request", "ms per request"]).T


def _recluster_share(pth: pd.DataFrame) -> float:
    """Share of ERASE requests that failed the certificate (every recluster path)."""
    return float(pth["share"][[p for p in pth.index if p.startswith("recluster")]].sum())


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary: accuracies, pass rate, costs, the coupling and replay counts, the
    exact-in-distribution table per seed, rho*."""
    rs = results.per_seed
    acc = accuracy_table(results)["mean"].to_dict()
    ratios = pd.DataFrame([cost_ratios(r) for r in rs]).mean()
    pth = paths(results)
    return {
        "embedder": results.source,
        "learner": results.learner,
        "accuracy": {k: round(float(v), 4) for k, v in acc.items()},
        "erase_label_coverage": float(np.mean([r.coverage for r in rs])),
        "certificate_pass_rate": 1.0 - _recluster_share(pth),
        "coupled_certified_checked": int(sum(r.coupled_certified[1] for r in rs)),
        "replay_recluster_checked": int(sum(r.replay_recluster[1] for r in rs)),
        "sisa_unlearned_shard_equals_retrain": bool(all(r.sisa_exact for r in rs)),
        "erase_state_consistent_after_all": bool(all(r.consistent_after for r in rs)),
        "flops_ratio_median": float(ratios["median"]),
        "flops_ratio_mean": float(ratios["mean"]),
        "wall_ratio_sisa_over_erase": float(ratios["wall"]),
        "exact_in_distribution": distribution_table(results).reset_index().to_dict(orient="records"),
        "rho_star": results.holistic["rho_star"],
        "seconds": round(results.seconds, 1),
    }


def glue_values(results: Results) -> dict[str, float]:
    """The numbers the page's prose quotes (glued into the text by myst-nb)."""
    rs, p = results.per_seed, results.params
    acc = accuracy_table(results)["mean"]
    pth = paths(results)
    ratios = pd.DataFrame([cost_ratios(r) for r in rs]).mean()
    main = results.sweep[(results.sweep.eps == p.eps) & (results.sweep.proj_dim == p.proj_dim)]
    by_n = main.groupby("n")["pass_rate"].mean()
    h = results.holistic
    cert = pth.loc[[q for q in pth.index if q.startswith("certified")]]
    recl = pth.loc[[q for q in pth.index if q.startswith("recluster")]]
    dist = distribution_table(results)
    return {
        "acc_erase": float(acc["ERASE"]), "acc_random": float(acc["random-k"]),
        "acc_random1": float(acc["single random-k"]),
        "acc_perclass": float(acc["per-class ERASE"]), "acc_ft": float(acc["FT"]), "acc_sisa": float(acc["SISA"]),
        "coverage": float(np.mean([r.coverage for r in rs])),
        "pass_rate": 1.0 - _recluster_share(pth),
        "seed_share": float(pth["share"].get("recluster-seed", 0.0)),
        "cert_checked": int(sum(r.coupled_certified[1] for r in rs)),
        "recl_checked": int(sum(r.replay_recluster[1] for r in rs)),
        "flops_median_ratio": float(ratios["median"]), "flops_mean_ratio": float(ratios["mean"]),
        "always_median_ratio": float(ratios["always_median"]), "always_mean_ratio": float(ratios["always_mean"]),
        "wall_ratio": float(ratios["wall"]),
        "cert_flops": float((cert["mean_flops"] * cert["share"]).sum() / max(cert["share"].sum(), 1e-12)),
        "recl_flops": float((recl["mean_flops"] * recl["share"]).sum() / max(recl["share"].sum(), 1e-12)),
        "recl_ms": float((recl["mean_ms"] * recl["share"]).sum() / max(recl["share"].sum(), 1e-12)),
        "cert_ms": float((cert["mean_ms"] * cert["share"]).sum() / max(cert["share"].sum(), 1e-12)),
        "sisa_flops": float(np.mean([np.mean(r.sisa_flops) for r in rs])),
        "sisa_ms": float(np.mean([1e3 * np.mean(r.sisa_seconds) for r in rs])),
        "scale_erase": float(np.mean(scale_ratios(results.sweep, p))),
        "scale_always": float(np.mean(scale_ratios(results.sweep, p, "always_mean_flops"))),
        "scale_linear": float(max(p.scaling_ns) / min(p.scaling_ns)),
        "pass_rate_nmin": float(by_n.iloc[0]), "pass_rate_nmax": float(by_n.iloc[-1]),
        "n_min": int(by_n.index[0]), "n_max": int(by_n.index[-1]),
        "distr_tv_unlearned": float(dist["TV unlearned"].mean()), "distr_tv_fresh": float(dist["TV fresh-refit"].mean()),
        "distr_p_unlearned": exact_in_distribution(results, "unlearned"),
        "distr_p_fresh": exact_in_distribution(results, "fresh-refit"),
        "distr_tv_keep": float(dist["TV keep-seeds"].mean()),
        "distr_p_keep": exact_in_distribution(results, "keep-seeds"),
        "distr_same_share": float(dist["same-randomness equal"].mean()),
        "distr_seed_share": float(dist["x-is-seed share"].mean()),
        "distr_draws": int(p.distr_draws), "distr_n": len(DISTR_Z), "distr_k": DISTR_K, "distr_T": DISTR_T,
        "distr_eps": DISTR_EPS, "distr_m": DISTR_M, "distr_x": DISTR_X, "distr_xval": DISTR_Z[DISTR_X],
        **{f"law_{key}": val for key, val in keep_seeds_law_gap().items()},
        "n_train": int(p.n_train), "n_test": int(p.n_test), "k_shots": int(p.k_shots), "proj_dim": int(p.proj_dim),
        "iters_T": int(p.iters_T), "eps": float(p.eps), "random_prompts": int(p.random_prompts),
        "n_seeds": len(rs), "ft_epochs": int(p.ft_epochs), "sisa_shards": int(p.sisa_shards),
        "sisa_slices": int(p.sisa_slices), "coords": int(p.proj_dim * p.iters_T),
        "n_params_b": float(p.llm_params_for_cost / 1e9),
        "per_cluster": float(p.n_train / p.k_shots),
        "rho_star": float(h["rho_star"]),
        "queries_per_deletion": float(1.0 / h["rho_star"]) if h["rho_star"] > 0 else float("inf"),
        "icl_infer": float(h["icl"].infer), "sisa_infer": float(h["sisa"].infer),
        "sisa_unlearn_llm": float(h["sisa"].unlearn),
    }
