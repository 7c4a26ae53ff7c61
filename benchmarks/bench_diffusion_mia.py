"""Performance anchor of diffusion-mia: network evaluations and time per image of each attack.

A digits epsilon-MLP (h = 128, 3 blocks) attacked on 200 images (100 members, 100 non-members), all
images in one batch. ReDiffuse at the claims' operating point (n = 10, t = 100, k = 50: n t / k = 20
evaluations per image) is timed against PIA (2 evaluations), interleaved (``companion.bench.compare``,
CPU time); SecMI (12) and Loss (1) as extra ratios. The spec expects about 10 : 1 for ReDiffuse : PIA,
since evaluations dominate. Writes ``data/bench/diffusion-mia.json``.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from companion import bench, runtime
from companion.papers import diffusion_mia as dm
from companion.papers.diffusion_mia import attacks as atk
from companion.papers.diffusion_mia.ddpm import Diffusion, mlp_eps_fn, train_ddpm


def main(n: int = 100, steps: int = 3000, rounds: int = 7) -> None:
    """Train the quick model once, then time every attack per image and count its evaluations."""
    runtime.limit_threads(1)
    diffusion = Diffusion()
    mem, non, _ = dm.digits_split(n, np.random.default_rng(0))
    start = time.process_time()
    model, _ = train_ddpm(mem, diffusion, hidden=128, blocks=3, steps=steps, batch=128, lr=1e-3, seed=0)
    train_s = time.process_time() - start
    x = torch.cat([mem, non])
    g = torch.Generator().manual_seed(0)
    eps = mlp_eps_fn(model)
    fns = {
        "ReDiffuse": lambda e=eps: atk.attack_rediffuse(atk.variation_api(e, diffusion, 100, 50, g), x, 10),
        "PIA": lambda e=eps: atk.attack_pia(e, diffusion, x, 200),
        "SecMI": lambda e=eps: atk.attack_secmi(e, diffusion, x, 100, 10),
        "Loss": lambda e=eps: atk.attack_loss(e, diffusion, x, 200, 1, g),
    }
    evals = {}
    for name, fn in fns.items():
        counter = atk.CountingEps(eps)
        fn(counter)
        evals[name] = counter.rows / len(x)
    out = bench.compare(fns, "PIA", rounds=rounds, warmup=1, clock="cpu")
    rd, sec, loss = out["ReDiffuse"], out["SecMI"], out["Loss"]
    print(f"evaluations per image: {evals}; training {train_s:.1f} s CPU for {steps} steps")
    print("  " + rd.line(15.0, "<="))
    print("  " + sec.line(9.0, "<="))
    print("  " + loss.line(1.0, "<="))
    attack_total = sum(c.seconds for c in out.values()) + rd.reference_seconds
    path = bench.record("diffusion-mia", rd, target=15.0, direction="<=",
                        extra={"SecMI/PIA": sec, "Loss/PIA": loss},
                        targets={"SecMI/PIA": (9.0, "<="), "Loss/PIA": (1.0, "<=")},
                        values={**{f"evaluations per image, {k}": v for k, v in evals.items()},
                                "ms per image, ReDiffuse": 1e3 * rd.seconds / len(x),
                                "ms per image, PIA": 1e3 * rd.reference_seconds / len(x),
                                "all four attacks / training time": attack_total / train_s},
                        sizes={"images": len(x), "hidden": 128, "blocks": 3, "n": 10, "t": 100, "k": 50,
                               "train_steps": steps})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
