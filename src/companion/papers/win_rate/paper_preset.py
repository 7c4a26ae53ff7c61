"""The ``paper`` preset's E4: the same grid with a 2-layer MLP policy (torch) instead of the log-linear one.

Not the paper's setting (Pythia-2.8B on Anthropic-HH cannot run offline): the largest simulated one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from companion.papers.win_rate import mlp_policy
from companion.papers.win_rate.experiment import (
    E4,
    ParamGrid,
    grid_runs,
    grid_table,
    stream,
)
from companion.papers.win_rate.preferences import CLIP, H_FUNCTIONS, contextual_instance


def e4_instance_mlp(seed: int, X: int, d: int, K: int, grid: ParamGrid, hidden: int, device: torch.device,
                    gamma: float = 0.0) -> pd.DataFrame:
    """:func:`experiment.e4_instance` with the 2-layer MLP policy (torch, float64) instead of the log-linear one."""
    rng = stream(E4, seed, 0)
    phi_np, r, p_ref_np, P_np = contextual_instance(rng, X, d, K, gamma)
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    sampler = torch.Generator(device=device).manual_seed(int(rng.integers(2**31)))

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(a, dtype=torch.float64, device=device)

    phi, log_ref, P, p_ref = t(phi_np), t(np.log(p_ref_np)), t(P_np), t(p_ref_np)
    hP = torch.stack([t(H_FUNCTIONS[h](np.clip(P_np, CLIP, 1 - CLIP))) for h in grid.hs])
    R_h = torch.einsum("hxij,xj->hxi", hP, p_ref)
    cells = [(hi, b) for hi in range(len(grid.hs)) for b in grid.betas]
    h_cell = torch.tensor([c[0] for c in cells], device=device)
    b_cell = t(np.array([c[1] for c in cells]))

    def wr(model: mlp_policy.BatchedMLP) -> np.ndarray:
        p = mlp_policy.log_probs(model, phi, log_ref).exp()
        return torch.einsum("rxi,xij,xj->r", p, P, p_ref).cpu().numpy() / X

    star = mlp_policy.reference(phi, log_ref, R_h[h_cell], b_cell, hidden, grid.ref_steps, grid.ref_lr, gen)
    with torch.no_grad():
        j_star = mlp_policy.objective(star, phi, log_ref, R_h[h_cell], b_cell).cpu().numpy()
        wr_star = wr(star)
    j_zero = (p_ref * R_h[h_cell]).sum(-1).mean(-1).cpu().numpy()
    runs = grid_runs(grid)
    c_idx = torch.tensor(runs[:, 0].astype(int), device=device)
    lr_run = t(runs[:, 1])

    def train(steps: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
        model = mlp_policy.train_reinforce(phi, log_ref, hP, h_cell[c_idx], b_cell[c_idx], lr_run, batch,
                                           steps, hidden, gen, sampler)
        with torch.no_grad():
            j_t = mlp_policy.objective(model, phi, log_ref, R_h[h_cell[c_idx]], b_cell[c_idx]).cpu().numpy()
            return j_t, wr(model)

    return grid_table(seed, grid, train, j_zero, j_star, wr_star, np.full(len(cells), np.nan))
