"""A pretrained causal LM read from a local folder: encode, rank options, finetune on answers.

For papers that finetune a real model on a few natural-language facts and then read its answer to
a prompt as the rank of the correct option among a fixed set of options, scored by the logit of
each option's first token (the official code of Feng, Russell and Steinhardt, ICML 2025, does
this). Nothing is downloaded: model and tokenizer are read with ``local_files_only=True``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase


def model_dir_problem(path: str) -> str | None:
    """Why ``path`` is not a saved Hugging Face model folder, or ``None`` when it looks like one."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return f"{path!r} is not a directory"
    if not (folder / "config.json").is_file():
        return f"{path!r} has no config.json (save the model with save_pretrained)"
    return None


def load(path: str, device: torch.device) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model (float32 weights, eval mode, on ``device``) and tokenizer from a local folder."""
    folder = str(Path(path).expanduser())
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    return model.to(device).eval(), tok


def first_tokens(tok: PreTrainedTokenizerBase, options: Sequence[str]) -> Tensor:
    """The first token id of ``" " + option`` for every option; they must differ, or ranks are ambiguous."""
    ids = [tok(" " + o, add_special_tokens=False)["input_ids"][0] for o in options]
    if len(set(ids)) < len(ids):
        clash = sorted({o for o, i in zip(options, ids) if ids.count(i) > 1})
        raise ValueError(f"options share a first token under this tokenizer: {', '.join(clash)}")
    return torch.tensor(ids)


@dataclass(frozen=True)
class Encoded:
    """Right-padded ``prompt + " " + answer`` sequences; the loss sees the answer tokens only."""

    input_ids: Tensor  # (n, T)
    attention_mask: Tensor  # (n, T)
    labels: Tensor  # (n, T): answer token ids, -100 elsewhere
    last_prompt: Tensor  # (n,) position of the last prompt token

    def __len__(self) -> int:
        return len(self.input_ids)

    def rows(self, idx: Tensor | np.ndarray | slice) -> "Encoded":
        """The sequences at ``idx``."""
        idx = torch.as_tensor(idx) if not isinstance(idx, slice) else idx
        return Encoded(self.input_ids[idx], self.attention_mask[idx], self.labels[idx], self.last_prompt[idx])


def encode(tok: PreTrainedTokenizerBase, prompts: Sequence[str], answers: Sequence[str]) -> Encoded:
    """Tokenise prompt and ``" " + answer`` separately (as the rank reads the answer's first token) and join."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    seqs, labels, last = [], [], []
    for prompt, answer in zip(prompts, answers, strict=True):
        p = tok(prompt)["input_ids"]
        a = tok(" " + answer, add_special_tokens=False)["input_ids"]
        seqs.append(p + a)
        labels.append([-100] * len(p) + a)
        last.append(len(p) - 1)
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    lab = torch.full((len(seqs), width), -100, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labels)):
        ids[i, :len(s)], lab[i, :len(s)], mask[i, :len(s)] = torch.tensor(s), torch.tensor(l), 1
    return Encoded(ids, mask, lab, torch.tensor(last))


def _logits(model: PreTrainedModel, enc: Encoded) -> Tensor:
    """Float32 logits of a batch, under bf16 autocast on CUDA."""
    device = model.device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        out = model(input_ids=enc.input_ids.to(device), attention_mask=enc.attention_mask.to(device))
    return out.logits.float()


def logit_ranks(last_logits: Tensor, options: Tensor, answer: Tensor) -> Tensor:
    """Rank of the correct option = number of options with a strictly larger logit; (B,).

    last_logits: (B, V); options: (C,) token ids; answer: (B,) token ids (each in ``options``).
    """
    return (last_logits[:, options] > last_logits.gather(1, answer[:, None])).sum(1)


@torch.no_grad()
def option_ranks(model: PreTrainedModel, enc: Encoded, options: Tensor, correct: Tensor,
                 batch_size: int = 16) -> Tensor:
    """:func:`logit_ranks` at the last prompt token, ``correct`` indexing ``options``; (n,)."""
    options = options.to(model.device)
    out = []
    for start in range(0, len(enc), batch_size):
        part = enc.rows(slice(start, start + batch_size))
        logits = _logits(model, part)[torch.arange(len(part)), part.last_prompt.to(model.device)]
        answer = options[correct[start:start + batch_size].to(model.device)]
        out.append(logit_ranks(logits, options, answer).cpu())
    return torch.cat(out)


@torch.no_grad()
def answer_logprob(model: PreTrainedModel, enc: Encoded, batch_size: int = 16) -> Tensor:
    """Sum of the log-probabilities of the answer tokens of every sequence; (n,)."""
    out = []
    for start in range(0, len(enc), batch_size):
        part = enc.rows(slice(start, start + batch_size))
        logp = _logits(model, part)[:, :-1].log_softmax(-1).cpu()
        target = part.labels[:, 1:]
        picked = logp.gather(2, target.clamp(min=0)[..., None])[..., 0]
        out.append((picked * (target != -100)).sum(1))
    return torch.cat(out)


def finetune(model: PreTrainedModel, enc: Encoded, epochs: int, lr: float, batch_size: int,
             rng: np.random.Generator) -> None:
    """Fresh Adam (no weight decay, constant ``lr``) on the answer tokens; data reshuffled every epoch."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(epochs):
        for idx in np.array_split(rng.permutation(len(enc)), max(1, -(-len(enc) // batch_size))):
            part = enc.rows(idx)
            logits = _logits(model, part)[:, :-1].flatten(0, 1)
            loss = torch.nn.functional.cross_entropy(logits, part.labels[:, 1:].flatten().to(model.device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    model.eval()
