"""The ``paper`` preset: SAE pairs and JSAEs on a local GPT-NeoX (Pythia) checkpoint and a local corpus.

Follows the paper and its official code: the MLP input is read after the block's pre-MLP LayerNorm
(``post_attention_layernorm``, TransformerLens ``ln2.hook_normalized``) and the output at the MLP
(``hook_mlp_out``); the paper's k, expansion and lambda per model are the preset's defaults; the
random baseline is the same architecture re-initialised and given SAEs of its own.

Written by hand, because the official code reads a pre-tokenised Hugging Face dataset through
SAELens: reading a local corpus (a ``.txt`` file is one document, a ``.jsonl`` line holds one in its
``"text"`` field, as the Pile does), tokenising it with the checkpoint's own tokenizer, documents
joined by EOS and cut into contexts. Deviations, for one GPU's memory: the SAEs train on a pool of
``n_tokens`` activations drawn with replacement (the paper streams one epoch of 300 M tokens), and
the re-initialisation is ``transformers``' initialiser, not TransformerLens ``init_weights``. As in
the toy, activations are normalised (the official code forbids it), so that the absolute thresholds
mean the same on the checkpoint and on its far smaller re-initialised MLP output.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
import torch
from transformers import AutoTokenizer, GPTNeoXForCausalLM, PreTrainedTokenizerBase

from companion import runtime
from companion.params import resolve_path

if TYPE_CHECKING:
    from companion.papers.jsae import Params
    from companion.papers.jsae.experiment import Results

CONTEXT = 2048  # tokens per sequence, as the paper
EVAL_TOKENS = 2**15  # held-out tokens: 16 contexts of 2048
# The smoke budget: the same pipeline in seconds on a CPU (tests run it on tiny checkpoints).
SMOKE = {"n_tokens": 4096, "sae_steps": 40, "sae_batch": 128, "sweep_coefs": ()}
SMOKE_CONTEXT, SMOKE_EVAL_TOKENS = 64, 512
CORPUS_SUFFIXES = (".txt", ".jsonl")
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new"}


def checkpoint_problem(path: Path, hook_layer: int, k: int, expansion: int) -> tuple[str, str] | None:
    """(parameter, why) when the checkpoint's ``config.json`` does not fit this pipeline, else ``None``."""
    config_file = path / "config.json"
    if not config_file.is_file():
        return "model_path", f"{str(path)!r} has no config.json (save the model with save_pretrained)"
    config = json.loads(config_file.read_text())
    if config.get("model_type") != "gpt_neox":
        return "model_path", (f"model_type {config.get('model_type')!r}; allowed: gpt_neox (Pythia; "
                              "the JSAE formula has no gated MLP)")
    if config.get("hidden_act") not in ACTIVATIONS:
        return "model_path", f"hidden_act {config.get('hidden_act')!r}; allowed: {', '.join(ACTIVATIONS)}"
    if hook_layer >= config["num_hidden_layers"]:
        return "hook_layer", f"{hook_layer}; allowed: < the checkpoint's {config['num_hidden_layers']} layers"
    if k > expansion * config["hidden_size"]:
        return "k", f"{k}; allowed: <= n latents = expansion x hidden_size = {expansion * config['hidden_size']}"
    return None


def corpus_files(data_path: str) -> list[Path]:
    """The corpus files: ``data_path`` itself, or every .txt / .jsonl file under it (sorted)."""
    root = resolve_path(data_path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in CORPUS_SUFFIXES)
    if not files or any(f.suffix not in CORPUS_SUFFIXES for f in files):
        raise ValueError(f"data_path {data_path!r}: no .txt or .jsonl corpus files there")
    return files


def documents(files: list[Path]) -> Iterator[str]:
    """Every document of the corpus: a whole .txt file, or the ``"text"`` of each .jsonl line."""
    for f in files:
        if f.suffix == ".txt":
            yield f.read_text(encoding="utf-8", errors="replace")
            continue
        with f.open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    yield json.loads(line)["text"]


def token_windows(tok: PreTrainedTokenizerBase, files: list[Path], n_windows: int, context: int,
                  docs_per_call: int = 64) -> np.ndarray:
    """The first ``n_windows * context`` tokens of the corpus (documents joined by EOS), (n_windows, context)."""
    need, ids, chunk = n_windows * context, [], []
    eos = [] if tok.eos_token_id is None else [tok.eos_token_id]

    def flush() -> None:
        for row in tok(chunk, verbose=False)["input_ids"]:  # verbose=False: no over-length warnings
            ids.extend(row + eos)
        chunk.clear()

    for doc in documents(files):
        chunk.append(doc)
        if len(chunk) == docs_per_call:
            flush()
            if len(ids) >= need:
                break
    if chunk:
        flush()
    if len(ids) < need:
        raise ValueError(f"the corpus holds {len(ids)} tokens; the run needs {need} "
                         "(n_tokens plus held-out tokens): add text or lower n_tokens")
    return np.asarray(ids[:need], dtype=np.int64).reshape(n_windows, context)


def load(path: str, device: torch.device) -> tuple[GPTNeoXForCausalLM, PreTrainedTokenizerBase]:
    """The local checkpoint (float32, eval mode, on ``device``) and its tokenizer; nothing is downloaded."""
    folder = str(resolve_path(path))
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = GPTNeoXForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    return model.to(device).eval(), tok


def reinitialised(model: GPTNeoXForCausalLM, seed: int) -> GPTNeoXForCausalLM:
    """The same architecture freshly initialised from ``seed`` (the global torch RNG is left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = GPTNeoXForCausalLM(model.config)
    return fresh.to(model.device).eval()


def run_paper(params: Params) -> Results:
    """Trained checkpoint: per seed the pairs of :func:`.experiment.trained_conditions` (SAE pair, JSAE, twin SAE
    pair, frontier JSAE, second twin); two copies re-initialised per seed: a JSAE and a pair on each; the sweep.
    Every pair trains for the full ``sae_steps``."""
    from companion.papers.jsae import experiment as jsae

    if params.smoke:
        params = dataclasses.replace(params, **SMOKE)
    context, eval_tokens = (SMOKE_CONTEXT, SMOKE_EVAL_TOKENS) if params.smoke else (CONTEXT, EVAL_TOKENS)
    runtime.limit_threads()
    device = runtime.resolve_device(params.device)
    model, tok = load(params.model_path, device)
    n_train = max(1, params.n_tokens // context)
    windows = token_windows(tok, corpus_files(params.data_path), n_train + eval_tokens // context, context)
    train_w, eval_w = windows[:n_train], windows[n_train:]
    act = ACTIVATIONS[model.config.hidden_act]
    acts = jsae.collect(model, params.hook_layer, train_w, eval_w, params.normalize_acts, act)
    base = jsae.ce_baselines(model, params.hook_layer, eval_w)

    def ce(sx, sy) -> float:
        return jsae.ce_of(model, params.hook_layer, sx, sy, acts, eval_w, base)

    keys, out = [], []
    for seed in params.seed_list():
        for c in jsae.trained_conditions(params):
            keys.append((c.name, seed, c.lam))
            out.append(jsae.fit_job(acts, params, c.sae_offset + seed, c.lam, ce, base,
                                    keep_jac=seed == params.seed and c.name in ("sae", "jsae"),
                                    check=c.name == "jsae", full_map=False))
    for lam in params.sweep_coefs:
        keys.append(("sweep", params.seed, lam))
        out.append(jsae.fit_job(acts, params, params.seed, lam, ce, base))
    conds = jsae.random_conditions(params)
    for lm_offset in dict.fromkeys(c.lm_offset for c in conds):  # each random LM, in order
        for seed in params.seed_list():
            rand = reinitialised(model, lm_offset + seed)
            r_acts = jsae.collect(rand, params.hook_layer, train_w, eval_w, params.normalize_acts, act)
            for c in conds:
                if c.lm_offset == lm_offset:
                    keys.append((c.name, seed, c.lam))
                    out.append(jsae.fit_job(r_acts, params, c.sae_offset + seed, c.lam, None, {}))
            del rand, r_acts
    n_lm = sum(p.numel() for p in model.parameters())
    source = (f"local GPT-NeoX checkpoint at model_path ({n_lm / 1e6:.1f} M parameters, "
              f"{model.config.num_hidden_layers} layers, d = {model.config.hidden_size}, "
              f"m = {model.config.intermediate_size}), layer {params.hook_layer}; {len(train_w) * context} "
              f"training and {len(eval_w) * context} held-out tokens of data_path in contexts of {context}; "
              f"{params.sae_steps} SAE steps of {params.sae_batch} tokens"
              + (" -- smoke budget" if params.smoke else ""))
    return jsae.assemble(params, float("nan"), 0, keys, out, source)
