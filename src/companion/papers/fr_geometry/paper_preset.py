"""The ``paper`` preset: a local face-recognition model on a local CelebA folder.

``model_path`` is a TorchScript file (``torch.jit.save``) mapping RGB images in [0, 1] of shape
(B, 3, paper_img_size, paper_img_size) to embeddings; export FaceNet / ArcFace / AdaFace with their
own input normalisation inside the scripted module. ``data_path`` is a CelebA folder:
``img_align_celeba/<file>``, ``identity_CelebA.txt`` (``file identity`` per line) and
``list_attr_celeba.txt`` (count line, 40 attribute names, then ``file +-1 x 40``).

What runs: the microscale energy of the photometric attributes (illumination gradient, brightness,
contrast, hue; the same operations as the renderer, applied to real photos, which stand in for the
paper's GAN-Control lattice: no facial-attribute control without a generator), on identities with
at least C images (each photo is a base point); and the macroscale KS of every CelebA attribute,
with intra-/inter-identity entropies and their Spearman correlation with KS. The GAN-Control
images and the ArcFace fine-tuning are not reproduced here: this is not the paper's setting, and every
claim row is NaN (INCONCLUSIVE) at this preset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from scipy import stats

from companion import plotting, runtime
from companion.params import resolve_path
from companion.papers.fr_geometry import energy as en
from companion.papers.fr_geometry import faces

PHOTO = ("illum", "brightness", "contrast", "hue")


@dataclass
class RealResult:
    """Energies / sensitivities per identity and photometric attribute, and the macroscale table."""

    energies: dict[str, np.ndarray]  # mode -> (ids, 4)
    sens: np.ndarray
    macro: pd.DataFrame
    spearman: dict[str, float]
    n_images: int


def read_celeba(folder: Path) -> pd.DataFrame:
    """One row per image: file, identity and the 40 binary attributes (+1 / -1)."""
    ident = pd.read_csv(folder / "identity_CelebA.txt", sep=r"\s+", header=None, names=["file", "identity"])
    lines = (folder / "list_attr_celeba.txt").read_text().splitlines()
    names = lines[1].split()
    recs = [ln.split() for ln in lines[2:] if ln.strip()]
    attrs = pd.DataFrame([[r[0], *map(int, r[1:])] for r in recs], columns=["file", *names])
    return ident.merge(attrs, on="file")


def load_images(folder: Path, files: list[str], size: int) -> np.ndarray:
    """Images (B, size, size, 3) float32 in [0, 1], resized with bilinear filtering."""
    from PIL import Image

    out = [np.asarray(Image.open(folder / "img_align_celeba" / f).convert("RGB").resize((size, size), Image.BILINEAR),
                      dtype=np.float32) / 255.0 for f in files]
    return np.stack(out)


def load_model(path: str, device: torch.device) -> torch.jit.ScriptModule:
    """The TorchScript face-recognition model, in eval mode, on ``device``."""
    return torch.jit.load(str(resolve_path(path)), map_location=device).eval()


@torch.no_grad()
def embed(model: torch.nn.Module, img: np.ndarray, device: torch.device, batch: int = 64) -> np.ndarray:
    """Embeddings (B, D) float64 of (B, H, W, 3) images."""
    out = []
    for i in range(0, len(img), batch):
        x = torch.from_numpy(np.ascontiguousarray(img[i:i + batch].transpose(0, 3, 1, 2))).to(device)
        out.append(model(x).double().cpu().numpy())
    return np.concatenate(out)


def photometric_stencil(img: np.ndarray, attr: str, h_frac: float, rng: np.random.Generator) -> np.ndarray:
    """(3, C, H, W, 3): real photos at -h, 0, +h along one photometric attribute (others neutral), clipped."""
    lo, hi = faces.ATTRIBUTES[attr]
    h = h_frac * (hi - lo)
    centre = rng.uniform(lo + h, hi - h, len(img))
    xs = np.linspace(-1, 1, img.shape[2])[None, :].repeat(img.shape[1], 0)
    out = []
    for step in (-h, 0.0, h):
        a = faces.neutral_attributes(len(img))
        a[attr] = centre + step
        out.append(np.clip(faces.photometric(img.astype(np.float64), a, xs), 0, 1).astype(np.float32))
    return np.stack(out)


def run_real(params: Any) -> RealResult:
    """Microscale energies of the photometric attributes and the macroscale KS over CelebA attributes."""
    device = runtime.resolve_device(params.device)
    folder = resolve_path(params.data_path)
    model = load_model(params.model_path, device)
    df = read_celeba(folder)
    rng = np.random.default_rng(params.seed)
    size = params.paper_img_size
    n_ids, C = (4, min(params.C, 12)) if params.smoke else (params.energy_ids, params.C)
    counts = df.groupby("identity").size()
    rich = counts[counts >= C].index.to_numpy()
    if len(rich) == 0:
        raise ValueError(f"no identity in {params.data_path} has C = {C} images")
    chosen = rng.permutation(rich)[:n_ids]
    modes = en.NEIGHBORS
    E = {m: np.zeros((len(chosen), len(PHOTO))) for m in modes}
    S = np.zeros((len(chosen), len(PHOTO)))
    n_img = 0
    k = min(params.knn_k, C - 1)
    for i, ident in enumerate(chosen):
        files = df[df.identity == ident].file.to_numpy()
        img = load_images(folder, list(rng.permutation(files)[:C]), size)
        for a, attr in enumerate(PHOTO):
            st = photometric_stencil(img, attr, params.stencil_h, rng)
            emb = embed(model, st.reshape(-1, *st.shape[2:]), device).reshape(3, C, -1)
            P, V = emb[1], emb[2] - emb[0]
            for m in modes:
                E[m][i, a] = en.field_energy(P, V, m, k, "cosine", params.ball_eps)[0]
            S[i, a] = en.sensitivity(V, params.stencil_h)
            n_img += 3 * C
    # macroscale: up to 2 images per identity, every CelebA attribute
    ids = rng.permutation(df.identity.unique())[: (40 if params.smoke else 2000)]
    pool = df[df.identity.isin(ids)]
    picks = [rng.permutation(np.flatnonzero(pool.identity.to_numpy() == i))[:2] for i in ids]
    sub = pool.iloc[np.concatenate(picks)]
    emb = embed(model, load_images(folder, list(sub.file), size), device)
    owner = sub.identity.to_numpy()
    recs = []
    for attr in [c for c in df.columns if c not in ("file", "identity")]:
        g = sub[attr].to_numpy()
        try:
            pos, neg = en.macro_sets(g, owner, rng)
        except ValueError:
            continue
        ks_max, ks_mean, _ = en.macro_ks(emb, pos, neg)
        recs.append({"attribute": attr, "ks_max": ks_max, "ks_mean": ks_mean, "n": len(pos),
                     "intra_entropy": en.intra_entropy(g, owner), "inter_entropy": en.inter_entropy(g, owner)})
    macro = pd.DataFrame(recs).set_index("attribute")
    rho = {f"ks_vs_{e}": float(stats.spearmanr(macro.ks_max, macro[e]).statistic) if len(macro) > 2 else float("nan")
           for e in ("intra_entropy", "inter_entropy")}
    return RealResult(E, S, macro, rho, n_img + len(sub))


def metrics(real: RealResult) -> dict[str, Any]:
    """Mean energy / sensitivity per photometric attribute and the KS-entropy Spearman correlations."""
    return {"energy_knn": dict(zip(PHOTO, np.round(real.energies["knn"].mean(0), 4).tolist())),
            "sensitivity": dict(zip(PHOTO, np.round(real.sens.mean(0), 4).tolist())),
            "spearman": real.spearman, "images_embedded": real.n_images}


def energy_table(real: RealResult, mode: str, what: str = "energy") -> pd.DataFrame:
    """Mean energy (or sensitivity) per photometric attribute of the real model."""
    vals = real.energies[mode] if what == "energy" else real.sens
    return pd.DataFrame([vals.mean(0)], index=["real model"], columns=list(PHOTO)).round(3)


def plot_energies(real: RealResult) -> Figure:
    """Per-identity kNN energies of the photometric attributes (dots) with their mean."""
    fig, (ax,) = plotting.figure(width=5.0, height=3.0)
    E = real.energies["knn"]
    for a in range(len(PHOTO)):
        ax.scatter(np.full(len(E), a), E[:, a], s=10)
    ax.plot(range(len(PHOTO)), E.mean(0), "k_", ms=20)
    ax.axhline(1.0, color="grey", ls="--")
    ax.set_xticks(range(len(PHOTO)), PHOTO)
    ax.set_ylabel("energy (knn)")
    return fig


def plot_macro(real: RealResult) -> Figure:
    """KS (max) of every CelebA attribute against its intra-identity entropy."""
    fig, (ax,) = plotting.figure(width=5.0, height=3.0)
    ax.scatter(real.macro.intra_entropy, real.macro.ks_max, s=10)
    ax.set_xlabel("intra-identity entropy (bits)")
    ax.set_ylabel("KS (max)")
    return fig
