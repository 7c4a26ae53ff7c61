"""The ``paper`` preset of ood-dcc: extract real features from local weights and images, and load them.

``python -m companion.papers.ood_dcc.paper_preset --images DIR --out FEATURES_DIR`` with either
``--backbone resnet18|34|50 --weights LOCAL.pth`` (a ``torchvision.models.resnet*`` ``state_dict``,
loaded into :mod:`companion.models.tv_resnet`, the same network under the same names: torchvision
itself does not install next to this project's CPU build of torch) or ``--model-dir HF_DIR`` (a
``transformers`` image classifier saved with ``save_pretrained``, e.g. a ViT-B/16) writes the
``features_dir`` that the preset reads: ``<set>_feats.npy`` (n, D) and ``<set>_logits.npy`` (n, C) for
``train``, ``test`` and every OOD set, ``train_labels.npy``, ``head_W.npy`` (C, D), ``head_b.npy`` (C,),
and ``extract.json`` (model, data set, image counts and the scorer settings as ``-p`` flags).

Follows the official code (``workerbcd/ooddcc``): the penultimate feature is the input of the final
linear layer; images are streamed batch by batch through the official test transforms (CIFAR: 32 x 32
with the official per-data-set mean and std; ImageNet: resize 256, centre crop 224, ImageNet mean and
std), whatever the model; ImageNet at D >= 2048 uses r = 512, ViM's principal dimension 1000 and KNN
k = 1000, CIFAR-10 k = 50 and CIFAR-100 k = 200, each k scaled by the fraction of the training set
present, as the official scorer does. Ours: at other D (ViT-B's 768, a CIFAR ResNet-18's 512) the
residual dimension and ViM's principal dimension are D/2, not the paper's per-model constants. A CIFAR
ResNet's 3 x 3 stride-1 stem without max-pooling is recognised from the weights (``conv1`` of 3 x 3).

Image layout: ``DIR/train/<class>/*.png``, ``DIR/test/<class>/*.png`` (the same class folders, sorted
order = label) and ``DIR/ood/<set>/*.png`` (PNG or JPEG).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image
from torch import Tensor, nn

from companion.models import tv_resnet
from companion.params import resolve_path
from companion.papers.ood_dcc.experiment import Bank

BACKBONES = tuple(tv_resnet.LAYERS)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
# official test-time statistics (dataset/transforms.py of the official code)
STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "cifar100": ((0.507, 0.487, 0.441), (0.267, 0.256, 0.276)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
# KNN k of the official scripts at the full training set, and that set's size
KNN_FULL = {"cifar10": (50, 50_000), "cifar100": (200, 50_000), "imagenet": (1000, 1_281_167)}


@dataclass(frozen=True)
class Settings:
    """The paper's per-backbone settings: data set and scorer dimensions."""

    dataset: str
    residual_dim: int
    vim_pdim: int
    knn_k: int

    def params(self, D: int) -> dict[str, float | int]:
        """The ood-dcc parameters (``-p`` values) that reproduce these settings at feature size D."""
        return {"residual_frac": round(self.residual_dim / D, 4), "vim_pdim_frac": round(self.vim_pdim / D, 4),
                "knn_k": self.knn_k}


def settings(dataset: str, D: int, n_train: int) -> Settings:
    """Scorer settings on ``dataset`` for feature size D (2048: ImageNet ResNet-50) and ``n_train`` ID images."""
    k_full, n_full = KNN_FULL[dataset]
    k = max(1, min(n_train, round(k_full * n_train / n_full)))
    if dataset == "imagenet" and D >= 2048:  # the official ImageNet setting (ResNet-50)
        return Settings(dataset, 512, 1000, k)
    return Settings(dataset, D // 2, D // 2, k)  # ours, see the module docstring


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


def transform(dataset: str, img: Image.Image) -> Tensor:
    """The official test-time transform of ``dataset``: an RGB PIL image to a normalised (3, H, W) tensor."""
    if dataset.startswith("cifar"):
        img = tv_resnet.resize(img, (32, 32))
    else:
        img = tv_resnet.center_crop(tv_resnet.resize(img, 256), 224)
    return tv_resnet.to_normalised_tensor(img, *STATS[dataset])


def build(backbone: str, state: dict[str, Tensor]) -> nn.Module:
    """The ResNet whose shape (stem, classes) matches ``state``, with those weights loaded (strict)."""
    cifar = state["conv1.weight"].shape[-1] == 3  # CIFAR stem: 3x3 stride 1, no max-pooling
    net = tv_resnet.ResNet(backbone, int(state["fc.weight"].shape[0]), cifar_stem=cifar)
    net.load_state_dict(state)
    return net.eval()


def load_state(path: Path) -> dict[str, Tensor]:
    """A state_dict saved with ``torch.save`` (a bare dict, or under 'state_dict'; 'module.' prefixes dropped)."""
    obj = torch.load(path, map_location="cpu", weights_only=True)
    state = obj.get("state_dict", obj) if isinstance(obj, dict) else obj
    return {k.removeprefix("module."): v for k, v in state.items()}


def hf_head(model: nn.Module) -> nn.Linear:
    """The final linear layer of a transformers image classifier."""
    linears = [m for m in model.classifier.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError("the model's classifier has no linear layer")
    return linears[-1]


def features_and_logits(forward: Callable[[Tensor], Tensor], head: nn.Linear, paths: list[Path], dataset: str,
                        batch: int, device: str) -> tuple[np.ndarray, np.ndarray]:
    """Penultimate features (the input of ``head``) and logits, float64, streaming ``batch`` images at a time
    (only one batch of pixels is ever in memory)."""
    captured: list[Tensor] = []
    hook = head.register_forward_hook(lambda _m, args, _out: captured.append(args[0].detach()))
    feats, logits = [], []
    try:
        with torch.no_grad():
            for start in range(0, len(paths), batch):
                xs = []
                for p in paths[start:start + batch]:
                    with Image.open(p) as img:
                        xs.append(transform(dataset, img.convert("RGB")))
                out = forward(torch.stack(xs).to(device))
                feats.append(captured.pop().flatten(1).double().cpu().numpy())
                logits.append(out.double().cpu().numpy())
    finally:
        hook.remove()
    return np.concatenate(feats), np.concatenate(logits)


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file (a folder: of its sorted files' hashes)."""
    h = hashlib.sha256()
    files = sorted(q for q in path.rglob("*") if q.is_file()) if path.is_dir() else [path]
    for f in files:
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(2**20), b""):
                h.update(block)
    return h.hexdigest()


def load_model(backbone: str | None, weights: Path | None, model_dir: Path | None, device: str
               ) -> tuple[Callable[[Tensor], Tensor], nn.Linear, Path, str]:
    """The forward pass, its final linear layer, the weights' path and a name, for either kind of model."""
    if model_dir is not None:
        from transformers import AutoModelForImageClassification

        model = AutoModelForImageClassification.from_pretrained(model_dir, local_files_only=True).to(device).eval()
        return (lambda x: model(pixel_values=x).logits), hf_head(model), model_dir, type(model).__name__
    net = build(backbone, load_state(weights)).to(device)
    return net, net.fc, weights, backbone


def extract(images: Path, out: Path, dataset: str, backbone: str | None = None, weights: Path | None = None,
            model_dir: Path | None = None, batch: int = 128, device: str = "cpu") -> dict:
    """Write the features of every set into ``out``; return the summary also written as ``extract.json``."""
    forward, head, source, name = load_model(backbone, weights, model_dir, device)
    train_paths, train_labels, classes = labelled_images(images / "train")
    test_paths, _, test_classes = labelled_images(images / "test")
    if test_classes != classes:
        raise ValueError(f"test classes {test_classes} differ from train classes {classes}")
    if len(classes) != head.out_features:
        raise ValueError(f"{len(classes)} class folders but the model has {head.out_features} classes")
    sets = {"train": train_paths, "test": test_paths}
    sets |= {p.name: list_images(p) for p in sorted((images / "ood").iterdir()) if p.is_dir()}
    out.mkdir(parents=True, exist_ok=True)
    for set_name, paths in sets.items():
        feats, logits = features_and_logits(forward, head, paths, dataset, batch, device)
        np.save(out / f"{set_name}_feats.npy", feats)
        np.save(out / f"{set_name}_logits.npy", logits)
    np.save(out / "train_labels.npy", train_labels)
    np.save(out / "head_W.npy", head.weight.detach().double().cpu().numpy())
    np.save(out / "head_b.npy", head.bias.detach().double().cpu().numpy())
    D = head.in_features
    s = settings(dataset, D, len(train_paths))
    summary = {"model": name, "dataset": dataset, "weights_sha256": sha256(source), "feature_dim": D,
               "classes": classes, "images": {k: len(v) for k, v in sets.items()}, "params": s.params(D)}
    (out / "extract.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def cached_bank(folder: str, names: tuple[str, ...]) -> Bank:
    """Real features cached as ``<set>_logits.npy`` / ``<set>_feats.npy`` (sets: train, test, OOD names)."""
    root = resolve_path(folder)

    def load(s: str) -> tuple[np.ndarray, np.ndarray]:
        return (np.load(root / f"{s}_logits.npy").astype(np.float64),
                np.load(root / f"{s}_feats.npy").astype(np.float64))

    return Bank(load("train"), np.load(root / "train_labels.npy"), load("test"),
                {k: load(k) for k in names}, np.load(root / "head_W.npy").astype(np.float64),
                np.load(root / "head_b.npy").astype(np.float64), float("nan"))


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); exit 2 when an input is missing."""
    ap = argparse.ArgumentParser(prog="python -m companion.papers.ood_dcc.paper_preset",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=Path, required=True, help="DIR with train/<class>/, test/<class>/, ood/<set>/")
    ap.add_argument("--out", type=Path, required=True, help="the features_dir to write")
    model = ap.add_mutually_exclusive_group(required=True)
    model.add_argument("--backbone", choices=BACKBONES, help="a torchvision ResNet (with --weights)")
    model.add_argument("--model-dir", type=Path, help="a transformers image classifier (save_pretrained)")
    ap.add_argument("--weights", type=Path, help="the ResNet's state_dict (torch.save)")
    ap.add_argument("--dataset", choices=tuple(STATS), help="ID data set (default: cifar10 for resnet18/34, else "
                    "imagenet); sets the transform and the KNN k")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = ap.parse_args(argv)
    need = [(args.images / "train", "DIR/train/<class>/"), (args.images / "test", "DIR/test/<class>/"),
            (args.images / "ood", "DIR/ood/<set>/")]
    if args.model_dir is not None:
        need.insert(0, (args.model_dir / "config.json", "a model folder (config.json)"))
    else:
        need.insert(0, (args.weights or Path("--weights"), "a state_dict file (torch.save) given as --weights"))
    for path, what in need:
        if not path.exists():
            print(f"paper_preset: error: {path} is missing; expected {what}", file=sys.stderr)
            return 2
    dataset = args.dataset or ("cifar10" if args.backbone in ("resnet18", "resnet34") else "imagenet")
    summary = extract(args.images, args.out, dataset, args.backbone, args.weights, args.model_dir, args.batch,
                      args.device)
    for name, n in summary["images"].items():
        print(f"{name}: {n} images")
    ood = ",".join(k for k in summary["images"] if k not in ("train", "test"))
    flags = " ".join(f"-p {k}={v}" for k, v in summary["params"].items())
    print(f"features in {args.out}; run: companion run ood-dcc --preset paper -p features_dir={args.out} "
          f"-p ood_sets={ood} {flags}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
