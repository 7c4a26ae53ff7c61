"""The ``paper`` preset: SigLIP, DINOv2 and ViT patch tokens from local folders, cached to disk.

``model_path`` holds one Hugging Face folder per backbone (``siglip/``, ``dinov2/``, ``vit/``:
config.json, weights and preprocessor_config.json), loaded with ``transformers.AutoModel`` and
never downloaded; ``data_path`` holds images. Every backbone sees square crops of its image
processor's ``crop_size`` (224 for the three official backbones, as the official code feeds them;
DINOv2's model config says 518, which is not used): the image is resized, aspect kept, so that its
shorter edge is the processor's ``shortest_edge`` (else the crop size), centre-cropped and
normalised with the processor's mean and std. The last-layer tokens lose the class (and register)
tokens, and every patch grid is resized to the smallest grid (bilinear, antialiased; DINOv2's
16x16 -> 14x14 officially) so that token t is the same image patch in every model. Tokens are
cached in float16 as one ``.npz`` per image holding every model (the official ``combined_npz``)
and stay float16 in memory; the USAE and its controls train exactly as in the toy, each batch cast
to float32 and standardised when drawn (:class:`~companion.papers.usae.universal.Rows`). Scoring reads
the held-out tokens ``SCORE_CHUNK`` at a time (:func:`~companion.papers.usae.evaluate.score`):
the toy's one-shot scores, with peak memory set by the chunk instead of the held-out set.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from tqdm import tqdm

from companion import runtime
from companion.params import resolve_path

if TYPE_CHECKING:
    from companion.papers.usae import Params
    from companion.papers.usae.experiment import Results

BACKBONES = ("siglip", "dinov2", "vit")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
HELD_OUT = 0.1  # fraction of images held out for the analysis
SPLIT_SEED = 0
SMOKE_IMAGES = 8
SMOKE_STEPS = 20
# Held-out tokens scored per chunk (about 84 images of 196 tokens). One chunk's codes are 3 models x 16 384
# tokens x 6 144 concepts x 4 B = 1.2 GB, plus about 1.6 GB of one encoder's temporaries; encoding all
# ~980 000 held-out tokens at once would need 72 GB for the codes and about 96 GB of one encoder's temporaries.
SCORE_CHUNK = 16384
SMOKE_SCORE_CHUNK = 5  # the smoke run's 16 held-out tokens in several chunks, so the chunked path is exercised


def _side(value: object) -> int | None:
    """A square side from an image processor's size entry (an int or a {height, width} dict)."""
    if isinstance(value, dict):
        value = value.get("height", value.get("shortest_edge"))
    return int(value) if value else None


def input_size(prep: dict, config_size: int) -> int:
    """The crop the backbone is fed: the processor's ``crop_size``, else its ``size``, else the config's."""
    return _side(prep.get("crop_size")) or _side(prep.get("size")) or int(config_size)


def load_backbone(folder: Path, device: torch.device) -> tuple[torch.nn.Module, dict, int, int]:
    """The vision model in ``folder`` (eval), its preprocessing config, input size and patch size."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    vision = model.vision_model if hasattr(model, "vision_model") else model
    vcfg = getattr(config, "vision_config", config)
    prep_file = folder / "preprocessor_config.json"
    prep = json.loads(prep_file.read_text()) if prep_file.is_file() else {}
    return vision.to(device).eval(), prep, input_size(prep, vcfg.image_size), int(vcfg.patch_size)


def preprocess(image: Image.Image, prep: dict, size: int) -> np.ndarray:
    """Resize the shorter edge (aspect kept), centre-crop to ``size``, scale, normalise: (3, s, s).

    The shorter edge goes to the processor's ``shortest_edge`` (DINOv2: 256), else to ``size``; the
    image is never squashed to a square.
    """
    image = image.convert("RGB")
    target = prep.get("size", {})
    edge = max(size, int(target.get("shortest_edge") or size) if isinstance(target, dict) else size)
    scale = edge / min(image.size)
    image = image.resize((max(size, round(image.width * scale)), max(size, round(image.height * scale))),
                         Image.BICUBIC)
    left, top = (image.width - size) // 2, (image.height - size) // 2
    image = image.crop((left, top, left + size, top + size))
    x = np.asarray(image, dtype=np.float32) * float(prep.get("rescale_factor", 1 / 255))
    mean = np.asarray(prep.get("image_mean", [0.5, 0.5, 0.5]), dtype=np.float32)
    std = np.asarray(prep.get("image_std", [0.5, 0.5, 0.5]), dtype=np.float32)
    return ((x - mean) / std).transpose(2, 0, 1)


def patch_tokens(hidden: torch.Tensor, grid: int, out_grid: int) -> torch.Tensor:
    """The last ``grid``² tokens (class and register tokens dropped), resized to ``out_grid``²."""
    tokens = hidden[:, -grid * grid:, :]
    if grid == out_grid:
        return tokens
    b, _, d = tokens.shape
    img = tokens.transpose(1, 2).reshape(b, d, grid, grid)
    img = F.interpolate(img, size=(out_grid, out_grid), mode="bilinear", antialias=True, align_corners=False)
    return img.reshape(b, d, out_grid * out_grid).transpose(1, 2)


def image_files(folder: Path, limit: int) -> list[Path]:
    """Image files under ``folder`` (recursive, sorted), at most ``limit`` (0: all)."""
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    return files[:limit] if limit else files


def cache_activations(model_root: Path, files: list[Path], cache: Path, device: torch.device,
                      batch: int = 32) -> list[Path]:
    """One ``.npz`` per image with every backbone's aligned patch tokens (float16); reuses old ones."""
    key = hashlib.sha256(str(model_root.resolve()).encode()).hexdigest()[:10]
    out = [cache / key / (hashlib.sha256(str(f.resolve()).encode()).hexdigest()[:16] + ".npz") for f in files]
    todo = [i for i, p in enumerate(out) if not p.is_file()]
    if not todo:
        return out
    (cache / key).mkdir(parents=True, exist_ok=True)
    backbones = {name: load_backbone(model_root / name, device) for name in BACKBONES}
    out_grid = min(size // patch for _, _, size, patch in backbones.values())
    for start in tqdm(range(0, len(todo), batch), desc="caching activations", disable=None, leave=False):
        idx = todo[start:start + batch]
        images = [Image.open(files[i]) for i in idx]
        tokens = {}
        for name, (model, prep, size, patch) in backbones.items():
            x = torch.as_tensor(np.stack([preprocess(im, prep, size) for im in images]), device=device)
            with torch.no_grad():
                hidden = model(pixel_values=x).last_hidden_state
            tokens[name] = patch_tokens(hidden, size // patch, out_grid).cpu().numpy().astype(np.float16)
        for k, i in enumerate(idx):
            tmp = out[i].with_suffix(".tmp.npz")
            np.savez(tmp, **{name: t[k] for name, t in tokens.items()})
            tmp.replace(out[i])
    return out


def load_cached(paths: list[Path]) -> list[torch.Tensor]:
    """Stack the cached tokens: one (images x tokens, d_m) float16 tensor per backbone (cast per batch)."""
    per = {name: [] for name in BACKBONES}
    for p in paths:
        with np.load(p) as z:
            for name in BACKBONES:
                per[name].append(z[name])
    return [torch.from_numpy(np.concatenate(per[n]).astype(np.float16, copy=False)) for n in BACKBONES]


def run_vision(params: "Params") -> "Results":
    """The ``paper`` preset: cache tokens, split images, train and score every seed in-process."""
    from dataclasses import replace

    from companion.papers.usae.evaluate import SeedRun, concept_codes, fit_variants, top_samples
    from companion.papers.usae.experiment import FIG_CONCEPTS, FIG_SAMPLES, MIN_FIRES, Results, train_config

    device = runtime.resolve_device(params.device)
    limit = SMOKE_IMAGES if params.smoke else params.n_images
    files = image_files(resolve_path(params.data_path), limit)
    if len(files) < 2:
        raise ValueError(f"data_path {params.data_path!r} holds {len(files)} images; at least 2 are needed")
    paths = cache_activations(resolve_path(params.model_path), files, resolve_path(params.cache_path), device)
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(paths))
    n_test = max(1, int(round(HELD_OUT * len(paths))))
    train = load_cached([paths[i] for i in perm[n_test:]])
    test = load_cached([paths[i] for i in perm[:n_test]])
    if params.smoke:
        n = min(params.n_concepts, 4 * max(a.shape[1] for a in train))
        params = replace(params, usae_steps=SMOKE_STEPS, batch_size=min(params.batch_size, len(train[0])),
                         n_concepts=n, top_k=min(params.top_k, n // 4), top_concepts=min(params.top_concepts, n))
    cfg = train_config(params, len(train[0]))
    chunk = SMOKE_SCORE_CHUNK if params.smoke else SCORE_CHUNK
    train, test = [a.to(device) for a in train], [a.to(device) for a in test]
    runs = []
    for seed in params.seed_list():
        variants, saes, stds, order = fit_variants(
            train, test, cfg, seed, params.fire_threshold, min(params.top_concepts, params.n_concepts), MIN_FIRES,
            params.run_controls, params.run_ablation, chunk=chunk)
        ids = order[:FIG_CONCEPTS]
        picks = top_samples(concept_codes(saes, test, stds, ids, chunk), FIG_SAMPLES)
        runs.append(SeedRun(seed, variants, {"images.train": len(paths) - n_test, "images.held_out": n_test},
                            picks, ids.numpy()))
    return Results(params, BACKBONES, runs, "vision")
