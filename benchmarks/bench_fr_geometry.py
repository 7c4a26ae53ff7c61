"""Performance anchor of fr-geometry: the vectorised alignment energy vs a naive double loop, and stage timings.

(a) The kNN energy of one field at C = 200, D = 32: one matrix product for all points
(:func:`energy.energy`) against the double loop over (i, j) (:func:`energy.energy_loop`); target >= 50x.
(b) One evaluation pass of the quick setting (8 identities x 7 attributes x C = 30 stencils): the
energy computation against rendering plus embedding the stencil images; target <= 0.05.
Both interleaved by ``companion.bench.compare`` (CPU time); writes ``data/bench/fr-geometry.json``.
"""

from __future__ import annotations

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from companion import bench
from companion.papers.fr_geometry import Params, embedder, experiment
from companion.papers.fr_geometry import energy as en


def main(C: int = 200, D: int = 32, rounds: int = 7) -> None:
    """Time the two comparisons and record them."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    P, V = rng.normal(size=(C, D)), rng.normal(size=(C, D)) + 0.5 * rng.normal(size=D)
    err = abs(en.energy(P, V) - en.energy_loop(P, V))
    loop = bench.compare({"vectorised": lambda: en.energy(P, V), "double loop": lambda: en.energy_loop(P, V)},
                         "vectorised", rounds=rounds, clock="cpu")["double loop"]
    print(f"C={C} D={D} k=10; |vectorised - loop| = {err:.1e}")
    print("  " + loop.line(50.0, ">="))
    # one evaluation pass of the quick setting
    cfg = Params.resolve("quick")
    torch.manual_seed(0)
    model = embedder.FaceCNN(cfg.width, cfg.emb_dim)
    from companion.papers.fr_geometry import faces

    ids = faces.sample_identities(cfg.n_test_ids, rng)
    idx = np.arange(cfg.energy_ids)
    imgs = experiment.stencil_images(cfg, ids, idx, cfg.stencil_h, np.random.default_rng(1))
    E = embedder.embed(model, imgs.reshape(-1, 32, 32, 3)).reshape(*imgs.shape[:4], -1)

    def render_embed() -> None:
        im = experiment.stencil_images(cfg, ids, idx, cfg.stencil_h, np.random.default_rng(1))
        embedder.embed(model, im.reshape(-1, 32, 32, 3))

    stage = bench.compare({"render + embed": render_embed,
                           "energy": lambda: experiment.energies_of(cfg, E, cfg.stencil_h, ("knn",))},
                          "render + embed", rounds=rounds, clock="cpu")["energy"]
    print(f"  {stage.line(0.05, '<=')}  ({imgs.shape[0] * imgs.shape[1] * 3 * cfg.C} images)")
    path = bench.record("fr-geometry", loop, target=50.0, direction=">=", extra={"energy / (render + embed)": stage},
                        targets={"energy / (render + embed)": (0.05, "<=")},
                        values={"|vectorised - loop| energy": float(err)},
                        sizes={"C": C, "D": D, "k": 10, "eval_ids": cfg.energy_ids, "eval_C": cfg.C, "attributes": 7})
    print(f"wrote {path}")


if __name__ == "__main__":
    with threadpool_limits(1):  # one BLAS thread: CPU time of idle-spinning BLAS threads would count too
        main()
