"""The ``paper`` preset: Self-REF on a local instruct LLM with LoRA (``peft``) and local JSONL datasets.

``data_path`` holds one ``<dataset>.jsonl`` per dataset (local copies of MMLU, OpenBookQA, GSM8K,
MedQA), one example per line: ``{"prompt": ..., "answer": ..., "split": "train" | "val" | "test"
| "unanswerable"}`` and optionally ``"strong_correct"`` (whether the strong model, e.g. a local 70B,
answered it correctly; without it the strong model is simulated with ``strong_acc``). The LLM at
``model_path`` gets ``<CN>``/``<UN>`` as special tokens (rows initialised to the mean embedding), is
run greedily on the train split (Algorithm 1), and is fine-tuned with LoRA on every linear layer plus
the two new token rows, with the same masking as the toy; plain SFT on gold answers (also LoRA) is
the SFT-then-MSP baseline. Answers are compared after stripping and lower-casing the first line.
The Self-REF model's answer ends where it emits ``<CN>``, ``<UN>`` or EOS: the confidence token is not
part of the answer, special tokens are skipped when decoding, and the confidence is read at the
position that predicts the confidence token. The datasets of one seed are pooled into that seed's test
set (the item groups of the per-op table and of the within-group AUROC are the datasets); seeds are
seeds. The operation-only control here is a dataset-only score (the base model's train accuracy on the
dataset). Verbalised confidence and P(True) are not implemented.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from companion import runtime
from companion.params import resolve_path
from companion.papers.self_ref.confidence import IGNORE, add_confidence_tokens, algorithm1, confidence_score
from companion.papers.self_ref.pipeline import Condition, SeedOut, op_only_score

SPLITS = ("train", "val", "test", "unanswerable")


def read_jsonl(path: Path) -> dict[str, list[dict]]:
    """Rows of one dataset file by split; a row without prompt, answer or a known split is an error."""
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if "prompt" not in row or "answer" not in row or row.get("split") not in SPLITS:
            raise ValueError(f"{path.name} line {n}: needs prompt, answer and split in {', '.join(SPLITS)}")
        out[row["split"]].append(row)
    return out


def dataset_files(data_path: str) -> list[Path]:
    """The ``*.jsonl`` files under ``data_path`` (sorted); none is an error."""
    files = sorted(resolve_path(data_path).glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no <dataset>.jsonl files in {data_path}")
    return files


def normalise(text: str) -> str:
    """The answer extractor: the first line, stripped and lower-cased."""
    return (text.strip().splitlines() or [""])[0].strip().lower()


def add_tokens(model, tok) -> tuple[int, int]:
    """Add ``<CN>``/``<UN>`` to the tokenizer (once) and the model (mean-initialised rows); their ids."""
    old = len(tok)
    tok.add_special_tokens({"additional_special_tokens": ["<CN>", "<UN>"]})
    add_confidence_tokens(model, old, len(tok))
    return tok.convert_tokens_to_ids("<CN>"), tok.convert_tokens_to_ids("<UN>")


def decode(tok, ids: list[int]) -> str:
    """The normalised answer text of token ids, special tokens (``<CN>``, ``<UN>``, EOS) skipped."""
    return normalise(tok.decode(ids, skip_special_tokens=True))


@torch.no_grad()
def greedy(model, tok, prompts: list[str], max_new: int, stop: tuple[int, ...] = ()) -> tuple[list[list[int]], np.ndarray]:
    """Greedy answer token ids (up to EOS, a ``stop`` id such as a confidence token, or ``max_new``; the stopping
    token is not part of the answer) and the product of their probabilities (MSP)."""
    device = model.device
    ends = {tok.eos_token_id, *stop}
    answers, probs = [], []
    for prompt in prompts:
        ids = torch.tensor([tok(prompt)["input_ids"]], device=device)
        out, past, logp = [], None, 0.0
        step = ids
        for _ in range(max_new):
            res = model(input_ids=step, cache=past, use_cache=True)
            past = res.cache
            lp = res.logits[0, -1].float().log_softmax(-1)
            nxt = int(lp.argmax())
            if nxt in ends:
                break
            out.append(nxt)
            logp += float(lp[nxt])
            step = torch.tensor([[nxt]], device=device)
        answers.append(out)
        probs.append(float(np.exp(logp)))
    return answers, np.asarray(probs)


def encode(tok, prompts: list[str], answers: list[list[int]], conf: list[int] | None,
           mask_answer: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt ⊕ answer [⊕ conf] ⊕ EOS``, attention mask, labels (prompt and masked answers -100)."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    seqs, labs = [], []
    for i, (p, a) in enumerate(zip(prompts, answers)):
        pid = tok(p)["input_ids"]
        tail = list(a) + ([conf[i]] if conf is not None else []) + ([tok.eos_token_id] if tok.eos_token_id is not None else [])
        lab = [IGNORE] * len(pid) + tail
        if mask_answer is not None and mask_answer[i]:
            lab[len(pid):len(pid) + len(a)] = [IGNORE] * len(a)
        seqs.append(pid + tail)
        labs.append(lab)
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad)
    lab_t = torch.full((len(seqs), width), IGNORE)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labs)):
        ids[i, :len(s)], lab_t[i, :len(s)], att[i, :len(s)] = torch.tensor(s), torch.tensor(l), 1
    return ids, att, lab_t


def lora(model, rank: int, token_ids: list[int]):
    """LoRA on every linear layer (``peft``), plus trainable rows of the new tokens in the embeddings."""
    from peft import LoraConfig, get_peft_model

    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    extra = {"trainable_token_indices": token_ids} if tied else {"trainable_token_indices": token_ids,
                                                                  "modules_to_save": ["lm_head"]}
    if not token_ids:
        extra = {}
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear", **extra)
    return get_peft_model(model, cfg)


def finetune(model, ids: torch.Tensor, att: torch.Tensor, labels: torch.Tensor, steps: int, lr: float,
             batch_size: int, gen: torch.Generator) -> None:
    """Adam on the trainable (LoRA) weights; minibatches drawn with replacement by ``gen``."""
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    device = model.device
    for _ in range(steps):
        idx = torch.randint(len(ids), (min(batch_size, len(ids)),), generator=gen)
        logits = model(input_ids=ids[idx].to(device), attention_mask=att[idx].to(device)).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels[idx][:, 1:].flatten().to(device),
                                                 ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()


@torch.no_grad()
def selfref_scores(model, tok, prompts: list[str], answers: list[list[int]], cn: int, un: int) -> np.ndarray:
    """``sigmoid(z_CN - z_UN)`` after ``prompt ⊕ answer`` (the two logits read even when neither is the argmax)."""
    out = []
    for p, a in zip(prompts, answers):
        ids = torch.tensor([tok(p)["input_ids"] + list(a)], device=model.device)
        out.append(float(confidence_score(model(input_ids=ids).logits[0, -1], cn, un)))
    return np.asarray(out)


def _dataset(params, path: Path, s: int, device, n_train: int, n_eval: int, max_new: int, steps: int) -> dict:
    """One dataset file at seed ``s``: Algorithm 1 on train, LoRA Self-REF and SFT, every score on val/test/unanswerable."""
    from companion.models import causal_lm

    rows = read_jsonl(path)
    tr, va, te, un = rows["train"][:n_train], rows["val"][:n_eval], rows["test"][:n_eval], rows["unanswerable"][:n_eval]
    if not tr or not te:
        raise ValueError(f"{path.name}: needs train and test rows")
    rng, gen = np.random.default_rng([s, 3]), torch.Generator().manual_seed(s)
    base, tok = causal_lm.load(str(resolve_path(params.model_path)), device)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    prompts = lambda rs: [r["prompt"] for r in rs]  # noqa: E731
    right = lambda ans, rs: np.array([decode(tok, a) for a in ans]) == np.array([normalise(r["answer"]) for r in rs])  # noqa: E731
    pred_tr, _ = greedy(base, tok, prompts(tr), max_new)
    ok_tr = right(pred_tr, tr)
    aug = algorithm1(ok_tr.astype(int), np.ones(len(tr), int), params.un_ratio, rng)
    ans_te, msp = greedy(base, tok, prompts(te), max_new)
    msp_un = greedy(base, tok, prompts(un), max_new)[1] if un else np.zeros(0)
    # plain SFT on gold answers (LoRA), then its MSP
    sft = lora(copy.deepcopy(base), params.lora_rank, [])
    gold_ids = [tok(" " + r["answer"], add_special_tokens=False)["input_ids"] for r in tr]
    finetune(sft, *encode(tok, prompts(tr), gold_ids, None, None), steps, params.lr_ft, params.batch_size, gen)
    ans_sft, msp_sft = greedy(sft, tok, prompts(te), max_new)
    # Self-REF: the model's own answers followed by <CN>/<UN>; at test time the answer stops at either token
    cn, unk = add_tokens(base, tok)
    sr = lora(base, params.lora_rank, [cn, unk])
    conf_tok = [cn if c else unk for c in aug.confident]
    enc = encode(tok, [tr[i]["prompt"] for i in aug.index], [pred_tr[i] for i in aug.index], conf_tok,
                 ~aug.confident if params.mask_wrong_answers else None)
    finetune(sr, *enc, steps, params.lr_ft, params.batch_size, gen)

    def scored(rs: list[dict]) -> tuple[list[list[int]], np.ndarray]:
        ans = greedy(sr, tok, prompts(rs), max_new, stop=(cn, unk))[0] if rs else []
        return ans, selfref_scores(sr, tok, prompts(rs), ans, cn, unk) if rs else np.zeros(0)

    ans_sr, conf = scored(te)
    conf_val, conf_un = scored(va)[1], scored(un)[1]
    strong = np.array([bool(r["strong_correct"]) if "strong_correct" in r else rng.random() < params.strong_acc
                       for r in te])
    return {"ok_base": right(ans_te, te), "msp": msp, "ok_sr": right(ans_sr, te), "conf": conf,
            "ok_sft": right(ans_sft, te), "msp_sft": msp_sft, "conf_val": conf_val if len(conf_val) else conf,
            "conf_unans": conf_un, "msp_unans": msp_un, "ok_train": ok_tr, "n_aug": len(aug.index),
            "n_un": int((~aug.confident).sum()), "strong": strong, "n_params": sum(p.numel() for p in base.parameters())}


def run_paper(params):
    """Every seed: every dataset file run (:func:`_dataset`), pooled into the seed's test set (datasets are groups)."""
    from companion.papers.self_ref.experiment import Results

    start = time.perf_counter()
    device = runtime.resolve_device(params.device)
    n_train, n_eval, max_new = (16, 8, 3) if params.smoke else (10**9, 10**9, 16)
    steps = min(params.selfref_steps, 5) if params.smoke else params.selfref_steps
    files = dataset_files(params.data_path)
    outs = []
    for s in tqdm(params.seed_list(), desc="seeds", disable=None, leave=False):
        parts = [_dataset(params, path, s, device, n_train, n_eval, max_new, steps) for path in files]
        cat = lambda k: np.concatenate([d[k] for d in parts])  # noqa: E731
        group = np.concatenate([np.full(len(d["ok_base"]), i) for i, d in enumerate(parts)])
        group_tr = np.concatenate([np.full(len(d["ok_train"]), i) for i, d in enumerate(parts)])
        cond = Condition(cat("ok_base"), cat("msp"), cat("ok_sr"), cat("conf"), cat("ok_sft"), cat("msp_sft"),
                         cat("conf_val"), cat("conf_unans"), cat("msp_unans"),
                         op_only_score(group_tr, cat("ok_train"), group),
                         sum(d["n_un"] for d in parts) / max(1, sum(d["n_aug"] for d in parts)),
                         sum(d["n_aug"] for d in parts))
        outs.append(SeedOut(s, group, np.ones(len(group), bool), cat("strong"), {"plain": cond}))
    source = (f"local LLM at model_path ({parts[0]['n_params'] / 1e6:.1f}M parameters, LoRA rank "
              f"{params.lora_rank}) on {len(files)} dataset file(s), pooled per seed"
              + (" -- smoke budget" if params.smoke else ""))
    return Results(replace(params), outs, np.asarray(params.routing_rates), source, time.perf_counter() - start,
                   tuple(p.stem for p in files))
