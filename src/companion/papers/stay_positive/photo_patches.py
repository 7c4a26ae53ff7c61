"""Real photos bundled in pip packages, cut into patches, with JPEG and synthetic "generators".

The photos come from scikit-learn's ``load_sample_images`` and the images that the scikit-image
wheel ships in ``skimage/data`` (nothing is downloaded). Each photo is downscaled 2x by 2x2 box
averaging, which wipes out the JPEG/demosaicing traces some of the source files carry, and split
by columns into a train/validation part (left) and a test part (right).

Images are float arrays in [0, 1]; batches of patches have shape ``(n, size, size, 3)``.
"""

from __future__ import annotations

import io
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, JpegImagePlugin

# Only files present in the scikit-image wheel: the other skimage.data loaders fetch from the web.
SKIMAGE_RGB = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry",
               "hubble_deep_field", "retina")
SKIMAGE_GREY = ("camera", "moon", "coins", "grass", "gravel", "brick")
SKLEARN_IMAGES = ("china.jpg", "flower.jpg")
TRAIN_FRACTION = 0.7
TCONV_KERNEL_SEED = 20250211  # fixed: a generator's fingerprint must not change with the run seed
CAMERA_TRACE_SEED = 20251205  # fixed: the camera's trace must not change with the run seed


def image_names() -> tuple[str, ...]:
    """The allow-list of bundled photos, in loading order."""
    return SKLEARN_IMAGES + SKIMAGE_RGB + SKIMAGE_GREY


def box_downscale2(img: np.ndarray) -> np.ndarray:
    """Average every aligned 2x2 block: ``(H, W, C) -> (H // 2, W // 2, C)``."""
    h, w = img.shape[0] // 2 * 2, img.shape[1] // 2 * 2
    x = img[:h, :w]
    return 0.25 * (x[0::2, 0::2] + x[1::2, 0::2] + x[0::2, 1::2] + x[1::2, 1::2])


def _as_rgb_float(img: np.ndarray) -> np.ndarray:
    """uint8 grey or RGB(A) -> float RGB in [0, 1]."""
    x = np.asarray(img)
    if x.ndim == 2:
        x = np.repeat(x[:, :, None], 3, axis=2)
    return x[:, :, :3].astype(np.float64) / 255.0


@lru_cache(maxsize=1)
def load_real_images() -> tuple[np.ndarray, ...]:
    """Every allow-listed photo as float RGB in [0, 1], downscaled 2x; cached per process."""
    from skimage import data as skdata
    from sklearn.datasets import load_sample_images

    sk = load_sample_images()
    by_file = dict(zip((f.rsplit("/", 1)[-1] for f in sk.filenames), sk.images))
    raw = [by_file[name] for name in SKLEARN_IMAGES]
    raw += [getattr(skdata, name)() for name in SKIMAGE_RGB + SKIMAGE_GREY]
    return tuple(box_downscale2(_as_rgb_float(x)) for x in raw)


def column_ranges(width: int, split: str, size: int) -> tuple[int, int]:
    """Allowed left-edge offsets ``[lo, hi)`` of a ``size``-wide crop in the given split."""
    cut = int(TRAIN_FRACTION * width)
    if split == "train":
        return 0, cut - size + 1
    if split == "test":
        return cut, width - size + 1
    raise ValueError(f"split must be 'train' or 'test', not {split!r}")


def make_patches(imgs: tuple[np.ndarray, ...], n: int, split: str, rng: np.random.Generator,
                 size: int) -> np.ndarray:
    """``n`` random ``size x size`` crops from the split's columns, images chosen uniformly."""
    out = np.empty((n, size, size, 3))
    which = rng.integers(len(imgs), size=n)
    for k, i in enumerate(which):
        img = imgs[i]
        lo, hi = column_ranges(img.shape[1], split, size)
        r = rng.integers(0, img.shape[0] - size + 1)
        c = rng.integers(lo, hi)
        out[k] = img[r:r + size, c:c + size]
    return out


def q8(x: np.ndarray) -> np.ndarray:
    """Quantize to the 256 uint8 levels, staying float in [0, 1]."""
    return np.round(np.clip(x, 0.0, 1.0) * 255.0) / 255.0


def _to_uint8(x: np.ndarray) -> np.ndarray:
    return np.round(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)


def jpeg_bytes(x: np.ndarray, quality: int) -> bytes:
    """Encode one ``(H, W, 3)`` patch with Pillow at ``quality``, 4:4:4 (no chroma subsampling)."""
    buf = io.BytesIO()
    # 4:2:0 would upsample chroma 2x, i.e. put the fake artifact onto the reals.
    Image.fromarray(_to_uint8(x)).save(buf, format="JPEG", quality=int(quality), subsampling=0)
    return buf.getvalue()


def jpeg(x: np.ndarray, quality: int) -> np.ndarray:
    """JPEG round trip of one patch: ``(H, W, 3)`` float -> decoded float in [0, 1]."""
    with Image.open(io.BytesIO(jpeg_bytes(x, quality))) as im:
        return np.asarray(im, dtype=np.float64) / 255.0


def jpeg_batch(x: np.ndarray, qualities: np.ndarray | int) -> np.ndarray:
    """JPEG round trip of every patch in ``(n, H, W, 3)``, one quality each (or one for all)."""
    qs = np.broadcast_to(np.asarray(qualities), (len(x),))
    return np.stack([jpeg(p, int(q)) for p, q in zip(x, qs)]) if len(x) else x.copy()


def jpeg_sampling(x: np.ndarray, quality: int) -> int:
    """Pillow's chroma-subsampling code of the encoded patch (0 means 4:4:4)."""
    with Image.open(io.BytesIO(jpeg_bytes(x, quality))) as im:
        return JpegImagePlugin.get_sampling(im)


def avg_pool2(x: np.ndarray) -> np.ndarray:
    """2x2 average pooling of a batch: ``(n, H, W, 3) -> (n, H/2, W/2, 3)``."""
    return 0.25 * (x[:, 0::2, 0::2] + x[:, 1::2, 0::2] + x[:, 0::2, 1::2] + x[:, 1::2, 1::2])


def generator_nearest(x: np.ndarray) -> np.ndarray:
    """Fake of each patch: 2x2 average pool, nearest 2x upsampling, uint8 levels; same shape."""
    return q8(avg_pool2(x).repeat(2, axis=1).repeat(2, axis=2))


@lru_cache(maxsize=8)
def tconv_kernel(eps: float) -> np.ndarray:
    """The 4x4 transposed-conv kernel: bilinear plus ``eps`` times a fixed zero-mean pattern."""
    tap = np.array([0.25, 0.75, 0.75, 0.25])
    noise = np.random.default_rng(TCONV_KERNEL_SEED).standard_normal((4, 4))
    noise -= noise.mean()
    # Scaled so eps = 1 perturbs as much as the largest bilinear tap.
    return np.outer(tap, tap) + eps * 0.5625 * noise / np.abs(noise).max()


def generator_tconv(x: np.ndarray, eps: float) -> np.ndarray:
    """Fake of each patch: 2x2 average pool, then a stride-2 depthwise transposed conv decoder."""
    low = torch.from_numpy(avg_pool2(x)).permute(0, 3, 1, 2)
    low = F.pad(low, (1, 1, 1, 1), mode="replicate")  # without it the border comes out dark
    k = torch.from_numpy(tconv_kernel(float(eps))).expand(3, 1, 4, 4)
    up = F.conv_transpose2d(low, k, stride=2, padding=1, groups=3)[:, :, 2:-2, 2:-2]
    return q8(up.permute(0, 2, 3, 1).numpy())


@lru_cache(maxsize=4)
def camera_trace(size: int) -> np.ndarray:
    """A fixed zero-mean ``(size, size, 3)`` pattern of unit s.d., constant on aligned 2x2 blocks.

    The trace world's "camera" adds it to every real patch. Being constant on the blocks the nearest decoder
    copies, it leaves that decoder's fingerprint intact: a detector that never saw it on reals has no
    reason to read it, one that did can learn it as evidence for real.
    """
    p = np.random.default_rng(CAMERA_TRACE_SEED).standard_normal((size // 2, size // 2, 3))
    p = p.repeat(2, axis=0).repeat(2, axis=1)
    return (p - p.mean()) / p.std()


def add_trace(x: np.ndarray, sd_levels: float) -> np.ndarray:
    """Every patch of ``(n, H, W, 3)`` plus the camera trace at ``sd_levels`` 8-bit levels of s.d., uint8 levels."""
    return q8(x + sd_levels / 255.0 * camera_trace(x.shape[1]))


def inpaint(real: np.ndarray, fake: np.ndarray, size: int) -> np.ndarray:
    """Replace the central ``size x size`` block of each real patch by the same block of ``fake``."""
    h = real.shape[1]
    a = (h - size) // 2
    out = real.copy()
    out[:, a:a + size, a:a + size] = fake[:, a:a + size, a:a + size]
    return out
