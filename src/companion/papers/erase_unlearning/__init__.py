"""Fast Exact Unlearning for In-Context Learning Data for LLMs (Muresanu, Thudi, Zhang, Papernot, ICML 2025).

arXiv: https://arxiv.org/abs/2402.00751 -- PMLR 267:45272-45288. No official code was released.

Reproduced at small scale: ERASE picks the k in-context demonstrations of a frozen learner by
quantized k-means over sentence embeddings and unlearns a training point exactly -- a cheap
certificate when the quantized centroids do not move, a recluster otherwise. We test the
exactness bit for bit against retraining without the point (both paths), compare accuracy with
fine-tuning a head (plain and SISA), count the FLOPs and time of every unlearning request against
SISA's shard retraining, sweep the dataset size, and compute the holistic (inference-inclusive)
break-even deletion rate at LLM scale.

Written by hand, because no maintained library does it: Q-k-means with the exact certificate
(:mod:`.qkmeans`, after Ginart et al.'s reference code ``tginart/deletion-efficient-kmeans`` with
the spec's exactness fixes), the ERASE selection and its unlearning (:mod:`.erase`; the paper's
Algorithm 1 is reconstructed, its body was not readable), SISA over an MLP head (:mod:`.sisa`), the
template intent corpus (:mod:`.intents`), the frozen learners (:mod:`.icl`) and the cost model
(:mod:`.cost`). Embeddings come from MiniLM through ``sentence-transformers`` (:mod:`.embed`).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from tqdm import tqdm

from companion import plotting, runtime
from companion.claims import Claim, Verdict, evaluate_all
from companion.params import BaseParams, ParamError, local_default, param, require_path
from companion.papers.erase_unlearning import cost, embed, icl, intents, sisa
from companion.papers.erase_unlearning import qkmeans as qk
from companion.papers.erase_unlearning.erase import Deletion, Erase, PerClassErase, RandomK, projection, select

SLUG = "erase-unlearning"


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the small-scale ERASE reproduction (defaults: the quick preset)."""

    seeds: int = param(3, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    dataset: str = param("intents", choices=("intents", "digits", "gmm"),
                         help="intents: template utterances embedded by MiniLM (falls back to digits "
                              "when the encoder is missing); digits / gmm: the spec's fallbacks")
    n_train: int = param(1200, lo=100, hi=200_000, help="training points (the ICL pool)")
    n_test: int = param(600, lo=10, hi=100_000, help="test queries")
    label_noise: float = param(0.05, lo=0.0, hi=0.5, help="share of flipped training labels (intents only)")
    k_shots: int = param(24, lo=1, hi=512, help="in-context examples = Q-k-means clusters")
    k_grid: tuple[int, ...] = param((6, 12, 24, 48), lo=1, hi=512, help="k values of the accuracy-vs-k figure")
    proj_dim: int = param(8, lo=2, hi=64, help="dimension d' of the random projection the clustering runs in")
    eps: float = param(0.2, lo=1e-4, hi=10.0, help="lattice width of the quantizer")
    iters_T: int = param(10, lo=1, hi=50, help="Lloyd iterations (fixed)")
    gamma_momentum: float = param(0.2, lo=0.0, hi=1.0, help="momentum threshold m = gamma n0 / k, fixed at construction")
    tau_icl: float = param(0.05, lo=0.01, hi=1.0, help="temperature of the attention read-out learner")
    sisa_shards: int = param(4, lo=1, hi=64, help="SISA shards S")
    sisa_slices: int = param(4, lo=1, hi=64, help="SISA slices R per shard")
    ft_epochs: int = param(30, lo=1, hi=1000, help="epochs of the fine-tuned head (SISA: spread over the slices)")
    n_deletions: int = param(100, lo=10, hi=100_000, help="sequential unlearning requests to ERASE and random-k")
    sisa_deletions: int = param(20, lo=1, hi=10_000, help="unlearning requests to SISA (each retrains slices)")
    ft_deletions: int = param(2, lo=1, hi=100, help="full retrains timed for plain fine-tuning")
    exact_checks: int = param(20, lo=1, hi=10_000, help="certified deletions per seed checked against a coupled retrain")
    scaling_ns: tuple[int, ...] = param((1000, 4000), lo=100, hi=1_000_000, min_len=2,
                                        help="dataset sizes of the synthetic scaling sweep")
    scaling_deletions: int = param(60, lo=10, hi=10_000, help="ERASE deletions per size in the scaling sweep")
    scaling_variants: bool = param(False, help="also sweep eps/2, 2 eps and d'/2, 2 d' (one seed)")
    llm_params_for_cost: float = param(7e9, lo=1e6, hi=1e13, help="LLM size N of the analytic holistic cost")
    queries_for_cost: float = param(1e6, lo=1.0, hi=1e15, help="queries N_q of the holistic cost")
    model_path: str = param(local_default(SLUG, "llm"), help="paper preset: local instruct LLM folder "
                            "(Hugging Face format) used as the in-context learner")
    data_path: str = param(local_default(SLUG, "bbii"), help="paper preset: folder of BBII task files "
                           "(<task>.json with input/output examples)")
    smoke: bool = param(False, help="paper preset on a tiny budget (a few queries and deletions, < 2 min CPU)")

    PRESETS = {
        "full": {"seeds": 5, "n_train": 4000, "n_test": 1000, "sisa_shards": 8, "ft_epochs": 60,
                 "n_deletions": 300, "sisa_deletions": 20, "ft_deletions": 2, "exact_checks": 50,
                 "scaling_ns": (1000, 2000, 4000, 8000), "scaling_variants": True},
        "paper": {"seeds": 3, "n_deletions": 100, "sisa_deletions": 20, "exact_checks": 20},
    }

    def __post_init__(self) -> None:
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a local instruct LLM saved with save_pretrained "
                         "(config.json, weights, tokenizer)", "dir")
            require_path("data_path", self.data_path, "BBII task files <task>.json with input/output "
                         "examples", "dir")
            return
        if self.n_train < 10 * self.k_shots:
            raise ParamError(f"parameter 'n_train': {self.n_train} is below 10 k_shots = {10 * self.k_shots}; "
                             f"allowed: n_train >= 10 k_shots")
        if 10 * max(self.k_grid) > self.n_train:
            raise ParamError(f"parameter 'k_grid': {max(self.k_grid)} needs n_train >= {10 * max(self.k_grid)}; "
                             f"allowed: every k <= n_train / 10 = {self.n_train // 10}")
        if self.n_deletions > self.n_train // 2:
            raise ParamError(f"parameter 'n_deletions': {self.n_deletions}; allowed: at most n_train / 2 = "
                             f"{self.n_train // 2}")
        if self.sisa_deletions > self.n_deletions or self.exact_checks > self.n_deletions:
            raise ParamError(f"parameter 'sisa_deletions': {self.sisa_deletions} (exact_checks "
                             f"{self.exact_checks}); allowed: at most n_deletions = {self.n_deletions}")
        if self.sisa_shards * self.sisa_slices > self.n_train // 4:
            raise ParamError(f"parameter 'sisa_shards': {self.sisa_shards} x sisa_slices {self.sisa_slices}; "
                             f"allowed: at most n_train / 4 = {self.n_train // 4} slices in all")
        if self.k_shots * 10 > min(self.scaling_ns) or self.scaling_deletions > min(self.scaling_ns) // 2:
            raise ParamError(f"parameter 'scaling_ns': {min(self.scaling_ns)}; allowed: every n >= 10 k_shots "
                             f"and >= 2 scaling_deletions")

    def m_threshold(self, n0: int, k: int) -> float:
        """The fixed momentum threshold ``m = gamma n0 / k``."""
        return self.gamma_momentum * n0 / k

    def qk_config(self, n0: int, k: int | None = None) -> qk.Config:
        """Q-k-means settings for a pool of ``n0`` points and ``k`` clusters (default k_shots)."""
        k = k or self.k_shots
        return qk.Config(k, self.iters_T, self.eps, self.m_threshold(n0, k))


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
    acc: dict[str, float]
    acc_k: dict[str, list[float]]
    coverage: float
    deletions: dict[str, list[Deletion]]
    sisa_flops: list[float]
    sisa_seconds: list[float]
    ft_flops: float
    ft_seconds: list[float]
    exact_certified: tuple[int, int]
    exact_recluster: tuple[int, int]
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


def tokens(text: str) -> float:
    """Rough LLM token count of a short English text: 4/3 tokens per word."""
    return 4.0 / 3.0 * len(text.split())


def run_seed(params: Params, task: Task, seed: int, learner: Learner) -> SeedResult:
    """Fit ERASE, random-k, per-class ERASE, SISA and the fine-tuned head; unlearn a stream of requests."""
    n, D = task.E_train.shape
    ids = np.arange(n)
    Z_all = task.E_train @ projection(D, params.proj_dim, seed)
    cfg = params.qk_config(n)
    head = sisa.HeadConfig(128, task.n_classes, params.ft_epochs)
    # accuracy against k (fresh models per k; the k_shots model is the one unlearned below)
    acc_k: dict[str, list[float]] = {"ERASE": [], "random-k": [], "per-class ERASE": []}
    for k in params.k_grid:
        acc_k["ERASE"].append(learner(Erase(Z_all, ids, params.qk_config(n, k), np.random.default_rng([seed, 2, k])).selected))
        acc_k["random-k"].append(learner(RandomK(ids, k, np.random.default_rng([seed, 3, k])).selected))
        acc_k["per-class ERASE"].append(learner(PerClassErase(Z_all, ids, task.y_train, params.qk_config(n, k),
                                                              np.random.default_rng([seed, 4, k])).selected))
    models = {"ERASE": Erase(Z_all, ids, cfg, np.random.default_rng([seed, 5])),
              "random-k": RandomK(ids, params.k_shots, np.random.default_rng([seed, 6])),
              "per-class ERASE": PerClassErase(Z_all, ids, task.y_train, cfg, np.random.default_rng([seed, 7]))}
    acc = {name: learner(m.selected) for name, m in models.items()}
    coverage = len(np.unique(task.y_train[models["ERASE"].selected])) / task.n_classes
    ft_model, ft_examples = sisa.train_full(task.E_train, task.y_train, head, seed)
    acc["FT"] = float(np.mean(sisa.predict(ft_model, task.E_test) == task.y_test))
    shards = sisa.Sisa(task.E_train, task.y_train, ids, params.sisa_shards, params.sisa_slices, head, seed)
    acc["SISA"] = float(np.mean(shards.predict(task.E_test) == task.y_test))
    # the request stream
    requests = np.random.default_rng([seed, 8]).choice(ids, size=params.n_deletions, replace=False)
    erase = models["ERASE"]
    deletions: dict[str, list[Deletion]] = {name: [] for name in models}
    cert_ok = cert_n = recl_ok = recl_n = 0
    for pid in requests:
        before_rng = copy.deepcopy(erase.rng.bit_generator.state)
        rest_X, rest_ids = qk.compact(erase.state)
        rec = erase.unlearn(int(pid))
        deletions["ERASE"].append(rec)
        if rec.path.startswith("certified") and cert_n < params.exact_checks:
            twin = qk.coupled_retrain(erase.state)
            cert_n += 1
            cert_ok += qk.same_state(erase.state, twin) and np.array_equal(select(twin), erase.selected)
        elif rec.path == "recluster":
            gen = np.random.default_rng()
            gen.bit_generator.state = before_rng
            keep = rest_ids != pid
            twin = qk.fit_random(rest_X[keep], rest_ids[keep], cfg, gen)
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
    return SeedResult(seed, task.name, acc, acc_k, coverage, deletions, sisa_flops, sisa_seconds,
                      float(sisa.flops_training(dim, head, ft_examples * (n - 1) // n)), ft_seconds,
                      (cert_ok, cert_n), (recl_ok, recl_n), sisa_exact, consistent_after,
                      float(qk.flops_fit(n, params.k_shots, params.proj_dim, params.iters_T)),
                      demo_tokens, query_tokens)


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
    model = Erase(Z, np.arange(n), p.qk_config(n), np.random.default_rng([seed, 10, n]))
    recs = [model.unlearn(int(i)) for i in rng.choice(n, size=params.scaling_deletions, replace=False)]
    flops = np.array([r.flops for r in recs], dtype=float)
    return {"seed": seed, "n": n, "eps": eps, "proj_dim": proj_dim,
            "pass_rate": float(np.mean([r.path != "recluster" for r in recs])),
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


# ---------------------------------------------------------------- the run
@dataclass
class Results:
    """All seeds, the scaling sweep, and the holistic cost."""

    params: Params
    source: str
    learner: str
    per_seed: list[SeedResult]
    sweep: pd.DataFrame
    holistic: dict[str, Any]
    seconds: float


def run(params: Params) -> Results:
    """Run every seed (and task), the scaling sweep and the holistic cost model."""
    start = time.perf_counter()
    runtime.limit_threads()
    if params.preset == "paper":
        from companion.papers.erase_unlearning import paper_llm

        return paper_llm.run_paper(params)
    tasks, source = synthetic_tasks(params)
    per_seed = [run_seed(params, task, s, attention_learner(task, params.tau_icl))
                for task, s in tqdm(list(zip(tasks, params.seed_list())), desc="seeds", disable=None, leave=False)]
    sweep = scaling(params)
    learner = (f"attention read-out (tau = {params.tau_icl:g}) over the "
               f"{tasks[0].E_train.shape[1]}-d embeddings")
    return Results(params, source, learner, per_seed, sweep, holistic(params, per_seed), time.perf_counter() - start)


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


# ---------------------------------------------------------------- claims
CLAIMS = [
    Claim("exact-certified", "A certified deletion leaves Q-k-means and the prompt bit-for-bit equal to "
          "retraining without the point (same seeds and phases): share of checked deletions",
          "exact by construction (claims 1-2)", 1.0, ">=", kind="exact"),
    Claim("exact-recluster", "Consistency of the recluster path: the state equals training on D minus x with "
          "the same fresh randomness, and stored sums and counts match the data: share of reclusters",
          "exact (claim 1)", 1.0, ">=", kind="exact"),
    Claim("cost-median", "Median counted FLOPs of an ERASE deletion / median of a SISA deletion",
          "'vastly lower' (no number retrieved)", 1e-3, "<="),
    Claim("cost-mean", "Mean counted FLOPs of an ERASE deletion, reclusters included / mean of SISA",
          "'vastly lower' (no number retrieved)", 1e-2, "<="),
    Claim("scale-erase", "Mean ERASE FLOPs per deletion at the largest n / at the smallest n (synthetic sweep)",
          "'independent of dataset size'", 3.5, "<="),
    Claim("scale-sisa", "Consistency of the cost model: SISA's FLOPs per deletion grow with n "
          "(ratio / (n_max / n_min))", "linear in n", 0.75, ">=", kind="exact"),
    Claim("acc-vs-ft", "Test accuracy of ERASE (k = k_shots) minus the fine-tuned head's",
          "'similar' to fine-tuning (no number retrieved)", -0.10, ">="),
    Claim("acc-vs-random", "Test accuracy of ERASE minus random-k ICL at the same k",
          "ERASE at least as good as random demos", -0.01, ">="),
    Claim("holistic-crossing", "Consistency of the holistic cost: the total-cost curves cross at the closed-form "
          "break-even rate rho* (relative gap; 0 when ERASE dominates)", "claim 4 (trade-off)", 0.01, "<=",
          kind="exact"),
]


def cost_ratios(r: SeedResult) -> tuple[float, float, float]:
    """(median FLOPs ratio, mean FLOPs ratio, SISA / ERASE wall ratio) of one seed."""
    e = np.array([d.flops for d in r.deletions["ERASE"]], dtype=float)
    secs = np.array([d.seconds for d in r.deletions["ERASE"]])
    return (float(np.median(e) / np.median(r.sisa_flops)), float(e.mean() / np.mean(r.sisa_flops)),
            float(np.mean(r.sisa_seconds) / secs.mean()))


def scale_ratios(sweep: pd.DataFrame, params: Params) -> tuple[list[float], float]:
    """Per seed E[c_ERASE](n_max) / E[c_ERASE](n_min); and SISA's ratio / (n_max / n_min) (mean over seeds)."""
    main = sweep[(sweep.eps == params.eps) & (sweep.proj_dim == params.proj_dim)]
    lo, hi = min(params.scaling_ns), max(params.scaling_ns)
    erase, sisa_r = [], []
    for _, g in main.groupby("seed"):
        at = g.set_index("n")
        erase.append(float(at.loc[hi, "erase_mean_flops"] / at.loc[lo, "erase_mean_flops"]))
        sisa_r.append(float(at.loc[hi, "sisa_mean_flops"] / at.loc[lo, "sisa_mean_flops"]) / (hi / lo))
    return erase, float(np.mean(sisa_r))


def _share(pairs: list[tuple[int, int]]) -> float:
    """Pooled share ok / checked (NaN when nothing was checked)."""
    ok, n = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    return ok / n if n else float("nan")


def check(results: Results) -> list[Verdict]:
    """Evaluate every claim on the measured values."""
    rs = results.per_seed
    ratios = [cost_ratios(r) for r in rs]
    erase_scale, sisa_scale = scale_ratios(results.sweep, results.params)
    return evaluate_all(CLAIMS, {
        "exact-certified": _share([r.exact_certified for r in rs]),
        "exact-recluster": _share([r.exact_recluster for r in rs]),
        "cost-median": [x[0] for x in ratios],
        "cost-mean": [x[1] for x in ratios],
        "scale-erase": erase_scale,
        "scale-sisa": sisa_scale,
        "acc-vs-ft": [r.acc["ERASE"] - r.acc["FT"] for r in rs],
        "acc-vs-random": [r.acc["ERASE"] - r.acc["random-k"] for r in rs],
        "holistic-crossing": results.holistic["crossing_gap"],
    })


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


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary: accuracies, pass rate, costs, exactness counts, rho*."""
    rs = results.per_seed
    acc = accuracy_table(results)["mean"].to_dict()
    ratios = np.array([cost_ratios(r) for r in rs])
    pth = paths(results)
    h = results.holistic
    return {
        "embedder": results.source,
        "learner": results.learner,
        "accuracy": {k: round(float(v), 4) for k, v in acc.items()},
        "erase_label_coverage": float(np.mean([r.coverage for r in rs])),
        "certificate_pass_rate": float(1.0 - pth["share"].get("recluster", 0.0)),
        "exact_certified_checked": int(sum(r.exact_certified[1] for r in rs)),
        "exact_recluster_checked": int(sum(r.exact_recluster[1] for r in rs)),
        "sisa_unlearned_shard_equals_retrain": bool(all(r.sisa_exact for r in rs)),
        "erase_state_consistent_after_all": bool(all(r.consistent_after for r in rs)),
        "flops_ratio_median": float(ratios[:, 0].mean()),
        "flops_ratio_mean": float(ratios[:, 1].mean()),
        "wall_ratio_sisa_over_erase": float(ratios[:, 2].mean()),
        "rho_star": h["rho_star"],
        "seconds": round(results.seconds, 1),
    }


# ---------------------------------------------------------------- figures
def plot_accuracy(results: Results) -> Figure:
    """Test accuracy against k for the ICL methods (mean +- s.d.), FT and SISA as horizontal lines."""
    fig, (ax,) = plotting.figure(width=5.0, height=3.2)
    ks = list(results.params.k_grid)
    for name in ("ERASE", "random-k", "per-class ERASE"):
        plotting.mean_sd_line(ax, ks, [r.acc_k[name] for r in results.per_seed], name)
    for name, style in (("FT", "--"), ("SISA", ":")):
        ax.axhline(np.mean([r.acc[name] for r in results.per_seed]), color="grey", ls=style, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("in-context examples k")
    ax.set_ylabel("test accuracy")
    ax.legend()
    return fig


def plot_costs(results: Results) -> Figure:
    """Per-request cost on log axes: counted FLOPs and wall seconds, by method and ERASE path."""
    rows = []
    for r in results.per_seed:
        for d in r.deletions["ERASE"]:
            rows.append(("ERASE " + ("recluster" if d.path == "recluster" else "certified"), d.flops, d.seconds))
        rows += [("random-k", d.flops, d.seconds) for d in r.deletions["random-k"]]
        rows += [("SISA", f, s) for f, s in zip(r.sisa_flops, r.sisa_seconds)]
        rows += [("FT retrain", r.ft_flops, s) for s in r.ft_seconds]
    df = pd.DataFrame(rows, columns=["method", "flops", "seconds"])
    order = [m for m in ("ERASE certified", "ERASE recluster", "random-k", "SISA", "FT retrain") if m in set(df.method)]
    fig, axes = plotting.figure(ncols=2, width=4.2, height=3.2)
    import seaborn as sns

    for ax, col, label in zip(axes, ("flops", "seconds"), ("counted FLOPs per request", "wall seconds per request")):
        sns.stripplot(data=df, x="method", y=col, order=order, ax=ax, size=2.5, alpha=0.5, jitter=0.25,
                      log_scale=True)
        ax.set_xlabel("")
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=30)
    return fig


def plot_scaling(results: Results) -> Figure:
    """Certificate pass rate and mean ERASE FLOPs per deletion against n, with SISA's cost per deletion."""
    fig, axes = plotting.figure(ncols=2, width=4.2, height=3.2)
    sw = results.sweep
    for (eps, d), g in sw.groupby(["eps", "proj_dim"]):
        m = g.groupby("n").mean(numeric_only=True)
        label = f"eps={eps:g}, d'={d}"
        axes[0].plot(m.index, m["pass_rate"], marker="o", label=label)
        axes[1].plot(m.index, m["erase_mean_flops"], marker="o", label="ERASE " + label)
    s = sw.groupby("n")["sisa_mean_flops"].mean()
    axes[1].plot(s.index, s.values, "k--", label="SISA (per deletion)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("training points n")
    axes[0].set_ylabel("certificate pass rate")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("mean FLOPs per deletion")
    axes[0].legend()
    axes[1].legend(fontsize=7)
    return fig


def plot_holistic(results: Results) -> Figure:
    """Total FLOPs against deletion requests per query for ERASE + LLM and SISA fine-tuning, rho* marked."""
    h = results.holistic
    rho = np.logspace(-8, 1, 200)
    fig, (ax,) = plotting.figure(width=5.0, height=3.2)
    ax.plot(rho, h["icl"].total(rho, h["n_queries"]), label="ERASE + frozen LLM (k-shot prompts)")
    ax.plot(rho, h["sisa"].total(rho, h["n_queries"]), label=f"SISA fine-tuning (S={results.params.sisa_shards})")
    if 0 < h["rho_star"] < np.inf:
        ax.axvline(h["rho_star"], color="grey", ls=":", label=f"break-even rho* = {h['rho_star']:.2g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("unlearning requests per query  N_u / N_q")
    ax.set_ylabel(f"total FLOPs, N = {h['n_params']:.0e}, N_q = {h['n_queries']:.0e}")
    ax.legend()
    return fig


def glue_values(results: Results) -> dict[str, float]:
    """The numbers the page's prose quotes (glued into the text by myst-nb)."""
    rs = results.per_seed
    acc = accuracy_table(results)["mean"]
    pth = paths(results)
    ratios = np.array([cost_ratios(r) for r in rs])
    erase_scale, _ = scale_ratios(results.sweep, results.params)
    main = results.sweep[(results.sweep.eps == results.params.eps) & (results.sweep.proj_dim == results.params.proj_dim)]
    by_n = main.groupby("n")["pass_rate"].mean()
    h = results.holistic
    cert = pth.loc[[p for p in pth.index if p.startswith("certified")]]
    return {
        "acc_erase": float(acc["ERASE"]), "acc_random": float(acc["random-k"]),
        "acc_perclass": float(acc["per-class ERASE"]), "acc_ft": float(acc["FT"]), "acc_sisa": float(acc["SISA"]),
        "coverage": float(np.mean([r.coverage for r in rs])),
        "pass_rate": float(1.0 - pth["share"].get("recluster", 0.0)),
        "cert_checked": int(sum(r.exact_certified[1] for r in rs)),
        "recl_checked": int(sum(r.exact_recluster[1] for r in rs)),
        "flops_median_ratio": float(ratios[:, 0].mean()), "flops_mean_ratio": float(ratios[:, 1].mean()),
        "wall_ratio": float(ratios[:, 2].mean()),
        "cert_flops": float((cert["mean_flops"] * cert["share"]).sum() / max(cert["share"].sum(), 1e-12)),
        "recl_flops": float(pth["mean_flops"].get("recluster", float("nan"))),
        "recl_ms": float(pth["mean_ms"].get("recluster", float("nan"))),
        "cert_ms": float((cert["mean_ms"] * cert["share"]).sum() / max(cert["share"].sum(), 1e-12)),
        "sisa_flops": float(np.mean([np.mean(r.sisa_flops) for r in rs])),
        "sisa_ms": float(np.mean([1e3 * np.mean(r.sisa_seconds) for r in rs])),
        "scale_erase": float(np.mean(erase_scale)),
        "pass_rate_nmin": float(by_n.iloc[0]), "pass_rate_nmax": float(by_n.iloc[-1]),
        "n_min": int(by_n.index[0]), "n_max": int(by_n.index[-1]),
        "rho_star": float(h["rho_star"]),
        "queries_per_deletion": float(1.0 / h["rho_star"]) if h["rho_star"] > 0 else float("inf"),
        "icl_infer": float(h["icl"].infer), "sisa_infer": float(h["sisa"].infer),
        "sisa_unlearn_llm": float(h["sisa"].unlearn),
    }
