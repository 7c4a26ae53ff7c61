"""Self-REF's confidence tokens: vocabulary extension, Algorithm 1 (error-based labels), loss masking, score.

Algorithm 1 of the paper: run the base model on the training prompts, label every example ``<CN>`` when
its own prediction is right and ``<UN>`` when it is wrong, keep the model's *own* answer as the target,
subsample to a target UN share ``un_ratio``. During fine-tuning the answer tokens of ``<UN>`` examples
are masked (label -100), so the model learns to flag its mistakes without being taught to repeat
them; the prompt is always masked. The confidence score is ``sigmoid(z_CN - z_UN)`` at the position
after the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

IGNORE = -100


def add_confidence_tokens(model: torch.nn.Module, old_vocab: int, new_vocab: int) -> None:
    """Grow ``model``'s embeddings from ``old_vocab`` to ``new_vocab`` rows; new rows = mean of the old rows.

    Works on tied (GPT-2) and untied (Llama) output heads: both the input and output rows are set.
    """
    if new_vocab <= old_vocab:
        return
    model.resize_token_embeddings(new_vocab, mean_resizing=False)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[old_vocab:new_vocab] = emb[:old_vocab].mean(0)
        out = model.get_output_embeddings()
        if out is not None and out.weight.data_ptr() != emb.data_ptr():
            out.weight[old_vocab:new_vocab] = out.weight[:old_vocab].mean(0)
            if getattr(out, "bias", None) is not None:
                out.bias[old_vocab:new_vocab] = out.bias[:old_vocab].mean()


@dataclass(frozen=True)
class Augmented:
    """Algorithm 1's output: indices into the training set, the model's own answers and CN/UN labels."""

    index: np.ndarray  # (m,) rows of the training set kept after subsampling
    answer: np.ndarray  # (m,) the base model's own predicted answer token
    confident: np.ndarray  # (m,) bool: prediction == gold

    @property
    def un_share(self) -> float:
        """Share of UN examples."""
        return float(1 - self.confident.mean()) if len(self.confident) else float("nan")


def algorithm1(pred: np.ndarray, gold: np.ndarray, un_ratio: float, rng: np.random.Generator) -> Augmented:
    """Label each example CN iff ``pred == gold`` and subsample one side so the UN share is ``un_ratio``.

    When UN examples are scarcer than ``un_ratio`` asks, CN examples are subsampled; when they are more
    plentiful, UN examples are (the paper's tunable ratio). A class that is empty stays empty.
    """
    if not 0 < un_ratio < 1:
        raise ValueError(f"un_ratio must be in (0, 1), got {un_ratio}")
    pred, gold = np.asarray(pred), np.asarray(gold)
    ok = pred == gold
    cn, un = np.flatnonzero(ok), np.flatnonzero(~ok)
    if len(cn) and len(un):
        want_cn = int(round(len(un) * (1 - un_ratio) / un_ratio))
        if want_cn <= len(cn):
            cn = np.sort(rng.choice(cn, want_cn, replace=False))
        else:
            un = np.sort(rng.choice(un, int(round(len(cn) * un_ratio / (1 - un_ratio))), replace=False))
    index = np.sort(np.concatenate([cn, un]))
    return Augmented(index, pred[index], ok[index])


def selfref_labels(seq: Tensor, answer_pos: int, confident: Tensor, mask_wrong_answers: bool = True) -> Tensor:
    """Labels of ``prompt ŷ <CN|UN> EOS`` sequences (n, T): -100 on the prompt, on ŷ of UN rows when masking."""
    labels = seq.clone()
    labels[:, :answer_pos] = IGNORE
    if mask_wrong_answers:
        labels[~confident, answer_pos] = IGNORE
    return labels


def confidence_score(logits: Tensor, cn_id: int, un_id: int) -> Tensor:
    """``P(CN) / (P(CN) + P(UN)) = sigmoid(z_CN - z_UN)`` from next-token logits (..., V)."""
    return torch.sigmoid(logits[..., cn_id].float() - logits[..., un_id].float())
