"""Performance anchor of flat-influence: inverse-Hessian-vector solvers at equal accuracy.

At the quick preset's size (P = 837, n_val = 200, N = 600 training gradients) the damped
validation curvature ``(G + lam I)^{-1} g_z`` is solved for all N gradients three ways: exact (one
eigendecomposition, reused), LiSSA and conjugate gradients (Gauss-Newton-vector products batched
over the N right-hand sides). The Gauss-Newton matrix is used because LiSSA needs a PSD operator;
the iterative solvers run the fewest iterations (from a grid) that reach cosine >= 0.99 and
relative error <= 5 % to the exact solution for every gradient. Anchor: t(LiSSA) / t(exact), CPU
time, expected >= 5. Also measured: the per-size cost of both at hidden 16-96, and the parameter
count where the exact solver's P^3 would overtake LiSSA (power-law fits, extrapolated).
"""

from __future__ import annotations

import numpy as np
import torch

from companion import bench, runtime
from companion.papers import flat_influence as paper
from companion.papers.flat_influence import curvature as C
from companion.papers.flat_influence.experiment import synthetic_setup, validation_minimum

DAMPING = 1e-3


def problem(hidden: int):
    """theta~ (SAM on 200 validation points), the validation GGN operator and the N training gradients."""
    p = paper.Params.resolve("quick", hidden=hidden)
    su = synthetic_setup(p, 0)
    theta, _ = validation_minimum(p, su, p.n_val, "sam", 0)
    Xv = su.x_val[:p.n_val]
    G = C.per_sample_grads(su.net, theta, su.x_train, su.y_train)
    return su.net, theta, Xv, G


def exact_solve(net, theta, Xv, G):
    """GGN, eigendecomposition, and the damped solve of every gradient."""
    return C.DampedInverse.of(C.ggn(net, theta, Xv), DAMPING).solve(G)


def lissa_solve(net, theta, Xv, G, iters: int):
    """Power iteration for the scale, then batched LiSSA on GGN-vector products."""
    mv = C.ggn_vp_fn(net, theta, Xv)
    lam = C.power_lambda_max(mv, net.n_params, torch.Generator().manual_seed(0), iters=50)
    return C.lissa(mv, G.T.contiguous(), DAMPING, 1.1 * (lam + DAMPING), iters).T


def cg_solve(net, theta, Xv, G, iters: int):
    """Batched conjugate gradients on GGN-vector products."""
    return C.conjugate_gradient(C.ggn_vp_fn(net, theta, Xv), G.T.contiguous(), DAMPING, iters, tol=0.0).T


def accurate(X: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """Worst cosine and worst relative error over the right-hand sides."""
    cos = float(C.cosine_rows(X.T, ref.T).min())
    rel = float(((X - ref).norm(dim=1) / ref.norm(dim=1)).max())
    return cos, rel


def fewest(solve, ref, grid) -> tuple[int, float, float]:
    """The smallest iteration count of ``grid`` reaching cosine >= 0.99 and relative error <= 0.05."""
    for it in grid:
        cos, rel = accurate(solve(it), ref)
        if cos >= 0.99 and rel <= 0.05:
            return it, cos, rel
    raise RuntimeError("no iteration count in the grid reached the accuracy bar")


def main() -> None:
    runtime.limit_threads(1)
    net, theta, Xv, G = problem(32)
    ref = exact_solve(net, theta, Xv, G)
    it_l, cos_l, rel_l = fewest(lambda k: lissa_solve(net, theta, Xv, G, k), ref, (10, 20, 50, 100, 200, 500, 1000))
    it_c, cos_c, rel_c = fewest(lambda k: cg_solve(net, theta, Xv, G, k), ref, (2, 5, 10, 20, 50, 100))
    print(f"P={net.n_params}, N={len(G)}, n_val={len(Xv)}, damping={DAMPING}: LiSSA needs {it_l} iterations "
          f"(cos {cos_l:.4f}, rel err {rel_l:.3f}), CG {it_c} (cos {cos_c:.4f}, rel err {rel_c:.3f})")
    comp = bench.compare({"exact": lambda: exact_solve(net, theta, Xv, G),
                          "lissa": lambda: lissa_solve(net, theta, Xv, G, it_l),
                          "cg": lambda: cg_solve(net, theta, Xv, G, it_c)},
                         reference="exact", rounds=7, clock="cpu")
    for c in comp.values():
        print(c.line())
    # scaling: exact (P^3 eigendecomposition) vs LiSSA per iteration (linear in P)
    rows = []
    for h in (16, 32, 64, 96):
        n2, t2, X2, G2 = problem(h)
        size = bench.compare({"exact": lambda: exact_solve(n2, t2, X2, G2),
                              "lissa x5": lambda: lissa_solve(n2, t2, X2, G2, 5)},
                             reference="exact", rounds=3, warmup=0, clock="cpu")["lissa x5"]
        t_ex, t_it = size.reference_seconds, size.seconds / 5
        rows.append((n2.n_params, t_ex, t_it))
        print(f"hidden={h:3d} P={n2.n_params:5d}: exact {t_ex:.3f} s, LiSSA {t_it * 1e3:.1f} ms/iteration "
              f"-> {it_l} iterations {t_it * it_l:.2f} s")
    P, te, ti = (np.array(v, dtype=float) for v in zip(*rows))
    ae, be = np.polyfit(np.log(P[1:]), np.log(te[1:]), 1)  # exponent, log-constant (largest three sizes)
    al, bl = np.polyfit(np.log(P[1:]), np.log(ti[1:] * it_l), 1)
    crossover = float(np.exp((bl - be) / (ae - al))) if ae > al else float("inf")
    print(f"fitted exponents: exact P^{ae:.2f}, LiSSA P^{al:.2f}; exact becomes slower than {it_l}-iteration "
          f"LiSSA at P ~ {crossover:,.0f} (extrapolated)")
    path = bench.record("flat-influence", comp["lissa"], target=5.0, direction=">=",
                        sizes={"P": net.n_params, "N_rhs": len(G), "n_val": len(Xv), "damping": DAMPING,
                               "lissa_iters": it_l, "cg_iters": it_c, "lissa_cos": round(cos_l, 5),
                               "cg_cos": round(cos_c, 5), "exact_exponent": round(float(ae), 2),
                               "lissa_exponent": round(float(al), 2), "crossover_P": round(crossover),
                               "scaling": [[int(a), round(b, 4), round(c, 5)] for a, b, c in rows]},
                        extra={"cg": comp["cg"]})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
