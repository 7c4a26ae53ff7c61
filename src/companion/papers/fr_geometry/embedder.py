"""The face embedder: a small CNN trained with the batch-hard triplet loss on freshly rendered faces.

Stands in for the paper's FaceNet / ArcFace models (identity labels only, a margin loss, unit-norm
embeddings). Batch-hard mining after Hermans et al. (2017); the architecture is the spec's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from companion.models import optim
from companion.papers.fr_geometry import faces


class FaceCNN(nn.Module):
    """Conv(3->w) ReLU MaxPool Conv(w->2w) ReLU MaxPool Conv(2w->2w) ReLU, GAP, Linear, L2-normalise."""

    def __init__(self, width: int = 16, emb_dim: int = 32) -> None:
        super().__init__()
        self.width, self.emb_dim = width, emb_dim
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(2 * width, emb_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Unit-norm embeddings of images (B, 3, H, W) in [0, 1]."""
        z = self.features(x * 2.0 - 1.0).mean(dim=(2, 3))
        return F.normalize(self.head(z), dim=1)


def batch_hard_triplet(emb: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """Mean over anchors of relu(max positive distance - min negative distance + margin) (Euclidean)."""
    # Not cdist's matrix-product path: its square root goes through MKL's vendor-dependent vsSqrt (models.optim).
    d = torch.cdist(emb, emb, compute_mode="donot_use_mm_for_euclid_dist")
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool, device=emb.device)
    pos = torch.where(same & ~eye, d, torch.zeros_like(d)).max(1).values
    neg = torch.where(~same, d, torch.full_like(d, float("inf"))).min(1).values
    return F.relu(pos - neg + margin).mean()


def to_tensor(img: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
    """(B, H, W, 3) numpy images to a (B, 3, H, W) float tensor."""
    return torch.from_numpy(np.ascontiguousarray(img.transpose(0, 3, 1, 2))).to(device)


@torch.no_grad()
def embed(model: nn.Module, img: np.ndarray, batch: int = 1024, device: torch.device | str = "cpu") -> np.ndarray:
    """Embeddings (B, D) float64 of rendered images, in eval mode and batches."""
    model.eval()
    out = [model(to_tensor(img[i:i + batch], device)).double().cpu().numpy() for i in range(0, len(img), batch)]
    return np.concatenate(out)


@dataclass(frozen=True)
class TrainConfig:
    """One training phase: steps, learning rate, P x K batches, the margin and the attribute ranges."""

    steps: int
    lr: float
    P: int
    K: int
    margin: float
    ranges: dict
    img_size: int = 32


def train(model: nn.Module, ids: dict[str, np.ndarray], cfg: TrainConfig, rng: np.random.Generator,
          device: torch.device | str = "cpu") -> list[float]:
    """Adam on the batch-hard triplet loss; each batch: P identities x K fresh renders. Returns the losses."""
    n_ids = len(ids["face_w"])
    opt = optim.Adam(model.parameters(), lr=cfg.lr)
    model.train()
    losses = []
    for _ in range(cfg.steps):
        who = np.repeat(rng.choice(n_ids, cfg.P, replace=False), cfg.K)
        img = faces.render(faces.take(ids, who), faces.sample_attributes(len(who), rng, cfg.ranges), cfg.img_size)
        loss = batch_hard_triplet(model(to_tensor(img, device)), torch.from_numpy(who).to(device), cfg.margin)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses
