"""Tiny LM constructors: seeded, deterministic, and leave the caller's random stream alone."""

import torch

from companion.models.tiny_lm import n_params, tiny_gpt2, tiny_llama


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_same_seed_same_weights_different_seed_different() -> None:
    a, b, c = (tiny_gpt2(16, 1, 16, 2, 8, seed=s) for s in (3, 3, 4))
    assert torch.equal(_flat(a), _flat(b))
    assert not torch.equal(_flat(a), _flat(c))


def test_construction_does_not_touch_global_rng() -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    tiny_llama(16, 1, 16, 2, 32, max_positions=8, seed=7)
    tiny_gpt2(16, 1, 16, 2, 8, seed=7)
    assert torch.equal(torch.rand(4), expected)


def test_n_params_counts_only_trainable() -> None:
    model = tiny_gpt2(16, 1, 16, 2, 8)
    total = n_params(model)
    model.transformer.wte.weight.requires_grad_(False)
    assert n_params(model) == total - 16 * 16


def test_fused_gelu_is_gpt2s_activation() -> None:
    from transformers import GPT2LMHeadModel

    model = tiny_gpt2(16, 2, 32, 2, 8, seed=1)
    reference_config = model.config.__class__(**{**model.config.to_dict(), "activation_function": "gelu_new"})
    reference = GPT2LMHeadModel(reference_config)
    reference.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 16, (4, 8), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(model(tokens).logits, reference(tokens).logits, atol=1e-5, rtol=1e-5)


def test_lean_loss_declines_where_it_does_not_apply() -> None:
    """``next_token_loss`` computes no logits before ``first``: a label there, or a model that is not a
    GPT-2, sends the caller to the full forward pass (``None``)."""
    from companion.models.gpt2_pass import next_token_loss

    ids = torch.randint(1, 16, (6, 8))
    labels = ids.clone()
    labels[:, :4] = -100
    gpt2 = tiny_gpt2(16, 1, 16, 2, 8, seed=0)
    reference = torch.nn.functional.cross_entropy(gpt2(input_ids=ids).logits[:, :-1].flatten(0, 1),
                                                  labels[:, 1:].flatten(), ignore_index=-100)
    torch.testing.assert_close(next_token_loss(gpt2, ids, labels, 3, 2), reference, rtol=0, atol=1e-6)
    labels[0, 3] = ids[0, 3]  # predicted by position 2, before ``first``
    assert next_token_loss(gpt2, ids, labels, 3, 2) is None
    labels[0, 3] = -100
    assert next_token_loss(tiny_llama(16, 1, 16, 2, 32, 8, seed=0), ids, labels, 3, 2) is None
