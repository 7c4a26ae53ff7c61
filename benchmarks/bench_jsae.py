"""Performance anchor of the JSAE paper: the efficient k x k Jacobian vs ``vmap(jacrev)``.

Setting (spec): 256 tokens, n = 512 latents, k = 8, MLP width m = 256, d = 64. Both routes are timed in
interleaved rounds (``companion.bench.compare``, CPU time) and only their ratio is printed; the secondary
ratio is the cost of one JSAE training step relative to one traditional SAE-pair step (target <= 2), on
the same batches and optimiser. Writes ``data/bench/jsae.json``.
Run: ``.venv/bin/python benchmarks/bench_jsae.py``.
"""

from __future__ import annotations

import numpy as np
import torch

from companion import bench, runtime
from companion.models.topk_sae import TopKSAE, constrained_step
from companion.papers.jsae import experiment as ex

TOKENS, N, K, M, D, BATCH = 256, 512, 8, 256, 64, 512
TARGET_STEP = 2.0


def setup(gen: torch.Generator) -> tuple[ex.Mlp, TopKSAE, TopKSAE, torch.Tensor]:
    """A random GELU MLP, two TopK SAEs and a batch of MLP inputs."""
    mlp = ex.Mlp(torch.randn(D, M, generator=gen) / D**0.5, torch.zeros(M),
                   torch.randn(M, D, generator=gen) / M**0.5, torch.zeros(D))
    return mlp, TopKSAE(D, N, K, gen), TopKSAE(D, N, K, gen), torch.randn(4096, D, generator=gen)


def main() -> None:
    """Print the Jacobian speed-up and the JSAE/SAE training-step cost ratio."""
    runtime.limit_threads()
    mlp, sae_x, sae_y, xs = setup(torch.Generator().manual_seed(0))
    x = xs[:TOKENS]
    with torch.no_grad():
        s_x, idx_x = sae_x.encode(x)
        x_hat = sae_x.decode(s_x)
        idx_y = sae_y.encode(mlp(x))[1]

    def fast() -> torch.Tensor:
        with torch.no_grad():
            return ex.active_jacobian(sae_x, sae_y, mlp, x_hat, idx_x, idx_y)

    def naive() -> torch.Tensor:
        return ex.naive_jacobian(sae_x, sae_y, mlp, s_x, idx_x, idx_y).detach()

    err = float((fast() - naive()).abs().max())
    speed = bench.compare({"efficient": fast, "jacrev": naive}, "efficient", rounds=5, clock="cpu")["jacrev"]
    print(f"efficient J vs vmap(jacrev) ({TOKENS} tokens, n={N}, k={K}, m={M}; max |diff| {err:.1e}):")
    print("  " + speed.line())

    rng = np.random.default_rng(0)
    ys = mlp(xs).detach()
    dphi = mlp.dphi(xs)  # as train_pair does: phi'(x) once per token
    opt = torch.optim.Adam([*sae_x.parameters(), *sae_y.parameters()], lr=1e-3)

    def step(lam: float) -> None:
        idx = torch.from_numpy(rng.integers(0, len(xs), size=BATCH))
        opt.zero_grad(set_to_none=True)
        ex.pair_loss(sae_x, sae_y, mlp, xs[idx], ys[idx], lam, dphi=dphi[idx]).backward()
        constrained_step([sae_x, sae_y], opt)

    steps = bench.compare({"SAE pair step": lambda: step(0.0), "JSAE step": lambda: step(1.0)},
                          "SAE pair step", rounds=31, warmup=3, clock="cpu")
    print(f"training step, batch {BATCH}:")
    print("  " + steps["JSAE step"].line(TARGET_STEP))
    path = bench.record("jsae", steps["JSAE step"], target=TARGET_STEP, extra={"jacrev/efficient J": speed},
                        values={"max |efficient J - jacrev J|": err},
                        sizes={"tokens": TOKENS, "n": N, "k": K, "m": M, "d": D, "batch": BATCH})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
