"""The ``paper`` preset's language-model comparison: a local GPT-2 trained on a local text corpus per loss.

By default (``lm_init="checkpoint"``) it fine-tunes a GPT-2 already trained with cross-entropy, not the
paper's pre-training; ``lm_init="config"`` trains the config from scratch.

The paper compares the Fenchel-Young losses of f-divergences (KL = cross-entropy, α = 1.5, ...) for
next-token prediction with GPT-2-style decoders. Here the model is a ``transformers``
``GPT2LMHeadModel`` read from ``model_path`` (``local_files_only``), either fine-tuned from its weights
(``lm_init="checkpoint"``) or re-initialised from its config (``"config"``: pre-training from scratch
on the corpus, the paper's pre-training setting at a token budget one GPU affords). Every loss starts
from the same weights and sees the same batches, steps and learning-rate schedule (a paired design).
Evaluation, on held-out corpus tokens: top-1 next-token accuracy and the support size of p*.

Written by hand (no library trains with a generic FY loss): the corpus reader, the block split and the
training loop. The corpus is plain UTF-8 text, one file or a folder of ``*.txt`` files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from companion.models import optim
from companion.papers.fdiv_losses.fdivergence import fy_loss, get_divergence, softargmax

EVAL_SHARE = 0.1  # the last tenth of the token stream is held out


def smoke_params(params: Any) -> Any:
    """The paper pipeline on a tiny budget: two seeds, KL and α = 1.5, a few steps and tokens."""
    return replace(params, seeds=min(params.seeds, 2), clf_losses=("kl", "alpha1.5"), clf_epochs=5,
                   clf_hidden=64, lm_losses=("kl", "alpha1.5"), lm_steps=min(params.lm_steps, 4),
                   lm_seq_len=min(params.lm_seq_len, 32), lm_batch=2, lm_eval_tokens=256)


def corpus_files(path: Path) -> list[Path]:
    """The text file at ``path``, or every ``*.txt`` file under the folder ``path`` (sorted)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*.txt") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no *.txt files under {path.name}/ (put plain-text files there)")
    return files


def token_stream(tok: Any, files: list[Path]) -> np.ndarray:
    """All files tokenised and concatenated, each followed by the end-of-text token."""
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    ids: list[int] = []
    for f in files:
        ids += tok(f.read_text(encoding="utf-8", errors="replace"))["input_ids"] + eos
    return np.asarray(ids, dtype=np.int64)


@dataclass(frozen=True)
class Blocks:
    """Non-overlapping token blocks of ``seq_len + 1``: the head of the stream to train, its tail to evaluate."""

    train: torch.Tensor  # (n_train, seq_len + 1)
    test: torch.Tensor  # (n_test, seq_len + 1)


def split_blocks(tokens: np.ndarray, seq_len: int, eval_tokens: int) -> Blocks:
    """Cut the stream into blocks; the last ``EVAL_SHARE`` of them (at most ``eval_tokens`` tokens) are held out."""
    width = seq_len + 1
    n = len(tokens) // width
    n_test = min(max(1, int(n * EVAL_SHARE)), max(1, eval_tokens // seq_len))
    if n - n_test < 1:
        raise ValueError(f"the corpus has {len(tokens)} tokens: too few for one training and one test block "
                         f"of {width} tokens (lower lm_seq_len or add text)")
    blocks = torch.from_numpy(tokens[:n * width].reshape(n, width))
    return Blocks(blocks[:n - n_test], blocks[n - n_test:])


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up, then cosine decay to zero."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Float32 logits (bf16 autocast on CUDA; the bisection always runs in float32)."""
    device = next(model.parameters()).device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        return model(input_ids=ids.to(device)).logits.float()


@torch.no_grad()
def evaluate(model: torch.nn.Module, loss: str, blocks: torch.Tensor, iters: int, batch: int) -> dict[str, float]:
    """Next-token accuracy and mean support of p* over every position of ``blocks``."""
    model.eval()
    div, hits, support, count = get_divergence(loss), 0, 0.0, 0
    for start in range(0, len(blocks), batch):
        part = blocks[start:start + batch]
        logits = _logits(model, part[:, :-1]).flatten(0, 1)
        target = part[:, 1:].flatten().to(logits.device)
        hits += int((logits.argmax(-1) == target).sum())
        support += float((softargmax(div, logits, None, iters) > 0).sum())
        count += len(target)
    model.train()
    return {"acc": hits / count, "support": support / count}


def train(model: torch.nn.Module, loss: str, blocks: Blocks, steps: int, lr: float, batch: int, iters: int,
          seed: int, curve_every: int) -> list[dict[str, float]]:
    """AdamW with the FY loss of ``loss`` on random training blocks (order fixed by ``seed``); eval curve."""
    div, gen = get_divergence(loss), torch.Generator().manual_seed(seed + 10_000)
    opt = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, max(1, steps // 20)))
    device = next(model.parameters()).device
    curve = []
    model.train()
    for step in range(steps):
        part = blocks.train[torch.randint(len(blocks.train), (batch,), generator=gen)]
        logits = _logits(model, part[:, :-1])
        value = fy_loss(div, logits.flatten(0, 1), part[:, 1:].flatten().to(device), None, iters).mean()
        opt.zero_grad(set_to_none=True)
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if (step + 1) % curve_every == 0:
            curve.append(evaluate(model, loss, blocks.test[:max(1, 2048 // blocks.test.shape[1])], iters, batch))
    return curve


def model_type(path: Path) -> str:
    """The ``model_type`` of the saved config (``""`` when config.json is unreadable)."""
    try:
        return str(json.loads((path / "config.json").read_text()).get("model_type", ""))
    except (OSError, ValueError):
        return ""


def load(path: Path, init: str, seed: int, device: torch.device) -> torch.nn.Module:
    """The GPT-2 at ``path``: its weights (``checkpoint``) or its config with weights drawn from ``seed``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if init == "checkpoint":
        model = GPT2LMHeadModel.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
    else:
        config = GPT2Config.from_pretrained(str(path), local_files_only=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = GPT2LMHeadModel(config)
    return model.to(device)


def run_corpus(params: Any, device: torch.device) -> dict[str, Any]:
    """Every loss in ``params.lm_losses`` on every seed: accuracy, support and curves on held-out tokens."""
    from companion.params import resolve_path
    from companion.papers.fdiv_losses.experiment import curve_every  # here: experiment imports this module
    from transformers import AutoTokenizer

    path = resolve_path(params.model_path)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    files = corpus_files(resolve_path(params.data_path))
    blocks = split_blocks(token_stream(tok, files), params.lm_seq_len, params.lm_eval_tokens)
    every = curve_every(params)
    out: dict[str, Any] = {"acc": {}, "support": {}, "curve": {}, "support_curve": {}, "kl_support_alpha15": []}
    before = None
    for seed in params.seed_list():
        for loss in params.lm_losses:
            model = load(path, params.lm_init, seed, device)
            if before is None:
                before = evaluate(model, "kl", blocks.test, params.bisect_iters, params.lm_batch)["acc"]
            curve = train(model, loss, blocks, params.lm_steps, params.lm_lr, params.lm_batch, params.bisect_iters,
                          seed, every)
            final = evaluate(model, loss, blocks.test, params.bisect_iters, params.lm_batch)
            vocab = model.config.vocab_size
            if loss == "kl":  # the sparsity control: the KL-trained model through the α = 1.5 operator
                out["kl_support_alpha15"].append(
                    evaluate(model, "alpha1.5", blocks.test, params.bisect_iters, params.lm_batch)["support"])
            for key, value in (("acc", final["acc"]), ("support", final["support"]),
                               ("curve", [c["acc"] for c in curve]),
                               ("support_curve", [c["support"] / vocab for c in curve])):
                out[key].setdefault(loss, []).append(value)
            n_params = sum(p.numel() for p in model.parameters())
            del model
    out["info"] = {"model": path.name, "init": params.lm_init, "parameters": n_params, "vocab": vocab,
                   "files": len(files), "train_tokens": int(blocks.train.numel()),
                   "eval_tokens": int(blocks.test.shape[0] * params.lm_seq_len),
                   "tokens_seen_per_loss": params.lm_steps * params.lm_batch * params.lm_seq_len,
                   "acc_before_training": before}
    return out
