"""Performance anchor of win-rate: the closed-form WRO optimum vs iterative exact-gradient ascent.

Setting (spec): one prompt, K = 12 responses, BT preferences, h = id, beta = 0.1. The closed form
``p_ref exp(R_h / beta) / Z`` and exact-gradient ascent on the logits (run until max |grad| < 1e-12) are
timed in interleaved rounds (CPU time); both must agree to TV < 1e-6. Secondary (spec): one E4 run of
100 REINFORCE steps (batch 32) vs 100 full-batch exact-gradient steps on the quick E4 instance.
Run: ``.venv/bin/python benchmarks/bench_win_rate.py`` (writes data/bench/win-rate.json).
"""

from __future__ import annotations

import numpy as np

from companion import bench, runtime
from companion.papers.win_rate import policy_gradient as pg, wro
from companion.papers.win_rate.preferences import (CLIP, H_FUNCTIONS, contextual_instance, h_reward,
                                                   tabular_instance, tv, win_vector)

K, BETA, H = 12, 0.1, "id"


def main() -> None:
    """Print the closed-form / gradient-ascent ratio (and the E4 per-run ratio) and record them."""
    runtime.limit_threads()
    _, p_ref, P = tabular_instance(np.random.default_rng(0), K, 1.0)
    R = h_reward(P, p_ref, H)
    p_closed = wro.closed_form_optimum(p_ref, R, BETA)
    p_iter, iters = wro.gradient_ascent(p_ref, R, BETA)
    print(f"K={K} h={H} beta={BETA}: gradient ascent took {iters} steps; TV to the closed form {tv(p_closed, p_iter):.1e}")
    anchor = bench.compare({"ours": lambda: wro.closed_form_optimum(p_ref, R, BETA),
                            "reference": lambda: wro.gradient_ascent(p_ref, R, BETA)},
                           reference="reference", rounds=7, clock="cpu")["ours"]
    print("closed form / gradient ascent:", anchor.line())

    rng = np.random.default_rng(1)
    phi, _, q, PX = contextual_instance(rng, 64, 6, 16)
    log_ref = np.log(q)
    hP = H_FUNCTIONS["logit"](np.clip(PX, CLIP, 1 - CLIP))[None]
    RX = win_vector(hP, q)
    one, beta, lr = np.zeros(1, int), np.array([0.1]), np.array([0.1])
    e4 = bench.compare({"reinforce": lambda: pg.train_reinforce(phi, log_ref, hP, one, beta, lr, 32, 100, rng),
                        "exact": lambda: pg.ascend_exact(phi, log_ref, RX, beta, 100, 0.1)},
                       reference="exact", rounds=7, clock="cpu")["reinforce"]
    print("E4 run, REINFORCE / exact gradient (100 steps):", e4.line())
    path = bench.record("win-rate", anchor, target=0.01, direction="<=",
                        sizes={"K": K, "beta": BETA, "h": H, "ascent_steps": iters,
                               "e4": {"X": 64, "d": 6, "K": 16, "steps": 100, "batch": 32}},
                        extra={"e4_reinforce_vs_exact": e4})
    print(f"wrote {path.name}")


if __name__ == "__main__":
    main()
