"""The synthetic single-token QA mixture: learnable, hard and memorised operations with knowledge gaps.

Inputs are ``BOS OP a b c SEP`` with digits a, b, c; the answer is one digit token. ``SUM`` and ``MAX``
are learnable, ``MUL`` (a b c mod 10) is harder, ``FACT`` is a seeded random lookup table (the
analogue of knowledge): only the ``fact_seen_frac`` "known" triples appear in pre-training, and the
Self-REF, validation and test splits draw FACT items half from known facts and half from triples the
model has never seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DIGITS = tuple(str(d) for d in range(10))
OPS = ("SUM", "MAX", "MUL", "FACT")
SPECIAL = ("BOS", "SEP", "EOS", "PAD", "UNK")
CONFIDENCE = ("<CN>", "<UN>")
N_TRIPLES = 1000
SPLIT_SHARES = {"P": 0.60, "S": 0.25, "V": 0.05, "T": 0.10}


@dataclass(frozen=True)
class Vocab:
    """A word-level vocabulary: token strings in id order."""

    tokens: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.tokens)

    def id(self, token: str) -> int:
        """The id of ``token`` (a KeyError names the missing token)."""
        try:
            return self.tokens.index(token)
        except ValueError:
            raise KeyError(f"token {token!r} is not in the vocabulary") from None

    def with_tokens(self, new: tuple[str, ...]) -> "Vocab":
        """This vocabulary with the tokens of ``new`` that it lacks appended (each exactly once)."""
        return Vocab(self.tokens + tuple(t for t in dict.fromkeys(new) if t not in self.tokens))

    def digit_of(self, ids: np.ndarray) -> np.ndarray:
        """The answer extractor: the digit value of each token id, -1 for any non-digit token."""
        ids = np.asarray(ids)
        return np.where((ids >= 0) & (ids < 10), ids, -1)


def base_vocab() -> Vocab:
    """Digits 0-9 (ids 0-9), the four operations, BOS SEP EOS PAD UNK: 19 tokens, no confidence tokens."""
    return Vocab(DIGITS + OPS + SPECIAL)


def triples() -> np.ndarray:
    """All 1000 digit triples (a, b, c), index = 100 a + 10 b + c; shape (1000, 3)."""
    i = np.arange(N_TRIPLES)
    return np.stack([i // 100, (i // 10) % 10, i % 10], axis=1)


def answers(op: str, abc: np.ndarray, fact_table: np.ndarray) -> np.ndarray:
    """Gold answer digits of ``op`` on triples ``abc`` (n, 3)."""
    a, b, c = abc.T
    if op == "SUM":
        return (a + b + c) % 10
    if op == "MAX":
        return np.maximum(np.maximum(a, b), c)
    if op == "MUL":
        return (a * b * c) % 10
    if op == "FACT":
        return fact_table[100 * a + 10 * b + c]
    raise ValueError(f"unknown operation {op!r}; allowed: {', '.join(OPS)}")


@dataclass(frozen=True)
class Split:
    """QA items: operation index into OPS, the triple, the gold digit, and for FACT whether it is known."""

    op: np.ndarray  # (n,) index into OPS
    abc: np.ndarray  # (n, 3)
    gold: np.ndarray  # (n,)
    known: np.ndarray  # (n,) bool: FACT item whose triple appears in P (True for non-FACT ops)

    def __len__(self) -> int:
        return len(self.op)

    def take(self, idx: np.ndarray) -> "Split":
        """The items at ``idx``."""
        return Split(self.op[idx], self.abc[idx], self.gold[idx], self.known[idx])

    def prompts(self, vocab: Vocab, unk_op: np.ndarray | None = None, unk_pos: np.ndarray | None = None) -> np.ndarray:
        """Token ids ``BOS OP a b c SEP`` (n, 6); optional UNK for the operation or one operand."""
        n = len(self)
        out = np.empty((n, 6), dtype=np.int64)
        out[:, 0] = vocab.id("BOS")
        out[:, 1] = np.array([vocab.id(OPS[o]) for o in self.op], dtype=np.int64).reshape(n)
        out[:, 2:5] = self.abc
        out[:, 5] = vocab.id("SEP")
        if unk_op is not None:
            out[unk_op, 1] = vocab.id("UNK")
        if unk_pos is not None:
            rows = np.flatnonzero(unk_pos >= 0)
            out[rows, 2 + unk_pos[rows]] = vocab.id("UNK")
        return out


def concat(parts: list[Split]) -> Split:
    """One split made of several."""
    return Split(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("op", "abc", "gold", "known")))


@dataclass(frozen=True)
class Mixture:
    """The four splits of one seed, the FACT table, the known-fact mask and the unanswerable prompts."""

    P: Split
    S: Split
    V: Split
    T: Split
    fact_table: np.ndarray  # (1000,)
    fact_known: np.ndarray  # (1000,) bool
    unanswerable: Split  # items whose prompts get UNK (see unk_op / unk_pos)
    unk_op: np.ndarray  # (m,) bool: OP replaced by UNK
    unk_pos: np.ndarray  # (m,) operand replaced by UNK (0..2), -1 when the OP is


def make_mixture(ops: tuple[str, ...], fact_seen_frac: float, rng: np.random.Generator,
                 n_unanswerable: int = 200) -> Mixture:
    """Disjoint P/S/V/T splits over (a, b, c) per learnable op; FACT with known and unknown triples."""
    abc = triples()
    table = rng.integers(0, 10, N_TRIPLES)
    n_known = int(round(fact_seen_frac * N_TRIPLES))
    perm = rng.permutation(N_TRIPLES)
    known_mask = np.zeros(N_TRIPLES, dtype=bool)
    known_mask[perm[:n_known]] = True
    sizes = {k: int(round(v * N_TRIPLES)) for k, v in SPLIT_SHARES.items()}
    parts: dict[str, list[Split]] = {k: [] for k in sizes}
    for o, op in enumerate(OPS):
        if op not in ops:
            continue
        if op != "FACT":
            order = rng.permutation(N_TRIPLES)
            at = 0
            for k, n in sizes.items():
                idx = order[at:at + n]
                at += n
                parts[k].append(Split(np.full(n, o), abc[idx], answers(op, abc[idx], table), np.ones(n, bool)))
            continue
        known, unknown = rng.permutation(perm[:n_known]), rng.permutation(perm[n_known:])
        parts["P"].append(Split(np.full(len(known), o), abc[known], table[known], np.ones(len(known), bool)))
        at = 0
        for k in ("S", "V", "T"):
            half = sizes[k] // 2
            kn = rng.choice(known, min(half, len(known)), replace=False) if len(known) else known[:0]
            un = unknown[at:at + min(half, len(unknown) - at)]
            at += len(un)
            idx = np.concatenate([kn, un])
            parts[k].append(Split(np.full(len(idx), o), abc[idx], table[idx],
                                  np.concatenate([np.ones(len(kn), bool), np.zeros(len(un), bool)])))
    splits = {k: concat(v) for k, v in parts.items()}
    # routing breaks score ties by index: in operation order, an operation-level score would route SUM
    # (or known facts) first; shuffled, its ties fall at random within an operation
    test = splits["T"].take(rng.permutation(len(splits["T"])))
    pick = rng.integers(0, len(test), n_unanswerable)
    unk_op = np.zeros(n_unanswerable, dtype=bool)
    unk_op[: n_unanswerable // 2] = True
    unk_pos = np.where(unk_op, -1, rng.integers(0, 3, n_unanswerable))
    return Mixture(splits["P"], splits["S"], splits["V"], test, table, known_mask, test.take(pick), unk_op, unk_pos)
