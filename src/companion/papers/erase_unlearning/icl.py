"""In-context learners that stay frozen: adaptation happens only through the chosen demonstrations.

- :func:`attention_predict`: the spec's parameter-free attention read-out,
  ``p(y | q, S) = sum_i softmax_i(<e(q), e(x_i)> / tau) 1[y_i = y]`` on unit embeddings.
- :class:`LLMClassifier`: a local causal LM prompted with ``Input: x / Output: y`` demonstrations;
  the answer is the candidate label with the highest summed log-probability (used by the
  ``paper`` preset; the loader is :mod:`companion.models.causal_lm`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def attention_predict(Q: np.ndarray, demos: np.ndarray, demo_labels: np.ndarray, n_classes: int,
                      tau: float) -> np.ndarray:
    """Labels of the queries ``Q`` (n, D) from the demonstrations by a softmax over cosine similarities."""
    logits = Q @ demos.T / tau
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    probs = w @ np.eye(n_classes)[demo_labels]
    return probs.argmax(axis=1)


def prompt(demos: Sequence[tuple[str, str]], query: str) -> str:
    """The ICL prompt: ``Input: x\\nOutput: y\\n\\n`` per demonstration, then ``Input: q\\nOutput:``."""
    shots = "".join(f"Input: {x}\nOutput: {y}\n\n" for x, y in demos)
    return f"{shots}Input: {query}\nOutput:"


class LLMClassifier:
    """A frozen causal LM that answers by scoring every candidate label after the prompt."""

    def __init__(self, model, tok, labels: Sequence[str], device: torch.device) -> None:
        """``labels``: the candidate answers (the distinct training outputs)."""
        self.model, self.tok, self.device = model, tok, device
        self.labels = list(labels)
        self.label_ids = [tok(" " + lab, add_special_tokens=False)["input_ids"] for lab in self.labels]

    @torch.no_grad()
    def predict(self, demos: Sequence[tuple[str, str]], queries: Sequence[str]) -> list[str]:
        """The best-scoring label for each query under the k-shot prompt of ``demos``."""
        out = []
        for q in queries:
            ids = self.tok(prompt(demos, q))["input_ids"]
            seqs = [ids + lab for lab in self.label_ids]
            width = max(map(len, seqs))
            batch = torch.zeros((len(seqs), width), dtype=torch.long)
            mask = torch.zeros_like(batch)
            for r, s in enumerate(seqs):
                batch[r, : len(s)] = torch.tensor(s)
                mask[r, : len(s)] = 1
            logp = torch.log_softmax(self.model(input_ids=batch.to(self.device),
                                                attention_mask=mask.to(self.device)).logits.float(), dim=-1)
            scores = [float(sum(logp[r, len(ids) - 1 + t, tok_id] for t, tok_id in enumerate(lab)))
                      for r, lab in enumerate(self.label_ids)]
            out.append(self.labels[int(np.argmax(scores))])
        return out
