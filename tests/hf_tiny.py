"""Test helpers shared by the `paper`-preset loader tests: tiny Hugging Face artefacts made offline."""

from __future__ import annotations

from pathlib import Path


def save_word_tokenizer(folder: Path, tokens: list[str], **special: str) -> dict[str, int]:
    """Save a whitespace word-level tokenizer over ``tokens`` (ids in order, "[UNK]" among them); its vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(tokens)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", **special).save_pretrained(folder)
    return vocab
