"""The ``paper`` preset: CIFAR-10N from local files, a CIFAR ResNet-18, and last-layer influence.

Data (brought by the user, see data/README.md): ``<data_path>/cifar-10-batches-py/`` (the CIFAR-10
python pickles ``data_batch_1..5`` and ``test_batch``) and ``<data_path>/CIFAR-10_human.pt`` from
CIFAR-10N (a dict of label arrays: ``clean_label``, ``aggre_label``, ``worse_label``,
``random_label1``, ...). A seeded split of the 50k training images gives a clean validation pool
(CIFAR-10 labels) and a training set with the chosen human noisy labels.

The ResNet-18 (CIFAR variant: 3x3 stem, no max-pool) is trained on the noisy labels; then every
score of :mod:`experiment` is computed on its last layer (a multinomial logistic head on frozen
penultimate features, P = 512 * 10 + 10), starting from the trained head. That is the spec's
"last-layer exact" option, not the paper's full-network curvature (EK-FAC / LiSSA, unverified),
and the validation fine-tunes move the head only. ``smoke`` runs the same code on a few hundred
images with a narrow network.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from companion import runtime
from companion.papers.flat_influence.experiment import Setup, score_seed
from companion.papers.flat_influence.network import DTYPE, TanhMLP
from companion.params import resolve_path

LABEL_KEYS = {"aggre": "aggre_label", "random1": "random_label1", "worst": "worse_label"}
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


@dataclasses.dataclass(frozen=True)
class Cifar10N:
    """CIFAR-10 images (n, 3, 32, 32) uint8 with clean labels, and the CIFAR-10N noisy training labels."""

    x_train: np.ndarray
    y_clean: np.ndarray
    y_noisy: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def _batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python pickle: images (n, 3, 32, 32) uint8 and labels (n,)."""
    with open(path, "rb") as fh:
        d = pickle.load(fh, encoding="bytes")
    return np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32), np.asarray(d[b"labels"], dtype=np.int64)


def load_cifar10n(root: str | Path, label_set: str) -> Cifar10N:
    """Read CIFAR-10 and the CIFAR-10N ``label_set`` (aggre, random1, worst) from ``root``."""
    root = Path(root)
    base = root / "cifar-10-batches-py"
    parts = [_batch(base / f"data_batch_{i}") for i in range(1, 6)]
    x_tr, y_tr = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    x_te, y_te = _batch(base / "test_batch")
    human = torch.load(root / "CIFAR-10_human.pt", weights_only=False)
    noisy = np.asarray(human[LABEL_KEYS[label_set]], dtype=np.int64)
    if len(noisy) != len(y_tr):
        raise ValueError(f"CIFAR-10_human.pt has {len(noisy)} labels for {len(y_tr)} training images")
    if "clean_label" in human and not np.array_equal(np.asarray(human["clean_label"]), y_tr):
        raise ValueError("CIFAR-10_human.pt clean_label disagrees with the CIFAR-10 batches (order?)")
    return Cifar10N(x_tr, y_tr, noisy, x_te, y_te)


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with a (projected) identity shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.short = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                      if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x: Tensor) -> Tensor:
        """relu(bn(conv(relu(bn(conv x)))) + shortcut x)."""
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 inputs (3x3 stem, no max-pool), ``width`` channels in the first stage."""

    def __init__(self, n_classes: int = 10, width: int = 64) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, c = [], width
        for i, mult in enumerate((1, 2, 4, 8)):
            for j in range(2):
                layers.append(BasicBlock(c, width * mult, 2 if (j == 0 and i > 0) else 1))
                c = width * mult
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(c, n_classes)

    def features(self, x: Tensor) -> Tensor:
        """Global-average-pooled last-stage activations, shape (n, 8 * width)."""
        return self.blocks(self.stem(x)).mean(dim=(2, 3))

    def forward(self, x: Tensor) -> Tensor:
        """Logits, shape (n, n_classes)."""
        return self.head(self.features(x))


def normalize(x: np.ndarray, device: torch.device) -> Tensor:
    """uint8 images (n, 3, 32, 32) to standardized float32 on ``device``."""
    t = torch.as_tensor(x, device=device).float() / 255.0
    m = torch.tensor(MEAN, device=device)[None, :, None, None]
    s = torch.tensor(STD, device=device)[None, :, None, None]
    return (t - m) / s


def augment(x: Tensor, gen: torch.Generator) -> Tensor:
    """Random 4-pixel-padded crops and horizontal flips (the standard CIFAR augmentation)."""
    n = len(x)
    pad = nn.functional.pad(x, (4, 4, 4, 4), mode="reflect")
    shift = torch.randint(0, 9, (2, n), generator=gen).to(x.device)
    flip = (torch.rand(n, generator=gen) < 0.5).to(x.device)
    ar = torch.arange(32, device=x.device)
    rows = shift[0][:, None] + ar
    cols = torch.where(flip[:, None], shift[1][:, None] + 31 - ar, shift[1][:, None] + ar)
    idx_n = torch.arange(n, device=x.device)[:, None, None, None]
    idx_c = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
    return pad[idx_n, idx_c, rows[:, None, :, None], cols[:, None, None, :]]


def train_resnet(x: Tensor, y: Tensor, epochs: int, width: int, gen: torch.Generator, batch: int = 128,
                 lr: float = 0.1) -> ResNet18:
    """SGD (momentum 0.9, weight decay 5e-4, cosine lr) on the noisy labels with augmentation."""
    model = ResNet18(int(y.max()) + 1 if len(y) else 10, width).to(x.device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    steps = epochs * max(1, (len(x) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=gen).to(x.device)
        for i in range(0, len(x), batch):
            idx = order[i:i + batch]
            opt.zero_grad()
            nn.functional.cross_entropy(model(augment(x[idx], gen)), y[idx]).backward()
            opt.step()
            sched.step()
    return model.eval()


@torch.no_grad()
def extract(model: ResNet18, x: Tensor, batch: int = 1000) -> Tensor:
    """Penultimate features of ``x`` in eval mode, float64."""
    return torch.cat([model.features(x[i:i + batch]) for i in range(0, len(x), batch)]).to(DTYPE)


def sizes(p: Any) -> dict[str, Any]:
    """The sizes a paper run uses (``smoke`` shrinks everything to run on a CPU in seconds)."""
    if not p.smoke:
        return {"n_train": p.n_train, "n_val": p.n_val, "n_val_sweep": p.n_val_sweep, "n_test": p.n_test,
                "epochs": p.epochs, "width": 64, "ft_steps": p.ft_steps}
    return {"n_train": 300, "n_val": 40, "n_val_sweep": (20, 40), "n_test": 100, "epochs": 1, "width": 4,
            "ft_steps": 8}


def paper_setup(p: Any, data: Cifar10N, seed: int, device: torch.device) -> Setup:
    """Split, train the ResNet on the noisy labels, and expose its last layer as the scored model."""
    z = sizes(p)
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    pool = max((*z["n_val_sweep"], z["n_val"]))
    perm = rng.permutation(len(data.y_clean))
    vi, ti = perm[:pool], perm[pool:pool + z["n_train"]]
    te = rng.permutation(len(data.y_test))[:z["n_test"]]
    long = lambda a: torch.as_tensor(a, dtype=torch.long, device=device)  # noqa: E731
    x_tr = normalize(data.x_train[ti], device)
    model = train_resnet(x_tr, long(data.y_noisy[ti]), z["epochs"], z["width"], gen)
    feats = {k: extract(model, x) for k, x in
             (("train", x_tr), ("val", normalize(data.x_train[vi], device)), ("test", normalize(data.x_test[te], device)))}
    head = TanhMLP(feats["train"].shape[1], 0, model.head.out_features)
    theta = torch.cat([model.head.weight.detach().flatten(), model.head.bias.detach()]).to(DTYPE)
    return Setup(head, theta, [(0.1, theta)], feats["train"], long(data.y_noisy[ti]),
                 data.y_noisy[ti] != data.y_clean[ti], long(data.y_clean[ti]), feats["val"],
                 long(data.y_clean[vi]), feats["test"], long(data.y_test[te]))


def run_paper(p: Any) -> list[dict[str, Any]]:
    """Every seed of the CIFAR-10N pipeline; the scorer runs with the (possibly smoke) sizes."""
    device = torch.device("cpu") if p.smoke else runtime.resolve_device(p.device)
    data = load_cifar10n(resolve_path(p.data_path), p.label_set)
    z = sizes(p)
    q = dataclasses.replace(p, n_val=z["n_val"], n_val_sweep=z["n_val_sweep"], ft_steps=z["ft_steps"])
    return [score_seed(q, paper_setup(p, data, s, device), s) for s in p.seed_list()]
