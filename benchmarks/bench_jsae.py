"""Performance anchor of the JSAE paper: the efficient k x k Jacobian vs ``vmap(jacrev)``.

Setting (spec): 256 tokens, n = 512 latents, k = 8, MLP width m = 256, d = 64. Both routes are timed in
the same run (median CPU time of repeats) and only their ratio is printed; the secondary ratio is the cost of
one JSAE training step relative to one traditional SAE-pair step.
Run: ``.venv/bin/python benchmarks/bench_jsae.py``.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from companion import runtime
from companion.models.topk_sae import TopKSAE, constrained_step
from companion.runtime import median_time
from companion.papers import jsae

TOKENS, N, K, M, D = 256, 512, 8, 256, 64


def setup(gen: torch.Generator) -> tuple[jsae.Mlp, TopKSAE, TopKSAE, torch.Tensor]:
    """A random GELU MLP, two TopK SAEs and a batch of MLP inputs."""
    mlp = jsae.Mlp(torch.randn(D, M, generator=gen) / D**0.5, torch.zeros(M),
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
            return jsae.active_jacobian(sae_x, sae_y, mlp, x_hat, idx_x, idx_y)

    def naive() -> torch.Tensor:
        return jsae.naive_jacobian(sae_x, sae_y, mlp, s_x, idx_x, idx_y).detach()

    err = float((fast() - naive()).abs().max())
    t_fast, t_naive = median_time(fast, 21, clock=time.process_time), median_time(naive, 3, clock=time.process_time)
    print(f"efficient J vs vmap(jacrev): speed-up {t_naive / t_fast:.0f}x "
          f"({TOKENS} tokens, n={N}, k={K}, m={M}; max |diff| {err:.1e})")

    rng = np.random.default_rng(0)
    ys = mlp(xs).detach()
    opt = torch.optim.Adam([*sae_x.parameters(), *sae_y.parameters()], lr=1e-3)

    def step(lam: float) -> None:
        idx = torch.from_numpy(rng.integers(0, len(xs), size=512))
        opt.zero_grad(set_to_none=True)
        jsae.pair_loss(sae_x, sae_y, mlp, xs[idx], ys[idx], lam).backward()
        constrained_step([sae_x, sae_y], opt)

    t_sae, t_jsae = (median_time(lambda lam=lam: step(lam), 30, clock=time.process_time) for lam in (0.0, 1.0))
    print(f"training step, JSAE / traditional pair: {t_jsae / t_sae:.2f}x (batch 512)")


if __name__ == "__main__":
    main()
