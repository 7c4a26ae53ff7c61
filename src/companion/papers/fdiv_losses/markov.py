"""Sparse order-2 Markov sources: token sequences whose true next-token law is sparse and known."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MarkovSource:
    """An order-2 chain over ``vocab`` tokens: ``table[a, b]`` is the law of the token after (a, b)."""

    table: np.ndarray  # (vocab, vocab, vocab), rows sum to 1

    @property
    def vocab(self) -> int:
        """Number of tokens."""
        return self.table.shape[-1]


def sparse_markov_table(vocab: int, support_min: int, support_max: int, concentration: float,
                        rng: np.random.Generator) -> MarkovSource:
    """Each context gets a random support of size U{min..max} with Dirichlet weights on it."""
    if not 1 <= support_min <= support_max <= vocab:
        raise ValueError(f"need 1 <= support_min <= support_max <= vocab, got {support_min}, {support_max}, {vocab}")
    table = np.zeros((vocab, vocab, vocab))
    sizes = rng.integers(support_min, support_max + 1, size=(vocab, vocab))
    for a in range(vocab):
        for b in range(vocab):
            support = rng.choice(vocab, size=sizes[a, b], replace=False)
            table[a, b, support] = rng.dirichlet(np.full(sizes[a, b], concentration))
    return MarkovSource(table)


def perturb(source: MarkovSource, share: float, support_max: int, rng: np.random.Generator) -> MarkovSource:
    """A copy in which a ``share`` of the contexts get a freshly drawn sparse law."""
    vocab = source.vocab
    fresh = sparse_markov_table(vocab, 2, support_max, 0.5, rng).table
    redraw = rng.random((vocab, vocab)) < share
    return MarkovSource(np.where(redraw[..., None], fresh, source.table))


def sample_sequences(source: MarkovSource, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` sequences of ``length`` tokens; the first two are uniform, the rest follow the chain."""
    vocab = source.vocab
    seqs = np.empty((n, length), dtype=np.int64)
    seqs[:, :2] = rng.integers(0, vocab, size=(n, 2))
    cdf = np.cumsum(source.table, axis=-1)
    for t in range(2, length):
        rows = cdf[seqs[:, t - 2], seqs[:, t - 1]]
        u = rng.random((n, 1)) * rows[:, -1:]
        seqs[:, t] = np.minimum((rows < u).sum(axis=1), vocab - 1)
    return seqs


def next_token_laws(source: MarkovSource, seqs: np.ndarray) -> np.ndarray:
    """The true law of every token from position 2 on: shape (n, length - 2, vocab)."""
    return source.table[seqs[:, :-2], seqs[:, 1:-1]]


def bayes_accuracy(source: MarkovSource, seqs: np.ndarray) -> float:
    """Expected accuracy of the Bayes predictor (argmax of the true law) on positions >= 2."""
    return float(next_token_laws(source, seqs).max(axis=-1).mean())
