"""The toy setting: scikit-learn's digits and three small models that differ in architecture and task.

``mlp_digit`` (MLP, 10 classes), ``cnn_digit`` (CNN, 10 classes) and ``mlp_parity`` (MLP, odd vs
even) are trained on the same augmented images; their penultimate features are the activations the
universal SAE aligns (one "token" per image). The images are augmented *before* every model sees
them, so that sample i is the same picture for every model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import Tensor, nn

from companion.models.mlp import FeatureMLP, fit

N_TRAIN = 1400  # the rest (397 images) is held out
SPLIT_SEED = 0  # one fixed split for every run
MODEL_NAMES = ("mlp_digit", "cnn_digit", "mlp_parity")
MODEL_BATCH = 128
MODEL_LR = 3e-3


@dataclass(frozen=True)
class DigitSplit:
    """Images (n, 8, 8) in [0, 1] and digit labels, train (augmented) and held out."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def split_digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed 1400 / 397 split of the 1797 digits, pixels scaled to [0, 1]."""
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    tr, te = perm[:N_TRAIN], perm[N_TRAIN:]
    return x[tr], data.target[tr], x[te], data.target[te]


def augment(x: np.ndarray, y: np.ndarray, copies: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The images plus ``copies`` shifted copies (random roll of -1, 0 or +1 pixel per axis)."""
    xs, ys = [x], [y]
    for _ in range(copies):
        shifts = rng.integers(-1, 2, size=(len(x), 2))
        xs.append(np.stack([np.roll(img, tuple(s), axis=(0, 1)) for img, s in zip(x, shifts)]))
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


def digit_split(copies: int, rng: np.random.Generator) -> DigitSplit:
    """The fixed split with the training images augmented from ``rng``."""
    x_tr, y_tr, x_te, y_te = split_digits()
    x_aug, y_aug = augment(x_tr, y_tr, copies, rng)
    return DigitSplit(x_aug, y_aug, x_te, y_te)


class DigitCNN(nn.Module):
    """conv16 - conv32 - maxpool - conv48 (3x3, ReLU), global average pool, linear head."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(32, 48, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten())
        self.head = nn.Linear(48, n_classes)

    def features(self, x: Tensor) -> Tensor:
        """Pooled features (n, 48) of images (n, 64) or (n, 8, 8)."""
        return self.body(x.reshape(-1, 1, 8, 8))

    def forward(self, x: Tensor) -> Tensor:
        """Logits (n, classes)."""
        return self.head(self.features(x))


def build_model(name: str, gen: torch.Generator) -> nn.Module:
    """An untrained model by name; its initial weights come from ``gen``."""
    if name == "cnn_digit":
        cnn = DigitCNN(10)
        with torch.no_grad():
            for layer in cnn.modules():
                if isinstance(layer, (nn.Conv2d, nn.Linear)):
                    # PyTorch's default init, uniform(+-1/sqrt(fan_in)), drawn from ``gen``.
                    bound = 1.0 / np.sqrt(layer.weight[0].numel())
                    layer.weight.uniform_(-bound, bound, generator=gen)
                    layer.bias.uniform_(-bound, bound, generator=gen)
        return cnn
    return FeatureMLP((64, 128, 64), 10 if name == "mlp_digit" else 2, gen)


def task_labels(name: str, y: np.ndarray) -> np.ndarray:
    """Digit class, or parity (1 = odd) for ``mlp_parity``."""
    return y % 2 if name == "mlp_parity" else y


def train_model(name: str, data: DigitSplit, steps: int, gen: torch.Generator) -> nn.Module:
    """Adam 3e-3, batch 128, ``steps`` rounded to whole epochs over the augmented images."""
    model = build_model(name, gen)
    epochs = max(1, round(steps * MODEL_BATCH / len(data.x_train)))
    x = data.x_train.reshape(len(data.x_train), -1)
    return fit(model, x, task_labels(name, data.y_train), epochs, gen, lr=MODEL_LR, batch=MODEL_BATCH)


@torch.no_grad()
def accuracy(name: str, model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Held-out accuracy of ``model`` on its own task."""
    logits = model(torch.as_tensor(x.reshape(len(x), -1)))
    return float((logits.argmax(1).numpy() == task_labels(name, y)).mean())


@torch.no_grad()
def features(model: nn.Module, x: np.ndarray) -> Tensor:
    """Penultimate activations (n, d) of images ``x``."""
    return model.features(torch.as_tensor(x.reshape(len(x), -1)))
