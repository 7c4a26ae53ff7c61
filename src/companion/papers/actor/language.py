"""The synthetic prompt/response language of the toy (spec, "Small-scale reproduction").

Prompts are ``<usr> F X Y F <ast>``: harmful when X is a trigger word T and Y a harmful context H,
pseudo-harmful when X is a trigger and Y a pseudo-harmful context P ("kill a python process"),
benign when X is a neutral word N and Y is N or P (so P words also occur in benign prompts).
Responses: refusal ``sorry cannot help <end>``; compliance ``sure here steps for Y <end>`` (it copies
the context word, which gives the utility metric).

Pseudo-harmful contexts come in ``N_GRADES`` grades of base refusal strength (issue 41): context P_j has
grade j mod 4, and the base model's pseudo-harmful examples with a grade-g context are labelled refuse with
a probability graded from ``pseudo_refusal`` (grade 0, the strongest) down to ``pseudo_refusal_min``
(grade 3). Every grade occurs among the in-distribution (P0..P11) and the OOD (P12..P15) contexts, so a
single shift size cannot fit every pseudo-harmful prompt unless the base model's activations ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

SPECIALS = ("<pad>", "<usr>", "<ast>", "<end>")
RESPONSE_WORDS = ("sorry", "cannot", "help", "sure", "here", "steps", "for")
N_TRIGGER, N_HARM, N_PSEUDO, N_NEUTRAL, N_FILLER = 8, 16, 16, 24, 8
N_PSEUDO_ID = 12  # contexts P0..P11 are in-distribution; P12..P15 are out-of-distribution
PROMPT_LEN = 6
N_GRADES = 4  # context P_j has refusal-strength grade j mod N_GRADES (0: the strongest)
KINDS = ("harmful", "pseudo", "benign")


def _words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


VOCAB: tuple[str, ...] = (*SPECIALS, *RESPONSE_WORDS, *_words("T", N_TRIGGER), *_words("H", N_HARM),
                          *_words("P", N_PSEUDO), *_words("N", N_NEUTRAL), *_words("F", N_FILLER))
ID = {w: i for i, w in enumerate(VOCAB)}
PAD, USR, AST, END = (ID[w] for w in SPECIALS)
SORRY, SURE = ID["sorry"], ID["sure"]
T_IDS = np.array([ID[w] for w in _words("T", N_TRIGGER)])
H_IDS = np.array([ID[w] for w in _words("H", N_HARM)])
P_IDS = np.array([ID[w] for w in _words("P", N_PSEUDO)])
N_IDS = np.array([ID[w] for w in _words("N", N_NEUTRAL)])
F_IDS = np.array([ID[w] for w in _words("F", N_FILLER)])
P_ID_CONTEXTS = P_IDS[:N_PSEUDO_ID]
P_OOD_CONTEXTS = P_IDS[N_PSEUDO_ID:]
REFUSAL = np.array([ID["sorry"], ID["cannot"], ID["help"], END])


def grade(context_ids: np.ndarray) -> np.ndarray:
    """Refusal-strength grade (0 strongest .. N_GRADES-1 weakest) of pseudo-harmful context token ids."""
    return (np.asarray(context_ids) - P_IDS[0]) % N_GRADES


def refusal_probability(context_ids: np.ndarray, strongest: float, weakest: float) -> np.ndarray:
    """Probability that the base model's example with each pseudo-harmful context is labelled refuse:
    linear in the grade, from ``strongest`` (grade 0) to ``weakest`` (the last grade)."""
    return strongest + (weakest - strongest) * grade(context_ids) / (N_GRADES - 1)


def prompts(kind: str, n: int, rng: np.random.Generator, contexts: np.ndarray | None = None,
            exclude: set[tuple[int, int]] | None = None) -> np.ndarray:
    """``n`` prompts (n, 6) of one kind; ``contexts`` restricts Y, ``exclude`` forbids (X, Y) pairs."""
    xs = {"harmful": T_IDS, "pseudo": T_IDS, "benign": N_IDS}[kind]
    ys = contexts if contexts is not None else {"harmful": H_IDS, "pseudo": P_IDS,
                                                "benign": np.concatenate([N_IDS, P_IDS])}[kind]
    pairs = np.array([(x, y) for x in xs for y in ys if not exclude or (x, y) not in exclude])
    if len(pairs) == 0:
        raise ValueError(f"no (X, Y) pair of kind {kind!r} is left after the exclusions")
    pick = pairs[rng.integers(0, len(pairs), n)]
    fill = F_IDS[rng.integers(0, len(F_IDS), (n, 2))]
    out = np.empty((n, PROMPT_LEN), dtype=np.int64)
    out[:, 0], out[:, 1], out[:, 2:4], out[:, 4], out[:, 5] = USR, fill[:, 0], pick, fill[:, 1], AST
    return out


def compliance_response(prompt: np.ndarray) -> np.ndarray:
    """``sure here steps for Y <end>`` for one prompt (Y is the prompt's context word)."""
    return np.array([ID["sure"], ID["here"], ID["steps"], ID["for"], prompt[3], END])


def pairs(prompts_: np.ndarray) -> set[tuple[int, int]]:
    """The (X, Y) pairs of a set of prompts."""
    return {(int(p[2]), int(p[3])) for p in prompts_}


@dataclass(frozen=True)
class Batch:
    """Right-padded prompt + response sequences; ``labels`` are the response tokens, -100 elsewhere."""

    input_ids: Tensor  # (n, T)
    labels: Tensor  # (n, T), next-token targets aligned with input_ids (HF convention: shifted inside)
    mask: Tensor  # (n, T) bool, real tokens

    def __len__(self) -> int:
        return len(self.input_ids)


def with_responses(prompts_: np.ndarray, refuse: np.ndarray) -> Batch:
    """Each prompt followed by the refusal (``refuse[i]``) or its compliance response."""
    seqs = [np.concatenate([p, REFUSAL if r else compliance_response(p)]) for p, r in zip(prompts_, refuse)]
    width = max(map(len, seqs))
    ids = np.full((len(seqs), width), PAD, dtype=np.int64)
    lab = np.full((len(seqs), width), -100, dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        lab[i, PROMPT_LEN:len(s)] = s[PROMPT_LEN:]
    ids_t = torch.from_numpy(ids)
    return Batch(ids_t, torch.from_numpy(lab), ids_t != PAD)


@dataclass(frozen=True)
class SeedData:
    """Everything one seed draws: the base model's training set, ACTOR's queries and the eval sets."""

    base: Batch
    anchors: dict[str, np.ndarray]  # harmful / benign anchor prompts
    train: dict[str, np.ndarray]  # harmful / pseudo (ID contexts) / benign ACTOR training prompts
    eval: dict[str, np.ndarray]  # harmful / pseudo_id / pseudo_ood / benign


def seed_data(seed: int, n_benign: int, n_harm: int, n_pseudo: int, pseudo_refusal: float,
              n_anchor: int, n_train: int, n_eval: int, pseudo_refusal_min: float | None = None) -> SeedData:
    """Draw one seed's sets; the eval sets come from their own RNG stream, ACTOR's from another.

    A pseudo-harmful base example is labelled refuse with :func:`refusal_probability` of its context,
    graded from ``pseudo_refusal`` to ``pseudo_refusal_min`` (``None``: the same for every grade).
    """
    rng = np.random.default_rng([seed, 1])
    pseudo = prompts("pseudo", n_pseudo, rng)
    base_p = np.concatenate([prompts("benign", n_benign, rng), prompts("harmful", n_harm, rng), pseudo])
    weakest = pseudo_refusal if pseudo_refusal_min is None else pseudo_refusal_min
    refuse = np.concatenate([np.zeros(n_benign, bool), np.ones(n_harm, bool),
                             rng.random(n_pseudo) < refusal_probability(pseudo[:, 3], pseudo_refusal, weakest)])
    r2 = np.random.default_rng([seed, 2])
    seen = np.concatenate([N_IDS, P_ID_CONTEXTS])  # ACTOR never sees the OOD contexts P12..P15
    anchors = {"harmful": prompts("harmful", n_anchor, r2), "benign": prompts("benign", n_anchor, r2, seen)}
    train = {"harmful": prompts("harmful", n_train, r2),
             "pseudo": prompts("pseudo", n_train, r2, P_ID_CONTEXTS),
             "benign": prompts("benign", n_train, r2, seen)}
    r3 = np.random.default_rng([seed, 3])
    ev = {"harmful": prompts("harmful", n_eval, r3),
          "pseudo_id": prompts("pseudo", n_eval, r3, P_ID_CONTEXTS, exclude=pairs(train["pseudo"])),
          "pseudo_ood": prompts("pseudo", n_eval, r3, P_OOD_CONTEXTS),
          "benign": prompts("benign", n_eval, r3)}
    return SeedData(with_responses(base_p, refuse), anchors, train, ev)
