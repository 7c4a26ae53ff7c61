"""Self-Consuming Generative Models with Adversarially Curated Data (Wei & Zhang, ICML 2025).

arXiv: https://arxiv.org/abs/2505.09768 (PMLR 267); official code: osu-srml/Adversarial-Curation
(no licence file: read, not copied).

Reproduced at small scale on the paper's Gaussian-8 toy:

- Part A, exact population dynamics on a grid (:mod:`.dynamics`): users keep one of K samples by a
  Luce (Bradley-Terry) choice, a fraction phi of curators is malicious, and the model is refitted
  (unrestricted maximum likelihood) on curated data mixed with real data. The covariance identity,
  its corollaries and the deterministic consequences of the derived kernel (the phi = 1/2 cliff of
  the anti-aligned adversary at K = 2, the real-data bounds) are checks; the finding is the
  ``rotated`` adversary (the reward of another mode, partially correlated with the users'), whose
  covariance with the genuine reward is not fixed by construction.
- Part B, the sample-based self-consuming loop (:mod:`.loop`): the rival platform learns its curation
  reward (Bradley-Terry on RBF features, Newton; checked against scikit-learn) from pairwise labels an
  attacker corrupts at equal budgets (:mod:`.attacks`: random flips, the model-free reward-model-gap
  flips of the official ``attack_dist``, influence-function flips), curates K-wise tournaments and
  refits a KDE or Gaussian-mixture density. The influence attack's findings are judged against the
  gap and random attacks by the same test.

This module holds the declarations; the experiment (:mod:`.experiment`) and the figures
(:mod:`.plots`) load on first use. The paper's DDPM is replaced by a KDE / GMM (a CPU-sized density
model; the curation and attack logic do not depend on it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from companion.claims import Claim
from companion.contract import exports
from companion.params import BaseParams, ParamError, param

SLUG = "adversarial-curation"
ATTACKS = ("none", "random", "gap", "gap_true", "influence", "influence_alpha0.8")
BELOW_HALF = (0.1, 0.3)  # phi values of the anti-aligned threshold checks, below 1/2
ABOVE_HALF = (0.6, 0.8)  # ... and above 1/2
ROTATED_PHI = 0.8  # the rotated-adversary finding's malicious fraction
ROTATED_CONTROL_PHI = 0.1  # ... and its small-phi control
CLAIM_BUDGET = 0.25  # the budget at which the attacks are compared
ANCHOR_LAMBDA = "1"  # the real-data anchoring checks' lam
PAPER_PRESET = ("no real-weights preset: the paper's DDPM on Gaussian-8 and its CIFAR-10 experiment need a GPU "
                "and downloads; `paper` is the largest synthetic setting of this page (more seeds, rounds and "
                "grid points than full)")


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of both parts; defaults are the quick preset."""

    seeds: int = param(4, lo=3, hi=64, help="number of seeds of the sample-based loop (Part B)")
    grid_G: int = param(32, lo=16, hi=64, help="Part A: grid points per axis on [-3.2, 3.2]^2")
    K_list: tuple[str, ...] = param(("2", "inf"), help="Part A: tournament sizes, integers >= 2 or inf")
    phi_grid: tuple[float, ...] = param((0.0, 0.1, 0.3, 0.4, 0.5, 0.6, 0.8), lo=0.0, hi=0.95,
                                        help="Part A: malicious fractions phi")
    phi_aligned: tuple[float, ...] = param((0.1, 0.3, 0.5, 0.7, 0.9), lo=0.0, hi=0.95,
                                           help="Part A: phi values of the aligned-noise robustness check")
    lambda_list: tuple[str, ...] = param(("inf", "1"), help="Part A: synthetic-data weights lam > 0 or inf")
    T_exact: int = param(30, lo=5, hi=300, help="Part A: rounds of the grid dynamics")
    gamma_reward: float = param(1.5, lo=0.2, hi=10.0,
                                help="reward scale: r(x) = -gamma |x - x*| (the official toy uses 10 with the clamp)")
    reward_form: str = param("distance", choices=("distance", "clamp"),
                             help="distance, or the official clamp -gamma max(0, |x - x*| - r_min)")
    r_min: float = param(3.0, lo=0.0, hi=3.0,
                         help="radius of the clamp-form reward's plateau (official: 3, with gamma = 10)")
    s_mode_grid: float = param(0.3, lo=0.05, hi=0.5, help="Part A: mode std of the grid data density")
    s_mode: float = param(0.25, lo=0.05, hi=0.5, help="Part B: mode std of the Gaussian-8 data")
    noise_amp: float = param(0.7, lo=0.0, hi=3.0, help="aligned-noisy adversary: r + noise_amp * smooth field")
    mc_draws: int = param(4000, lo=200, hi=100000, help="Part A, finite K > 2: Monte-Carlo draws per round")
    N_samples: int = param(1500, lo=500, hi=100000, help="Part B: samples per round")
    N_pairs: int = param(800, lo=200, hi=50000, help="Part B: labelled preference pairs per round")
    K_curate: int = param(4, lo=2, hi=64, help="Part B: entrants per curation tournament")
    keep: float = param(0.5, lo=0.05, hi=1.0,
                        help="Part B, official curation: share of the samples kept (softmax sampling without "
                             "replacement; the official toy keeps 25,000 of 50,000)")
    T_loop: int = param(8, lo=3, hi=100, help="Part B: retraining rounds")
    density_model: str = param("kde", choices=("kde", "gmm"), help="Part B: density model refitted each round")
    kde_h: float = param(0.1, lo=0.01, hi=0.5, help="Part B: KDE jitter std h")
    lambda_loop: str = param("inf", help="Part B: synthetic-data weight lam > 0 or inf (inf: no real data)")
    attacks: tuple[str, ...] = param(("none", "random", "gap", "influence"), choices=ATTACKS,
                                     help="Part B: attacks (none = clean loop; gap ranks by the reward model's gap, "
                                          "as the official attack_dist; gap_true by the genuine reward's)")
    budgets: tuple[float, ...] = param((0.1, 0.25), lo=0.0, hi=0.49, help="Part B: fractions of labels flipped")
    alpha: float = param(1.0, lo=0.0, hi=1.0,
                         help="influence attack: weight of the covariance term; 1 - alpha weighs +mean (r - r_hat)^2, "
                              "which the attacker minimises too (it pulls r_hat towards r)")
    rank_by: str = param("signed", choices=("signed", "abs"),
                         help="influence attack: signed predicted decrease, or |change| as the official code")
    l2_reward: float = param(1e-2, lo=1e-6, hi=10.0, help="L2 weight of the BT reward fit")
    rbf_grid: int = param(5, lo=2, hi=12, help="RBF centres per axis of the reward features")
    rbf_bw: float = param(1.2, lo=0.1, hi=5.0, help="RBF bandwidth")
    anchor_n: int = param(20000, lo=1000, hi=500000, help="grid-vs-samples check: samples per round")
    anchor_rounds: int = param(5, lo=1, hi=30, help="grid-vs-samples check: rounds compared")
    anchor_seeds: int = param(10, lo=1, hi=64, help="grid-vs-samples check: seeds of the sample loop (cheap)")

    PRESETS = {
        "full": {"seeds": 10, "grid_G": 50, "K_list": ("2", "4", "inf"),
                 "phi_grid": tuple(round(0.05 * i, 2) for i in range(19)),
                 "lambda_list": ("inf", "4", "1", "0.25"), "T_exact": 60, "mc_draws": 1000, "N_samples": 5000,
                 "N_pairs": 2000, "T_loop": 20, "density_model": "gmm",
                 "attacks": ("none", "random", "gap", "influence", "influence_alpha0.8"),
                 "budgets": (0.05, 0.1, 0.2, 0.25, 0.4), "anchor_seeds": 20},
        # no real-weights preset (see PAPER_PRESET): `paper` is the largest synthetic setting
        "paper": {"seeds": 20, "grid_G": 64, "K_list": ("2", "4", "inf"),
                  "phi_grid": tuple(round(0.05 * i, 2) for i in range(19)),
                  "lambda_list": ("inf", "4", "1", "0.25"), "T_exact": 100, "N_samples": 10000,
                  "N_pairs": 4000, "T_loop": 30, "density_model": "gmm",
                  "attacks": ("none", "random", "gap", "influence", "influence_alpha0.8"),
                  "budgets": (0.05, 0.1, 0.2, 0.25, 0.4), "anchor_seeds": 20},
    }

    def __post_init__(self) -> None:
        for k in self.K_list:
            if k != "inf" and not (k.isdigit() and int(k) >= 2):
                raise ParamError(f"parameter 'K_list': value {k!r}; allowed: integers >= 2 or inf")
        for name in ("lambda_list", "lambda_loop"):
            values = getattr(self, name)
            for v in (values,) if isinstance(values, str) else values:
                if not _positive_or_inf(v):
                    raise ParamError(f"parameter {name!r}: value {v!r}; allowed: a number > 0 or inf")
        needs = {
            "K_list": ("2" in self.K_list, "must contain 2 (the threshold claim is at K = 2)"),
            "phi_grid": (all(_has(self.phi_grid, v) for v in (*BELOW_HALF, 0.5, *ABOVE_HALF)),
                         "must contain 0.1, 0.3, 0.5, 0.6 and 0.8 (the threshold and rotated claims)"),
            "lambda_list": ("inf" in self.lambda_list and ANCHOR_LAMBDA in self.lambda_list,
                            "must contain inf and 1 (the threshold and anchoring claims)"),
            "attacks": ({"none", "random", "gap", "influence"} <= set(self.attacks),
                        "must contain none, random, gap and influence (the attack claims and their controls)"),
            "budgets": (_has(self.budgets, CLAIM_BUDGET), "must contain 0.25 (the attack claims)"),
            "anchor_rounds": (self.anchor_rounds <= self.T_exact, "must be <= T_exact"),
        }
        for name, (ok, why) in needs.items():
            if not ok:
                raise ParamError(f"parameter {name!r}: value {getattr(self, name)!r}; allowed: {why}")



def _positive_or_inf(text: str) -> bool:
    """Whether ``text`` is ``inf`` or a positive finite number."""
    try:
        v = float(text)
    except ValueError:
        return False
    return text == "inf" or (math.isfinite(v) and v > 0)


def _has(values: tuple[float, ...], v: float) -> bool:
    """Whether ``v`` is among ``values`` (to 1e-9)."""
    return any(abs(x - v) < 1e-9 for x in values)


CLAIMS = [
    # Part A: findings on the rotated adversary, whose covariance with the genuine reward is not fixed
    Claim("rotated-reverses", "Part A, K = 2, lam = inf, rotated adversary (the reward of the mode at 90 deg) at "
          "phi = 0.8: E_T[r] - E_0[r] (computed once, deterministic); controls: the aligned-noisy adversary at the "
          "same phi (its covariance stays >= 0), the rotated adversary at phi = 0.1",
          "a negatively co-varying adversary reverses alignment once phi is large enough (no number)",
          0.0, "<=", kind="exact", controls=("aligned-noisy", "phi-0.1")),
    # Part A: the algebra of the derived kernel (identity, corollaries, deterministic consequences)
    Claim("identity", "Part A: the measured one-step change of E[e^r] equals the covariance formula "
          "(1-phi) Cov(e^r, H_r) + phi Cov(e^r, H_adv) (plus the real-data term) in every round of every "
          "setting (max abs error)", "derived here from the paper's curation model; theorem constants not read",
          1e-10, "<=", kind="exact", role="check"),
    Claim("aligned-cov", "Part A, aligned-noisy adversary (r + noise), lam = inf, every phi, K in {2, inf}: the "
          "sufficient condition Cov_p(e^r, H_adv) >= 0 holds in every round (min over rounds)",
          "non-negative covariance keeps retraining aligned (robustness result)", 0.0, ">=", kind="exact",
          role="check"),
    Claim("aligned-monotone", "Part A, same runs: the genuine E[e^r] never decreases (min one-step change, "
          "rounding allowance 1e-12; a corollary of aligned-cov through the identity)",
          "expected genuine reward increases under aligned curation", -1e-12, ">=", kind="exact", role="check"),
    Claim("anti-below-half", "Part A, K = 2, anti-aligned adversary, lam = inf: for phi in {0.1, 0.3} the final "
          "mass within 0.9 of x* is >= 0.95 (min over the two; the kernel is 2 phi + (1 - 2 phi) H_r)",
          "phi < 1/2 stays aligned (spec prototype 1.000 / 0.999)", 0.95, ">=", kind="exact", role="check"),
    Claim("anti-half-frozen", "Part A, K = 2, anti, phi = 1/2: the model does not move, max |p_T - p_0| "
          "(H_r + H_-r = 2)", "phi = 1/2 is the threshold (spec prototype 7.5e-17)", 1e-12, "<=", kind="exact",
          role="check"),
    Claim("anti-above-half", "Part A, K = 2, anti, lam = inf: for phi in {0.6, 0.8} the final mass near x* "
          "is <= 0.05 (max over the two)", "phi > 1/2 is driven to the worst region (spec prototype 0.000 / 0.000)",
          0.05, "<=", kind="exact", role="check"),
    Claim("anti-above-half-reward", "Part A, same runs: E_T[r] - E_0[r] < 0 (max over phi in {0.6, 0.8})",
          "the genuine reward decreases (spec prototype -3.87 -> -6.23 / -7.18)", 0.0, "<=", kind="exact",
          role="check"),
    Claim("anchor-tv", "Part A, lam = 1, anti adversary, every phi and K: TV(p_t, p_data) <= lam/(1+lam) = 0.5 "
          "in every round (max over rounds and runs; holds by construction of the refit)",
          "real data keeps the model anchored", 0.5 + 1e-12, "<=", kind="exact", role="check"),
    Claim("anchor-reward", "Part A, same runs: E_{p_t}[e^r] / (E_{p_data}[e^r] / 2) >= 1 in every round "
          "(min; holds by construction of the refit)", "real data keeps the model anchored", 1.0, ">=",
          kind="exact", role="check"),
    Claim("bt-newton-sklearn", "Part B: the Newton BT fit equals scikit-learn's LogisticRegression "
          "(max abs coefficient difference on one round of pairs)", "reference implementation", 1e-4, "<=",
          kind="exact", role="check"),
    Claim("grid-matches-samples", "the K = 2 grid dynamics is the sample loop's limit: per seed of a KDE loop "
          "curated with the true reward (N = anchor_n), max over rounds 0..anchor_rounds of |E[r] - grid E[r]|",
          "spec prototype: seed-mean trajectory within 0.03", 0.05, "<=", role="check"),
    Claim("cov-sign", "Part B: sign(Cov_samples(e^r, e^r_hat)) = sign(change of mean e^r) in the rounds with "
          "|change| > 0.01, all attacks and budgets (share per seed; the sample version of the identity)",
          "covariance sign governs alignment (spec prototype 120/120)", 0.9, ">=", role="check"),
    Claim("clean-improves", "Part B, clean loop: final E[r] - initial E[r] (the precondition of the attack "
          "comparison)", "curation with genuine preferences raises the reward (Ferbach et al.)", 0.0, ">=",
          role="check"),
    # Part B: the attack findings, each against the model-free gap attack and random flips at equal budget
    Claim("influence-below-initial", "Part B, budget 0.25: final E[r] under the influence attack - initial E[r] "
          "(paired per seed); controls: the same for the model-free gap attack (flips the pairs with the largest "
          "clean reward-model gap, the official attack_dist) and for random flips, same number of flips",
          "targeted attacks misalign the model (spec prototype -4.68 vs initial -3.88)", 0.0, "<=",
          controls=("gap", "random")),
    Claim("influence-vs-random", "Part B, budget 0.25: final E[r] influence - random (paired); control: the "
          "model-free gap attack - random", "targeted attacks misalign far more than random flips at equal budget "
          "(spec prototype -4.68 vs -0.85)", -2.0, "<=", controls=("gap",)),
    Claim("random-robust", "Part B, budget 0.25: final E[r] of random flips - clean final E[r] (paired); "
          "control: the gap attack's flips, same number", "random flips barely hurt (spec prototype -0.85 vs "
          "-0.66)", -0.5, ">=", controls=("gap",)),
    # Part B on the official curation (softmax sampling of a share without replacement) and the official alpha
    Claim("official-below-initial", "Part B, official curation (keep a share of the samples, drawn without "
          "replacement with probability proportional to exp(r_hat)), budget 0.25: final E[r] under the influence "
          "attack with the official alpha = 0.8 - initial E[r]; controls: gap and random flips, same curation "
          "and number of flips", "targeted attacks misalign the model (no number for the toy)", 0.0, "<=",
          controls=("gap", "random")),
    Claim("official-vs-random", "Part B, official curation, budget 0.25: final E[r] influence (alpha = 0.8) - "
          "random (paired); control: gap - random", "targeted attacks misalign far more than random flips at "
          "equal budget (bar as influence-vs-random)", -2.0, "<=", controls=("gap",)),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "claim_values", "Results", "final_rewards", "threshold_table",
                   "attack_table", "rotated_table", "sklearn_bt"),
    "plots": ("plot_threshold", "plot_trajectories", "plot_densities", "plot_loop_rewards", "plot_cov_sign",
              "plot_grid_vs_samples"),
})
