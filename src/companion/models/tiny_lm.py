"""Tiny causal language models built from ``transformers`` configs (never a hub download)."""

from __future__ import annotations

from typing import TypeVar

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PretrainedConfig

M = TypeVar("M", bound=torch.nn.Module)


def tiny_gpt2(vocab: int, n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_positions: int = 64,
              seed: int = 0, n_inner: int | None = None) -> GPT2LMHeadModel:
    """A GPT-2 decoder with a small config (MLP width ``n_inner``, default 4 x ``n_embd``), initialised from ``seed``.

    GPT-2's tanh-approximated GELU is taken from torch's fused kernel (``gelu_pytorch_tanh``): the same
    function to float rounding as ``gelu_new``, about a fifth less time per training step at this width.
    """
    config = GPT2Config(vocab_size=vocab, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                        n_positions=n_positions, n_inner=n_inner, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        activation_function="gelu_pytorch_tanh", bos_token_id=0, eos_token_id=0)
    return _seeded_init(GPT2LMHeadModel, config, seed)


def tiny_llama(vocab: int, n_layer: int = 2, hidden: int = 64, n_head: int = 4, intermediate: int = 128,
               max_positions: int = 128, seed: int = 0) -> LlamaForCausalLM:
    """A Llama decoder (RMSNorm, RoPE, SwiGLU) with a small config, initialised from ``seed``."""
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=n_layer, num_attention_heads=n_head,
                         num_key_value_heads=n_head, max_position_embeddings=max_positions,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0, tie_word_embeddings=False)
    return _seeded_init(LlamaForCausalLM, config, seed)


def _seeded_init(model_class: type[M], config: PretrainedConfig, seed: int) -> M:
    """Build ``model_class(config)`` with weights drawn from ``seed``, leaving the global RNG untouched.

    ``transformers`` initialises weights from torch's global generator; forking it keeps model
    construction from shifting the random stream of the caller.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_class(config)


def n_params(model: torch.nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
