"""The ``paper`` preset: the official pre-computed suitability signals of WILDS models (FMoW, RxRx1).

The official repository (``cleverhans-lab/suitability``, MIT) ships, for each data set, training
algorithm and model seed, the 12 suitability signals and the correctness of the WILDS model on
every evaluation split, ``results/features/<data>_<algorithm>_last_<seed>.pkl`` = {split:
(signals (n, 12) float32, correct (n,) bool)}, and the user subsets as index lists into a split,
``results/split_indices/*.pkl`` = {(split, filter): [indices]}. ``data_path`` is that ``results/``
folder (``companion fetch suitability-filter`` downloads it); the pickles are unpickled, so point it
only at files you trust.

Follows the official evaluation notebook (``wilds_experiments.ipynb``): FMoW's ID user subsets
(year or region groups of ``id_val`` / ``id_test``) are each compared with a source pool made of the
rest of their split plus the other ID split, its OOD subsets (``val`` / ``test``) with ``id_val`` +
``id_test``; RxRx1's ID subsets (cell types of ``id_test``) with the rest of ``id_test``, its OOD
subsets with ``id_test``. Each pool is shuffled into F equal folds of ``len(pool) // F`` and every
ordered (D_sf, D_test) pair is tested; all user subsets of one pool (FMoW's 30 OOD subsets) share that
one shuffle, where the official notebook reshuffles the pool for each user subset. Ours: C is
fitted once per pool and D_sf fold and reused for every D_test fold (the official code refits it
per pair, which differs only in the calibration's cross-validation split); the margin-adjustment diagnostic's labeled D̂_u is a random
``n_labeled_user`` subset of the user subset itself, since the real data have no separate draw.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATASETS = ("fmow", "rxrx1")
ALGORITHMS = ("ERM", "IRM", "groupDRO")
ID_SPLITS = {"fmow": ("id_val", "id_test"), "rxrx1": ("id_test",)}
SPLIT_FILES = {"fmow": ("fmow_id.pkl", "fmow_ood.pkl"), "rxrx1": ("rxrx1.pkl",)}


def features_file(root: Path, dataset: str, algorithm: str, seed: int) -> Path:
    """Where the official signals of one model seed lie under ``root`` (the official ``results/``)."""
    return root / "features" / f"{dataset}_{algorithm}_last_{seed}.pkl"


def split_files(root: Path, dataset: str) -> list[Path]:
    """The official user-subset index files of ``dataset`` under ``root``."""
    return [root / "split_indices" / name for name in SPLIT_FILES[dataset]]


def load_features(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{split: (signals (n, 12) float64, correct (n,) bool)} from one official features pickle."""
    with path.open("rb") as f:
        raw = pickle.load(f)
    return {k: (np.asarray(v[0], dtype=np.float64), np.asarray(v[1], dtype=bool)) for k, v in raw.items()}


def load_subsets(paths: list[Path]) -> list[tuple[str, str, np.ndarray]]:
    """(split, filter, indices) of every user subset in the official index files, in file order."""
    out = []
    for path in paths:
        with path.open("rb") as f:
            out += [(split, flt, np.asarray(idx, dtype=np.int64)) for (split, flt), idx in pickle.load(f).items()]
    return out


@dataclass
class UserSet:
    """One user subset: its name, ID or OOD, signals (n, 12) and correctness (n,)."""

    label: str
    kind: str
    signals: np.ndarray
    correct: np.ndarray


@dataclass
class PoolGroup:
    """User sets tested against the same source pool (signals (n, 12), correctness (n,))."""

    signals: np.ndarray
    correct: np.ndarray
    users: list[UserSet]


def pool_groups(dataset: str, feats: dict[str, tuple[np.ndarray, np.ndarray]],
                subsets: list[tuple[str, str, np.ndarray]]) -> list[PoolGroup]:
    """The OOD user sets with the shared ID pool first, then each ID user set with the pool it leaves."""
    ids = ID_SPLITS[dataset]
    shared = PoolGroup(np.concatenate([feats[s][0] for s in ids]), np.concatenate([feats[s][1] for s in ids]), [])
    own = []
    for split, flt, idx in subsets:
        s, c = feats[split]
        user = UserSet(f"{split} {flt}", "id" if split in ids else "ood", s[idx], c[idx])
        if split not in ids:
            shared.users.append(user)
            continue
        keep = np.setdiff1d(np.arange(len(c)), idx)
        rest = [feats[o] for o in ids if o != split]
        own.append(PoolGroup(np.concatenate([s[keep], *[r[0] for r in rest]]),
                             np.concatenate([c[keep], *[r[1] for r in rest]]), [user]))
    return ([shared] if shared.users else []) + own


def folds(n: int, n_folds: int, rng: np.random.Generator) -> np.ndarray:
    """Shuffled equal folds of a pool of ``n`` (the remainder of n // n_folds is left out), (F, n // F)."""
    size = n // n_folds
    return rng.permutation(n)[: n_folds * size].reshape(n_folds, size)
