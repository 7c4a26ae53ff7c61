"""torchvision's ResNet-18/34/50 and its test transforms, declared here with torchvision's names.

Written by hand because torchvision cannot be a dependency: its PyPI wheels are built against the
CUDA build of torch and fail to import next to the CPU build that this project installs. The
modules below carry torchvision's attribute names and shapes (``conv1``, ``bn1``, ``layer1``-``layer4``
of ``BasicBlock`` / ``Bottleneck`` v1.5 with ``downsample.0/1``, ``fc``), so a ``state_dict`` saved from
``torchvision.models.resnet18/34/50`` loads unchanged (strict). The transforms repeat torchvision's
``Resize`` (bilinear; an int resizes the shorter side), ``CenterCrop``, ``ToTensor`` and ``Normalize``
with PIL and torch.

Used by ood-dcc (torchvision checkpoints) and stay-positive (the fake-image detectors' "res50nodown",
GRIP-UNINA's ResNet-50 without down-sampling in the stem: ``conv1`` 7x7 with stride 1 and a 3x3
max-pool with stride 1, as ``stride0=1`` does in the official ``networks/resnet_mod.py`` of
``AniSundar18/AlignedForensics``; its other modules and their names are torchvision's).
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch import Tensor, nn

LAYERS = {"resnet18": ("basic", (2, 2, 2, 2)), "resnet34": ("basic", (3, 4, 6, 3)),
          "resnet50": ("bottleneck", (3, 4, 6, 3))}


def _conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (expansion 1)."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int, downsample: nn.Module | None) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(cin, planes, 3, stride), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = _conv(planes, planes, 3), nn.BatchNorm2d(planes)
        self.relu, self.downsample = nn.ReLU(inplace=True), downsample

    def forward(self, x: Tensor) -> Tensor:
        """relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))."""
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    """1x1, 3x3 (strided, torchvision's v1.5) and 1x1 convolutions with a residual connection (expansion 4)."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int, downsample: nn.Module | None) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(cin, planes, 1), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = _conv(planes, planes, 3, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = _conv(planes, planes * 4, 1), nn.BatchNorm2d(planes * 4)
        self.relu, self.downsample = nn.ReLU(inplace=True), downsample

    def forward(self, x: Tensor) -> Tensor:
        """The bottleneck branch plus the shortcut, then ReLU."""
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn3(self.conv3(self.relu(self.bn2(self.conv2(out)))))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """torchvision's ResNet; ``cifar_stem``: a 3x3/1 stem without max-pool (CIFAR); ``nodown``: the 7x7 stem and max-pool at stride 1."""

    def __init__(self, arch: str, num_classes: int = 1000, cifar_stem: bool = False, nodown: bool = False) -> None:
        super().__init__()
        kind, depths = LAYERS[arch]
        block = BasicBlock if kind == "basic" else Bottleneck
        stride0 = 1 if nodown else 2
        self.conv1 = _conv(3, 64, 3) if cifar_stem else nn.Conv2d(3, 64, 7, stride=stride0, padding=3, bias=False)
        self.bn1, self.relu = nn.BatchNorm2d(64), nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if cifar_stem else nn.MaxPool2d(3, stride=stride0, padding=1)
        cin = 64
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), depths)):
            stride = 1 if i == 0 else 2
            blocks = []
            for j in range(n):
                s = stride if j == 0 else 1
                down = None
                if s != 1 or cin != planes * block.expansion:
                    width = planes * block.expansion
                    down = nn.Sequential(_conv(cin, width, 1, s), nn.BatchNorm2d(width))
                blocks.append(block(cin, planes, s, down))
                cin = planes * block.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def features(self, x: Tensor) -> Tensor:
        """The pooled post-ReLU penultimate feature (B, D) of normalised images (B, 3, H, W)."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)

    def forward(self, x: Tensor) -> Tensor:
        """Logits of normalised images (B, 3, H, W); ``fc`` reads the pooled penultimate feature."""
        return self.fc(self.features(x))


def resize(img: Image.Image, size: int | tuple[int, int]) -> Image.Image:
    """torchvision ``Resize``: an int matches the shorter side (aspect kept), a pair is (height, width); bilinear."""
    if isinstance(size, tuple):
        h, w = size
    else:
        W, H = img.size
        h, w = (int(size * H / W), size) if W <= H else (size, int(size * W / H))
    return img.resize((w, h), Image.BILINEAR)


def center_crop(img: Image.Image, size: int) -> Image.Image:
    """torchvision ``CenterCrop`` of a square ``size`` (offsets rounded as torchvision does)."""
    W, H = img.size
    top, left = int(round((H - size) / 2.0)), int(round((W - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def to_normalised_tensor(img: Image.Image, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """torchvision ``ToTensor`` then ``Normalize``: (3, H, W) float32."""
    x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
    return (x - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
