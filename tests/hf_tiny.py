"""Test helpers shared by the `paper`-preset loader tests: tiny Hugging Face artefacts made offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def save_word_tokenizer(folder: Path, tokens: list[str], **special: str) -> dict[str, int]:
    """Save a whitespace word-level tokenizer over ``tokens`` (ids in order, "[UNK]" among them); its vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(tokens)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", **special).save_pretrained(folder)
    return vocab


def run_paper_smoke(slug: str, out: Path, **paths: object) -> dict[str, Any]:
    """``companion run SLUG --preset paper`` with ``paths``, smoke=true on the CPU; asserts exit 0, returns results.json."""
    options = [arg for name, value in paths.items() for arg in ("-p", f"{name}={value}")]
    cmd = [sys.executable, "-m", "companion", "run", slug, "--preset", "paper", *options,
           "-p", "smoke=true", "-p", "device=cpu", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(next(Path(out).rglob("results.json")).read_text())
