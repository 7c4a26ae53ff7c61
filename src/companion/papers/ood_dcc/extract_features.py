"""Feature extraction for the ``paper`` preset of ood-dcc: a local image classifier on local images.

``python -m companion.papers.ood_dcc.extract_features MODEL_DIR IMAGES_DIR OUT_DIR`` writes the cached
features that ``features_dir`` reads: for ``train``, ``test`` and every OOD set, the penultimate
features ``<set>_feats.npy`` (n, D) and logits ``<set>_logits.npy`` (n, C); the ID training labels
``train_labels.npy``; the classifier head ``head_W.npy`` (C, D) and ``head_b.npy`` (C,).

The backbone is a ``transformers`` image classifier saved with ``save_pretrained`` (e.g. a
``ResNetForImageClassification`` fine-tuned on CIFAR-10; the paper's CNNs are ResNet-18/34,
DenseNet-100 and WRN-28-10 trained on CIFAR, and ImageNet ResNet-50). The penultimate feature is
the pooled output that the final linear layer reads, as in the official scorers. The paper's
per-backbone settings (residual dimension r, KNN k, ViM dimension) are the ``paper`` preset's
values; the image size and normalisation are the model's own (``image_size`` in its config,
ImageNet mean and std by default, or ``preprocessor_config.json`` when present).

Image layout (PNG or JPEG, any size, converted to RGB)::

    IMAGES_DIR/train/<class>/*.png   ID training images, one folder per class (sorted = label)
    IMAGES_DIR/test/<class>/*.png    ID test images, same classes
    IMAGES_DIR/ood/<set>/*.png       each OOD set, e.g. textures, sun, places, inaturalist
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def list_images(folder: Path) -> list[Path]:
    """Image files directly in ``folder``, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def labelled_images(folder: Path) -> tuple[list[Path], np.ndarray, list[str]]:
    """Images of ``folder/<class>/``: paths, labels (class folders in sorted order) and class names."""
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not classes:
        raise FileNotFoundError(f"{folder} has no class folders")
    paths, labels = [], []
    for label, name in enumerate(classes):
        found = list_images(folder / name)
        paths += found
        labels += [label] * len(found)
    return paths, np.array(labels, dtype=np.int64), classes


def preprocessing(model_dir: Path, size: int) -> tuple[int, tuple[float, ...], tuple[float, ...]]:
    """Image size, mean and std from the model folder's preprocessor config, else ImageNet's."""
    cfg_path = model_dir / "preprocessor_config.json"
    if not cfg_path.is_file():
        return size, IMAGENET_MEAN, IMAGENET_STD
    cfg = json.loads(cfg_path.read_text())
    shape = cfg.get("size", size)
    side = shape.get("shortest_edge", shape.get("height", size)) if isinstance(shape, dict) else shape
    return int(side), tuple(cfg.get("image_mean", IMAGENET_MEAN)), tuple(cfg.get("image_std", IMAGENET_STD))


def load_images(paths: list[Path], size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """RGB images resized to ``size`` x ``size`` and normalised, as a (n, 3, size, size) float tensor."""
    from PIL import Image

    arrays = []
    for path in paths:
        with Image.open(path) as img:
            arrays.append(np.asarray(img.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.float32))
    x = torch.from_numpy(np.stack(arrays) / 255.0).permute(0, 3, 1, 2)
    return (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


def head_of(model: nn.Module) -> nn.Linear:
    """The final linear layer of a transformers image classifier."""
    classifier = model.classifier
    linears = [m for m in classifier.modules() if isinstance(m, nn.Linear)] if not isinstance(classifier, nn.Linear) \
        else [classifier]
    if not linears:
        raise ValueError("the model's classifier has no linear layer")
    return linears[-1]


def features_and_logits(model: nn.Module, x: Tensor, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Penultimate features (the input of the head) and logits, in float64, batch by batch."""
    head = head_of(model)
    feats, logits = [], []
    captured: list[Tensor] = []
    hook = head.register_forward_hook(lambda _m, args, out: captured.append(args[0].detach()))
    try:
        with torch.no_grad():
            for start in range(0, len(x), batch):
                captured.clear()
                out = model(pixel_values=x[start:start + batch]).logits
                feats.append(captured[-1].flatten(1).double().cpu().numpy())
                logits.append(out.double().cpu().numpy())
    finally:
        hook.remove()
    return np.concatenate(feats), np.concatenate(logits)


def extract(model_dir: Path, images_dir: Path, out_dir: Path, batch: int = 64, device: str = "cpu") -> dict[str, int]:
    """Write every set's cached features into ``out_dir``; return the number of images per set."""
    from transformers import AutoModelForImageClassification

    model = AutoModelForImageClassification.from_pretrained(model_dir, local_files_only=True).to(device).eval()
    size = int(getattr(model.config, "image_size", 224) or 224)
    size, mean, std = preprocessing(model_dir, size)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_paths, train_labels, classes = labelled_images(images_dir / "train")
    test_paths, _, test_classes = labelled_images(images_dir / "test")
    if test_classes != classes:
        raise ValueError(f"test classes {test_classes} differ from train classes {classes}")
    sets = {"train": train_paths, "test": test_paths}
    sets.update({p.name: list_images(p) for p in sorted((images_dir / "ood").iterdir()) if p.is_dir()})
    counts = {}
    for name, paths in sets.items():
        x = load_images(paths, size, mean, std).to(device)
        feats, logits = features_and_logits(model, x, batch)
        np.save(out_dir / f"{name}_feats.npy", feats)
        np.save(out_dir / f"{name}_logits.npy", logits)
        counts[name] = len(paths)
    np.save(out_dir / "train_labels.npy", train_labels)
    head = head_of(model)
    np.save(out_dir / "head_W.npy", head.weight.detach().double().cpu().numpy())
    np.save(out_dir / "head_b.npy", head.bias.detach().double().cpu().numpy())
    return counts


def main(argv: list[str] | None = None) -> int:
    """Command line: MODEL_DIR IMAGES_DIR OUT_DIR [--batch N] [--device cpu|cuda]."""
    parser = argparse.ArgumentParser(prog="python -m companion.papers.ood_dcc.extract_features", description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("images_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args(argv)
    for path, what in ((args.model_dir / "config.json", "a model folder (config.json)"),
                       (args.images_dir / "train", "IMAGES_DIR/train/<class>/"),
                       (args.images_dir / "ood", "IMAGES_DIR/ood/<set>/")):
        if not path.exists():
            print(f"extract: error: {path} is missing; expected {what}", file=sys.stderr)
            return 2
    for name, n in extract(args.model_dir, args.images_dir, args.out_dir, args.batch, args.device).items():
        print(f"{name}: {n} images")
    print(f"features in {args.out_dir}; run: companion run ood-dcc --preset paper -p features_dir={args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
