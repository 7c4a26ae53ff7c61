"""Procedural faces: a vectorised numpy renderer whose attributes can be varied one at a time.

Stands in for GAN-Control (the paper's controllable face generator): every face is built from
soft ellipse masks (head, hair cap, eyes, nose, a mouth parabola) on a [-1, 1]^2 grid, then the
photometric operations (illumination gradient, brightness, contrast, YIQ hue rotation) and a
clip to [0, 1]. Identity parameters are fixed per identity; attributes vary within an identity.
Written by hand (the spec's design); the paper used GAN-Control images, which need a GPU and weights.
"""

from __future__ import annotations

import numpy as np

# identity parameters: name -> (lo, hi), sampled uniformly once per identity
IDENTITY_RANGES: dict[str, tuple[float, float]] = {
    "face_w": (0.55, 0.8), "face_h": (0.7, 0.9), "eye_sp": (0.25, 0.45), "eye_h": (-0.2, 0.0),
    "eye_r": (0.06, 0.10), "nose_len": (0.10, 0.25), "mouth_w": (0.20, 0.45), "mouth_h": (0.35, 0.50),
    "hairline": (-0.75, -0.45), "skin_hue": (0.0, 0.15), "skin_val": (0.55, 0.9),
}
# within-identity attributes: name -> test range (lo, hi)
ATTRIBUTES: dict[str, tuple[float, float]] = {
    "pose": (-0.12, 0.12), "expression": (-1.0, 1.0), "hair_hue": (0.0, 1.0), "illum": (-0.5, 0.5),
    "brightness": (-0.2, 0.2), "contrast": (0.6, 1.4), "hue": (-0.5 * np.pi, 0.5 * np.pi),
}
NEUTRAL = {"pose": 0.0, "expression": 0.0, "hair_hue": 0.08, "illum": 0.0, "brightness": 0.0,
           "contrast": 1.0, "hue": 0.0}
PHOTOMETRIC = ("illum", "brightness", "contrast", "hue")
# base training: facial attributes over the full range, photometric ones narrow (the spec's choice)
BASE_RANGES = {**ATTRIBUTES, "brightness": (-0.1, 0.1), "contrast": (0.85, 1.15), "hue": (-0.1 * np.pi, 0.1 * np.pi)}
# targeted augmentation: the widened range of each attribute that a fine-tune may augment
AUG_RANGES = {"contrast": (0.3, 1.7), "hue": (-0.6 * np.pi, 0.6 * np.pi), "brightness": (-0.4, 0.4),
              "illum": (-0.9, 0.9)}

_YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
_YIQ_INV = np.linalg.inv(_YIQ)


def sample_identities(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` identities: each identity parameter drawn uniformly from its range."""
    return {k: rng.uniform(lo, hi, n) for k, (lo, hi) in IDENTITY_RANGES.items()}


def sample_attributes(n: int, rng: np.random.Generator, ranges: dict[str, tuple[float, float]] | None = None
                      ) -> dict[str, np.ndarray]:
    """``n`` attribute settings drawn uniformly from ``ranges`` (default: the test ranges)."""
    ranges = ranges or ATTRIBUTES
    return {k: rng.uniform(*ranges[k], n) for k in ATTRIBUTES}


def take(ids: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """The identity parameters of the identities at ``index`` (one row per face)."""
    return {k: v[index] for k, v in ids.items()}


def hsv_to_rgb(h: np.ndarray, s: np.ndarray | float, v: np.ndarray | float) -> np.ndarray:
    """Vectorised HSV -> RGB for arrays of shape (B,); returns (B, 3)."""
    h = np.mod(h, 1.0)
    s, v = np.broadcast_to(s, h.shape), np.broadcast_to(v, h.shape)
    k = np.mod(np.array([5.0, 3.0, 1.0])[None, :] + 6.0 * h[:, None], 6.0)
    return v[:, None] - v[:, None] * s[:, None] * np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0)


def _soft(inside: np.ndarray, px: float) -> np.ndarray:
    """A soft mask from a signed 'inside' distance (positive inside), one pixel wide at the edge."""
    return np.clip(0.5 + inside / px, 0.0, 1.0)


def hue_rotate(img: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Rotate the chroma (I, Q) of YIQ by ``angle`` per image; Y is untouched; no clipping."""
    yiq = img @ _YIQ.T
    c, s = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    i, q = yiq[..., 1], yiq[..., 2]
    yiq = np.stack([yiq[..., 0], c * i - s * q, s * i + c * q], axis=-1)
    return yiq @ _YIQ_INV.T


def photometric(img: np.ndarray, attrs: dict[str, np.ndarray], xs: np.ndarray) -> np.ndarray:
    """Illumination gradient, brightness, contrast about the image mean, hue rotation (unclipped)."""
    img = img * (1.0 + attrs["illum"][:, None, None, None] * xs[None, :, :, None])
    img = img + attrs["brightness"][:, None, None, None]
    mean = img.mean(axis=(1, 2, 3), keepdims=True)
    img = (img - mean) * attrs["contrast"][:, None, None, None] + mean
    return hue_rotate(img, attrs["hue"])


def render(ids: dict[str, np.ndarray], attrs: dict[str, np.ndarray], size: int = 32) -> np.ndarray:
    """Faces (B, size, size, 3) float32 in [0, 1] from per-face identity parameters and attributes."""
    B = len(attrs["pose"])
    lin = (np.arange(size) + 0.5) / size * 2.0 - 1.0
    ys, xs = np.meshgrid(lin, lin, indexing="ij")
    px = 2.0 / size
    X, Y = xs[None], ys[None]
    col = lambda a: np.asarray(a, dtype=np.float64)[:, None, None]  # noqa: E731  (B,) -> (B, 1, 1)
    fw, fh = col(ids["face_w"]), col(ids["face_h"])
    dx = col(attrs["pose"])
    # head ellipse (stays put); the features shift horizontally with pose
    r_head = np.sqrt((X / fw) ** 2 + (Y / fh) ** 2)
    head = _soft((1.0 - r_head) * np.minimum(fw, fh), px)
    hair_line = col(ids["hairline"]) + 0.15 * (X / fw) ** 2
    r_cap = np.sqrt((X / (1.12 * fw)) ** 2 + (Y / (1.12 * fh)) ** 2)
    hair = _soft((1.0 - r_cap) * np.minimum(fw, fh), px) * _soft(hair_line - Y, px)
    ex, ey, er = col(ids["eye_sp"]) / 2, col(ids["eye_h"]), col(ids["eye_r"])
    eyes = np.maximum(_soft(er - np.sqrt((X - dx - ex) ** 2 + (Y - ey) ** 2), px),
                      _soft(er - np.sqrt((X - dx + ex) ** 2 + (Y - ey) ** 2), px))
    nl = col(ids["nose_len"])
    nose = _soft(1.0 - np.sqrt(((X - dx) / 0.05) ** 2 + ((Y - ey - nl / 2 - 0.04) / (nl / 2)) ** 2), px * 8)
    mw, mh = col(ids["mouth_w"]), col(ids["mouth_h"])
    u = (X - dx) / (mw / 2)
    curve = mh - 0.1 * col(attrs["expression"]) * (1.0 - u ** 2)
    mouth = _soft(0.035 - np.abs(Y - curve), px) * _soft(1.0 - np.abs(u), px * 4)
    skin = hsv_to_rgb(ids["skin_hue"], 0.45, ids["skin_val"])[:, None, None, :]
    hair_rgb = hsv_to_rgb(attrs["hair_hue"], 0.75, 0.55)[:, None, None, :]
    img = np.full((B, size, size, 3), 0.3)
    img = img + head[..., None] * (skin - img)
    img = img + (nose * head)[..., None] * (0.72 * skin - img)
    img = img + hair[..., None] * (hair_rgb - img)
    img = img + (eyes * head)[..., None] * (np.array([0.08, 0.06, 0.05]) - img)
    img = img + (mouth * head)[..., None] * (np.array([0.62, 0.16, 0.18]) - img)
    img = photometric(img, attrs, xs)
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def neutral_attributes(n: int) -> dict[str, np.ndarray]:
    """``n`` copies of the neutral attribute setting (no photometric change)."""
    return {k: np.full(n, v, dtype=np.float64) for k, v in NEUTRAL.items()}


def stencil(attr: str, C: int, h_frac: float, rng: np.random.Generator,
            ranges: dict[str, tuple[float, float]] | None = None) -> tuple[dict[str, np.ndarray], float]:
    """3-point stencils along ``attr``: 3C attribute settings (minus, centre, plus blocks) and the step h.

    The C centres draw every attribute from ``ranges`` (test ranges by default), the target one from
    [lo + h, hi - h]; the three settings of a curve differ only in ``attr``, by exactly -h, 0, +h.
    """
    ranges = ranges or ATTRIBUTES
    lo, hi = ranges[attr]
    h = h_frac * (hi - lo)
    centre = sample_attributes(C, rng, ranges)
    centre[attr] = rng.uniform(lo + h, hi - h, C)
    out = {k: np.concatenate([v, v, v]) for k, v in centre.items()}
    out[attr] = np.concatenate([centre[attr] - h, centre[attr], centre[attr] + h])
    return out, h
