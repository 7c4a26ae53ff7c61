"""The ``paper`` preset of stay-positive: a real detector checkpoint and real/fake image folders.

Follows the official code (``AniSundar18/AlignedForensics``, ``training_code/``): the detector is
``res50nodown`` (:class:`companion.models.tv_resnet.ResNet` with ``nodown=True``: torchvision's
names, the 7x7 stem and its max-pool at stride 1), its input normalised with the ImageNet mean and
std (``--norm_type resnet``), its last layer ``fc`` (1 output, label 1 = fake) reading the pooled
post-ReLU feature. Checkpoints are read the way ``networks.load_weights`` reads them:
``{"model": state}`` (keys optionally prefixed ``module.``), ``{"state_dict": state}``,
``{"net": state}`` or a bare state dict; the load is strict. Stage 2 (``--fix_backbone
--stay_positive clamp --final_dropout 0``) freezes everything but ``fc`` with BatchNorm in eval
mode, zeroes ``fc`` and trains it with Adam (lr 1e-4, betas (0.9, 0.999)) and batch 512, clamping
the weight at 0 after every step for SP; LP is the same without the clamp, Base is the checkpoint's
own ``fc``. Because the backbone is frozen and dropout is 0, training the head on cached features
is the same computation as the official one on the same inputs.

Ours, for a CPU budget: every image is centre-cropped (symmetric padding when smaller) to one side
``patch`` instead of training on random 96-px crops with the official augmentations and testing on
whole images; the head trains for ``head_steps`` steps instead of early stopping on validation
accuracy; the heads are trained once (seeds would vary only their minibatches: the data and Base
are fixed), and every seed repeats that one value. The test conditions
are the toy's: fakes after JPEG (Pillow, 4:4:4) and reals whose central square is pasted from a
fake image.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from PIL import Image

from companion.models import tv_resnet
from companion.papers.stay_positive import photo_patches as pp

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")
HEAD_LR, HEAD_BATCH = 1e-4, 512  # the official stage-2 Adam learning rate and batch size
SMOKE = {"n_train": 8, "n_test": 4, "head_steps": 20, "seeds": 2, "patch": 64, "inpaint_sizes": (32, 16),
         "jpeg_q_test": (75,)}


def checkpoint_state(path: Path) -> dict[str, torch.Tensor]:
    """The network's state dict from an official-layout checkpoint file (see the module docstring)."""
    dat = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("model", "state_dict", "net"):
        if isinstance(dat, dict) and key in dat and isinstance(dat[key], dict):
            dat = dat[key]
            break
    if not isinstance(dat, dict) or not any(k.endswith("conv1.weight") for k in dat):
        raise ValueError(f"{path}: no ResNet state dict (conv1.weight) under 'model', 'state_dict', 'net' or at the top")
    return {k.removeprefix("module."): v for k, v in dat.items()}


def arch_of(state: dict[str, torch.Tensor]) -> str:
    """resnet18/34/50, from the block type (``conv3`` = bottleneck) and the blocks per stage."""
    kind = "bottleneck" if "layer1.0.conv3.weight" in state else "basic"
    depths = tuple(len({k.split(".")[1] for k in state if k.startswith(f"layer{i}.")}) for i in range(1, 5))
    for name, spec in tv_resnet.LAYERS.items():
        if spec == (kind, depths):
            return name
    raise ValueError(f"no known ResNet has {kind} blocks {depths}; allowed: {', '.join(tv_resnet.LAYERS)}")


def load_detector(path: Path) -> tuple[tv_resnet.ResNet, str]:
    """The frozen nodown detector in eval mode, loaded strictly from ``path``, and its architecture."""
    state = checkpoint_state(path)
    if state["fc.weight"].shape[0] != 1:
        raise ValueError(f"{path}: fc has {state['fc.weight'].shape[0]} outputs; a detector has 1 (logit of fake)")
    arch = arch_of(state)
    net = tv_resnet.ResNet(arch, 1, nodown=True)
    net.load_state_dict(state, strict=True)
    net.requires_grad_(False)
    return net.eval(), arch


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def list_images(folder: Path) -> list[Path]:
    """Image files under ``folder`` (recursive), sorted."""
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def layout(data: Path) -> dict[str, Any]:
    """The image lists of ``data``: train/{real,fake}, val/real (optional), test/real, test/<generator>."""
    missing = [d for d in ("train/real", "train/fake", "test/real") if not list_images(data / d)]
    gens = sorted(p.name for p in (data / "test").iterdir() if p.is_dir() and p.name != "real") \
        if (data / "test").is_dir() else []
    if missing or not gens:
        what = missing[0] if missing else "test/<generator>"
        raise ValueError(f"{data}: no images in {what}/; expected train/real, train/fake, test/real and "
                         "test/<generator>/ folders (see data/README.md)")
    val = list_images(data / "val" / "real")
    return {"train_real": list_images(data / "train/real"), "train_fake": list_images(data / "train/fake"),
            "val_real": val, "test_real": list_images(data / "test/real"),
            "generators": {g: list_images(data / "test" / g) for g in gens}}


def load_crop(path: Path, side: int) -> np.ndarray:
    """An image as float RGB in [0, 1], centre-cropped to ``side`` (symmetric padding when smaller)."""
    with Image.open(path) as im:
        x = np.asarray(im.convert("RGB"), dtype=np.float64) / 255.0
    pad = [(max(0, side - n) // 2, max(0, side - n) - max(0, side - n) // 2) for n in x.shape[:2]]
    x = np.pad(x, pad + [(0, 0)], mode="symmetric")
    top, left = (x.shape[0] - side) // 2, (x.shape[1] - side) // 2
    return x[top:top + side, left:left + side]


@torch.no_grad()
def features(net: tv_resnet.ResNet, images: Iterator[np.ndarray], batch: int = 16) -> np.ndarray:
    """Pooled post-ReLU features (n, D) of float RGB images, ImageNet-normalised."""
    device = net.fc.weight.device
    mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)
    out, buf = [], []

    def flush() -> None:
        x = torch.from_numpy(np.stack(buf).transpose(0, 3, 1, 2).astype(np.float32)).to(device)
        out.append(net.features((x - mean) / std).cpu().numpy().astype(np.float64))
        buf.clear()

    for img in images:
        buf.append(img)
        if len(buf) == batch:
            flush()
    if buf:
        flush()
    return np.concatenate(out)


def condition_sets(files: dict[str, Any], side: int, qualities: tuple[int, ...], inpaint_sizes: tuple[int, ...],
                   both_q: int) -> dict[str, Callable[[], Iterator[np.ndarray]]]:
    """Every set the toy evaluates, as lazy image streams keyed by the toy's names."""
    fakes = [p for g in files["generators"].values() for p in g]

    def stream(paths: list[Path], fn: Callable[[int, np.ndarray], np.ndarray] = lambda i, x: x
               ) -> Callable[[], Iterator[np.ndarray]]:
        return lambda: (fn(i, load_crop(p, side)) for i, p in enumerate(paths))

    def pasted(size: int) -> Callable[[int, np.ndarray], np.ndarray]:
        # The i-th real gets the central square of the (i mod n)-th fake, as the toy's inpaint does.
        return lambda i, x: pp.inpaint(x[None], load_crop(fakes[i % len(fakes)], side)[None], size)[0]

    reals, train_real = files["test_real"], stream(files["train_real"])
    real_test = stream(reals)
    # One stream under two names is read once (extract_all): the test reals have no cleaner version
    # here, and without val/real tau comes from the training reals.
    sets = {"train_real": train_real, "train_fake": stream(files["train_fake"]),
            "val_real": stream(files["val_real"]) if files["val_real"] else train_real,
            "real_test": real_test, "real_clean": real_test,
            f"real_jpeg{both_q}": stream(reals, lambda i, x: pp.jpeg(x, both_q)), "clean": stream(fakes)}
    for q in qualities:
        sets[f"jpeg{q}"] = stream(fakes, lambda i, x, q=q: pp.jpeg(x, q))
    for s in inpaint_sizes:
        sets[f"inpaint{s}"] = stream(reals, pasted(s))
    return sets


def cap(files: dict[str, Any], n_train: int, n_test: int) -> dict[str, Any]:
    """The first ``n_train`` training images per class and ``n_test`` test images per folder."""
    out = {k: v[:n_train] for k, v in files.items() if k in ("train_real", "train_fake", "val_real")}
    out["test_real"] = files["test_real"][:n_test]
    out["generators"] = {g: v[:n_test] for g, v in files["generators"].items()}
    return out


def extract_all(net: tv_resnet.ResNet, sets: dict[str, Callable[[], Iterator[np.ndarray]]]
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Features of every set, and up to 4 example images of each (for the figures); a stream shared by
    several names is read once."""
    read: dict[Callable[[], Iterator[np.ndarray]], tuple[np.ndarray, np.ndarray]] = {}
    feats, examples = {}, {}
    for name, make in sets.items():
        if make not in read:
            read[make] = features(net, make()), np.stack([x for _, x in zip(range(4), make())])
        feats[name], examples[name] = read[make]
    return feats, examples


def source(model_path: Path, data_path: Path, arch: str, net: tv_resnet.ResNet, files: dict[str, Any]
           ) -> dict[str, Any]:
    """What the run read: paths, the checkpoint's hash and architecture, image counts per folder."""
    return {"model_path": str(model_path), "model_sha256": file_sha256(model_path), "arch": f"{arch} nodown",
            "feature_dim": int(net.fc.in_features), "data_path": str(data_path),
            "images": {"train_real": len(files["train_real"]), "train_fake": len(files["train_fake"]),
                       "val_real": len(files["val_real"]), "test_real": len(files["test_real"]),
                       **{f"test_{g}": len(v) for g, v in files["generators"].items()}}}
