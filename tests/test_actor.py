"""Unit checks of the ACTOR reproduction (spec: refusal direction, projection, targets, loss, freezing,
truncated forward, refusal metric, data generator, layer selection) and the paper preset's loader."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from companion import claims
from companion.params import ParamError
from companion.papers import actor as paper
from companion.papers.actor import direction, experiment, language as lang, paper_preset, toy
from companion.papers.actor.actor import actor, changed_outside, decoder_blocks, fp32_block, layer_output, lm_loss, read
from hf_tiny import run_paper_smoke, save_word_tokenizer


@pytest.fixture(scope="module")
def small():
    """A briefly trained 3-block toy model and one seed's data."""
    data = lang.seed_data(0, 300, 300, 300, 1.0, 16, 8, 100, 0.7)
    model = toy.build(3, 32, 0)
    toy.train_base(model, data.base, 60, 64, 3e-3, np.random.default_rng(0))
    return model, data


def test_refusal_direction_recovers_e1():
    g = torch.Generator().manual_seed(0)
    e1 = torch.zeros(16)
    e1[0] = 1
    harm = e1 + 0.05 * torch.randn(64, 16, generator=g)
    ben = -e1 + 0.05 * torch.randn(64, 16, generator=g)
    assert float(direction.refusal_direction(harm, ben) @ e1) > 0.99
    with pytest.raises(ValueError):
        direction.refusal_direction(harm, harm)


def test_projection_idempotent_orthogonal_and_benign_origin():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(20, 8, generator=g)
    r = torch.nn.functional.normalize(torch.randn(8, generator=g), dim=0)
    p = direction.project(a, r)
    torch.testing.assert_close(direction.project(p, r), p)
    assert float(((a - p) * p).sum(-1).abs().max()) < 1e-5
    mu = a.mean(0)
    assert abs(float(direction.coefficient(mu[None], r, mu))) < 1e-6
    torch.testing.assert_close(direction.coefficient(a, r), a @ r)


def test_targets_signs_and_alpha_zero():
    g = torch.Generator().manual_seed(2)
    r = torch.nn.functional.normalize(torch.randn(8, generator=g), dim=0)
    a = torch.randn(6, 8, generator=g) + 3 * r  # c_q > 0
    sign = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, -1.0])
    assert torch.equal(direction.targets(a, r, sign, 0.0), a)
    t = direction.targets(a, r, sign, 1.0)
    assert bool((t[:3] @ r > a[:3] @ r).all()) and bool((t[3:] @ r < a[3:] @ r).all())
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    u = direction.targets(a, r, sign, 1.0, groups=groups)
    shift = ((u - a) @ r).abs()
    c = a @ r
    torch.testing.assert_close(shift, torch.stack([c[:3].mean()] * 3 + [c[3:5].mean()] * 2 + [c[5]]))
    one_group = direction.targets(a, r, sign, 1.0, groups=torch.zeros(6, dtype=torch.long))
    torch.testing.assert_close(((one_group - a) @ r).abs(), c.mean().expand(6))
    h = a.clone().requires_grad_(True)
    loss = direction.cosine_loss(h, direction.targets(a, r, sign, 0.0))
    loss.backward()
    assert float(loss.detach()) < 1e-6 and float(h.grad.abs().max()) < 1e-6


def test_cosine_loss_range_scale_invariance_and_zero():
    g = torch.Generator().manual_seed(3)
    h, t = torch.randn(10, 5, generator=g), torch.randn(10, 5, generator=g)
    loss = float(direction.cosine_loss(h, t))
    assert 0 <= loss <= 2
    assert abs(float(direction.cosine_loss(h, 7.5 * t)) - loss) < 1e-6
    assert float(direction.cosine_loss(h, 3 * h)) < 1e-6
    assert abs(float(direction.cosine_loss(h, -h)) - 2) < 1e-6


def test_truncated_forward_equals_full_hidden_states(small):
    model, data = small
    ids = torch.from_numpy(data.eval["benign"][:20])
    full = model(input_ids=ids, output_hidden_states=True).hidden_states
    for layer in range(2):  # the last entry of hidden_states has ln_f applied
        assert torch.equal(layer_output(model, layer, ids), full[layer + 1])


def test_actor_changes_only_block_l_and_is_deterministic(small):
    model, data = small
    q, sign, _ = toy.actor_queries(model, data.train)
    anchors = toy.queries(data.anchors["harmful"]), toy.queries(data.anchors["benign"])
    runs = []
    for _ in range(2):
        m = copy.deepcopy(model)
        actor(m, 1, *anchors, q, sign, 1.0, 1.0, "benign_mean", 1, 3, 1e-3)
        assert changed_outside(m, model, 1) == (0, True)
        for name, p in m.named_parameters():
            if not name.startswith("transformer.h.1."):
                assert torch.equal(p, dict(model.named_parameters())[name]), name
        runs.append(m)
    for p, q_ in zip(runs[0].parameters(), runs[1].parameters()):
        assert torch.equal(p, q_)


def test_actor_moves_pseudo_projection_down(small):
    model, data = small
    q, sign, _ = toy.actor_queries(model, data.train)
    ah, ab = toy.queries(data.anchors["harmful"]), toy.queries(data.anchors["benign"])
    with torch.no_grad():
        r = direction.refusal_direction(read(model, 1, ah), read(model, 1, ab))
        mu = read(model, 1, ab).mean(0)
        before = direction.coefficient(read(model, 1, toy.queries(data.train["pseudo"])), r, mu).mean()
    m = copy.deepcopy(model)
    actor(m, 1, ah, ab, q, sign, 1.0, 1.0, "benign_mean", 2, 10, 1e-3)
    with torch.no_grad():
        after = direction.coefficient(read(m, 1, toy.queries(data.train["pseudo"])), r, mu).mean()
    assert float(after) < float(before)


def test_harmful_geometry_is_neutral_on_an_unchanged_model_and_linear_in_alpha(small):
    model, data = small
    prompts = data.eval["harmful"][:20]
    coef = np.linspace(-2.0, 3.0, len(prompts))
    same = experiment._harmful_geometry(model, copy.deepcopy(model), 1, prompts, 1.0, coef)
    assert same["cos_after_before"] == pytest.approx(1.0, abs=1e-6)
    assert same["norm_after_over_before"] == pytest.approx(1.0, abs=1e-6)
    doubled = experiment._harmful_geometry(model, model, 1, prompts, 2.0, coef)
    assert doubled["shift_over_norm"] == pytest.approx(2 * same["shift_over_norm"])
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for p in decoder_blocks(moved)[1].parameters():
            p.mul_(-1.0)
    assert experiment._harmful_geometry(model, moved, 1, prompts, 1.0, coef)["cos_after_before"] < 0.999


def test_refusal_metric():
    logits = torch.zeros(3, len(lang.VOCAB))
    logits[:, lang.SORRY] = 1.0
    assert torch.equal(toy.refusal_decisions(logits), torch.ones(3))
    logits[:, lang.SURE] = 2.0
    assert torch.equal(toy.refusal_decisions(logits), torch.zeros(3))
    logits[1, lang.SORRY] = 3.0
    assert torch.equal(toy.refusal_decisions(logits), torch.tensor([0.0, 1.0, 0.0]))


def test_lm_loss_ignores_the_last_token_and_prompt_positions(small):
    model, data = small
    batch = data.base
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids[:8], use_cache=False).logits[:, :-1]
        full = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.labels[:8, 1:].flatten(),
                                                 ignore_index=-100)
        torch.testing.assert_close(lm_loss(model, batch.input_ids[:8], batch.labels[:8]), full)
        changed = batch.input_ids[:8].clone()
        changed[:, -1] = lang.ID["F0"]  # the last input token predicts nothing
        assert lm_loss(model, changed, batch.labels[:8]) == lm_loss(model, batch.input_ids[:8], batch.labels[:8])


def test_base_training_by_the_lean_pass_follows_the_full_forward(monkeypatch):
    """The base model's steps, computed only at the response positions with shared openings, are the steps of
    the full forward pass: same loss and gradients at the start, same losses over a few AdamW steps."""
    import copy

    from companion.models.gpt2_pass import next_token_loss

    data = lang.seed_data(0, 60, 60, 60, 1.0, 4, 4, 10, 0.7)
    model = toy.build(3, 32, 0)
    batch = data.base
    assert len(torch.unique(batch.input_ids[:, :toy.OPENING], dim=0)) < len(batch)  # openings really are shared
    model.train()
    lean = next_token_loss(model, batch.input_ids, batch.labels, lang.PROMPT_LEN - 1, toy.OPENING)
    full = lm_loss(model, batch.input_ids, batch.labels)
    torch.testing.assert_close(lean, full, rtol=0, atol=1e-6)
    for a, b in zip(torch.autograd.grad(lean, list(model.parameters())),
                    torch.autograd.grad(full, list(model.parameters()))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    twin = copy.deepcopy(model)
    lean_losses = toy.train_base(model, batch, 5, 32, 3e-3, np.random.default_rng(1))
    monkeypatch.setattr(toy, "next_token_loss", lambda *args: None)
    full_losses = toy.train_base(twin, batch, 5, 32, 3e-3, np.random.default_rng(1))
    np.testing.assert_allclose(lean_losses, full_losses, rtol=1e-5)


def test_trade_off_uses_the_named_pseudo_set_and_counts_ceiling_seeds():
    top = {"harmful": 1.0, "pseudo_id": 0.0, "pseudo_ood": 0.5, "pseudo_id_strong": 0.4, "benign": 0.0}
    assert paper.trade_off(top) == 1.0  # C.R. is the ID set's alone: the OOD set does not enter
    assert paper.trade_off(top, "pseudo_id_strong") == pytest.approx((0.6 + 1.0) / 2)
    assert paper.trade_off({**top, "harmful": 0.8, "pseudo_id": 0.2}) == pytest.approx(0.8)
    seeds = [{"rates": {"ACTOR": top, "uniform shift": {**top, "pseudo_id": 0.1}}},
             {"rates": {"ACTOR": {**top, "harmful": 0.9}, "uniform shift": top}},
             {"rates": {"ACTOR": top, "uniform shift": top}}]
    results = paper.Results(paper.Params(), seeds, 0.0)
    assert experiment.ceiling_seeds(results, "uniform shift") == 1  # only the third seed: both at the ceiling
    assert experiment._ts_gap(results, "ACTOR", "uniform shift") == pytest.approx([0.05, -0.05, 0.0])


def test_grades_cycle_over_contexts_and_set_the_base_labels():
    assert lang.grade(lang.P_IDS).tolist() == [0, 1, 2, 3] * 4
    assert set(lang.grade(lang.P_ID_CONTEXTS).tolist()) == set(lang.grade(lang.P_OOD_CONTEXTS).tolist()) == {0, 1, 2, 3}
    np.testing.assert_allclose(lang.refusal_probability(lang.P_IDS[:4], 1.0, 0.7), [1.0, 0.9, 0.8, 0.7])
    data = lang.seed_data(0, 300, 300, 20_000, 1.0, 16, 8, 100, 0.7)
    pseudo = data.base.input_ids[600:]
    refused = (pseudo[:, lang.PROMPT_LEN] == lang.SORRY).numpy()
    g = lang.grade(pseudo[:, 3].numpy())
    np.testing.assert_allclose([refused[g == k].mean() for k in range(4)], [1.0, 0.9, 0.8, 0.7], atol=0.02)
    flat = lang.seed_data(0, 300, 300, 300, 1.0, 16, 8, 100)
    assert bool((flat.base.input_ids[600:, lang.PROMPT_LEN] == lang.SORRY).all())
    spread = experiment.grade_spread(np.where(lang.grade(lang.P_IDS) == 0, 3.0, 1.0), lang.P_IDS[:, None].repeat(4, 1),
                                     np.array([4.0]))
    assert spread == pytest.approx(0.5)


def test_actor_queries_are_response_free(small):
    model, data = small
    q, sign, group = toy.actor_queries(model, data.train)
    sizes = [len(data.train[k]) for k in ("harmful", "pseudo", "benign")]
    assert torch.bincount(group).tolist() == sizes and torch.equal(sign, torch.where(group == 0, 1.0, -1.0))
    desired = toy.sft_batch(data.train)
    assert torch.equal(q.ids[:, :lang.PROMPT_LEN], desired.input_ids[:, :lang.PROMPT_LEN])
    with torch.no_grad():  # the continuation is the model's own greedy choice, token by token
        nxt = model(input_ids=q.ids[:, :-1], use_cache=False).logits.argmax(-1)[:, lang.PROMPT_LEN - 1:]
    assert torch.equal(nxt, q.ids[:, lang.PROMPT_LEN:])
    ends = (q.ids == lang.END) & q.mask
    assert bool((ends.sum(1) <= 1).all())  # nothing after the first <end> is read
    assert sign.tolist() == [1.0] * len(data.train["harmful"]) + [-1.0] * (2 * len(data.train["harmful"]))


def test_data_generator_deterministic_and_ood_held_out():
    a = lang.seed_data(5, 300, 300, 300, 1.0, 16, 32, 100)
    b = lang.seed_data(5, 300, 300, 300, 1.0, 16, 32, 100)
    assert torch.equal(a.base.input_ids, b.base.input_ids)
    assert all(np.array_equal(a.eval[k], b.eval[k]) for k in a.eval)
    ood = set(lang.P_OOD_CONTEXTS.tolist())
    for prompts in (*a.train.values(), *a.anchors.values()):
        assert not ood & set(prompts[:, 3].tolist())
    assert set(a.eval["pseudo_ood"][:, 3].tolist()) <= ood
    assert not lang.pairs(a.eval["pseudo_id"]) & lang.pairs(a.train["pseudo"])
    c = lang.seed_data(6, 300, 300, 300, 1.0, 16, 32, 100)
    assert not np.array_equal(a.eval["harmful"], c.eval["harmful"])


def test_layer_selection():
    rng = np.random.default_rng(0)
    blobs = np.concatenate([rng.normal(0, 0.3, (50, 4)), rng.normal(5, 0.3, (50, 4))])
    labels = np.r_[np.zeros(50), np.ones(50)]
    mixed = rng.normal(0, 1, (100, 4))
    scores = direction.silhouettes([mixed, blobs, mixed], labels)
    assert scores[1] > 0.8 and scores[1] > scores[0]
    assert direction.pick_layer(scores, [0, 1, 2]) == 1
    assert direction.pick_layer([0.9, 0.5, 0.95, 0.3, 0.2], [0, 1, 2, 3, 4]) == 2
    assert direction.pick_layer([0.93, 0.93, 0.93, 0.93, 0.93], [0, 1, 2, 3, 4]) == 2
    assert direction.candidate_layers(3) == [1] and direction.candidate_layers(2) == [0]


def test_params_refused():
    with pytest.raises(ParamError, match="target_layer"):
        paper.Params.resolve("quick", target_layer=3)
    with pytest.raises(ParamError, match="projection_origin"):
        paper.Params.resolve("quick", projection_origin="mean")
    with pytest.raises(ParamError, match="unknown parameter"):
        paper.Params.resolve("quick", alpah=1.0)
    with pytest.raises(ParamError, match="model_path"):
        paper.Params.resolve("paper", model_path="/nonexistent/llm")
    with pytest.raises(ParamError, match="pseudo_refusal_min"):
        paper.Params.resolve("quick", pseudo_refusal_in_base=0.8, pseudo_refusal_min=0.9)
    with pytest.raises(ParamError, match="alpha_sweep"):  # the paper preset trains one model at alpha
        paper.Params.resolve("paper", alpha_sweep=(0.5,), model_path="/nonexistent", data_path="/nonexistent")
    for name, value in (("beta_sweep", (0.0,)), ("run_baselines", ("uniform",))):  # ignored there: refused
        with pytest.raises(ParamError, match=name):
            paper.Params.resolve("paper", model_path="/nonexistent", data_path="/nonexistent", **{name: value})


def test_group_means_once_equal_the_per_query_computation():
    """The uniform shift's per-group mean, computed once per group, is the old per-query computation."""
    g = torch.Generator().manual_seed(5)
    r = torch.nn.functional.normalize(torch.randn(8, generator=g), dim=0)
    a, mu = torch.randn(11, 8, generator=g), torch.randn(8, generator=g)
    sign = torch.tensor([1.0] * 4 + [-1.0] * 7)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2])[torch.randperm(11, generator=g)]
    c = direction.coefficient(a, r, mu)
    old = a + (sign * torch.stack([c[groups == k].mean() for k in groups.tolist()]))[:, None] * r
    torch.testing.assert_close(direction.targets(a, r, sign, 1.0, mu, groups), old, rtol=0, atol=0)


def test_random_direction_keeps_the_sizes_and_moves_off_r():
    """The random-direction control shifts each query by the same size c_q as ACTOR, along a fixed unit vector:
    its projection on r^ moves only by c_q (u . r^), and the vector depends on the seed alone."""
    g = torch.Generator().manual_seed(6)
    r = torch.nn.functional.normalize(torch.randn(32, generator=g), dim=0)
    a = torch.randn(9, 32, generator=g)
    sign = torch.tensor([1.0] * 3 + [-1.0] * 6)
    u = direction.random_unit(32, [3, 7])
    assert abs(float(u.norm()) - 1) < 1e-6 and torch.equal(u, direction.random_unit(32, [3, 7]))
    assert not torch.equal(u, direction.random_unit(32, [4, 7]))
    t, t_r = direction.targets(a, r, sign, 1.0, along=u), direction.targets(a, r, sign, 1.0)
    torch.testing.assert_close((t - a).norm(dim=1), (t_r - a).norm(dim=1))
    torch.testing.assert_close((t - a) @ r, sign * (a @ r) * float(u @ r))


def test_random_direction_targets_are_fixed_in_the_first_epoch(small):
    """With a random direction the targets of every epoch are those of the first (t_q = a_q^0 + sign alpha c_q^0 u),
    so the control moves by ACTOR's first-epoch sizes once, not again each epoch; ACTOR's own targets are
    re-measured each epoch and change."""
    model, data = small
    q, sign, _ = toy.actor_queries(model, data.train)
    anchors = toy.queries(data.anchors["harmful"]), toy.queries(data.anchors["benign"])
    u = direction.random_unit(32, [0, 7])
    for along in (u, None):
        seen: dict[int, torch.Tensor] = {}
        actor(copy.deepcopy(model), 1, *anchors, q, sign, 1.0, 1.0, "benign_mean", 3, 5, 1e-3, along=along,
              on_targets=lambda e, t: seen.__setitem__(e, t))
        assert sorted(seen) == [0, 1, 2]
        if along is None:
            assert not torch.equal(seen[1], seen[2])
        else:
            assert torch.equal(seen[1], seen[2]) and torch.equal(seen[0], seen[1])


def test_refusal_judge_and_jsonl(tmp_path):
    assert paper_preset.is_refusal("I'm sorry, but I cannot help with that.")
    assert not paper_preset.is_refusal("Sure, here is how to kill a Python process: use kill -9.")
    (tmp_path / "x.jsonl").write_text('{"prompt": "a"}\n{"goal": "b"}\n\n')
    assert paper_preset.read_prompts(tmp_path / "x.jsonl") == ["a", "b"]


@pytest.fixture(scope="module")
def tiny_llm_and_prompts(tmp_path_factory):
    """A tiny random Llama with a word-level tokenizer, and tiny JSONL prompt sets, saved offline."""
    from transformers import LlamaConfig, LlamaForCausalLM

    words = [f"w{i}" for i in range(40)] + ["I", "cannot", "Sure"]
    root = tmp_path_factory.mktemp("actor_paper")
    llm = root / "llm"
    vocab = save_word_tokenizer(llm, ["[PAD]", "[UNK]", "</s>", *words], pad_token="[PAD]", eos_token="</s>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64, pad_token_id=0,
                         eos_token_id=2, bos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(llm)
    data = root / "prompts"
    data.mkdir()
    rng = np.random.default_rng(0)
    for name in (*paper_preset.FILES, "ood"):
        lines = [json.dumps({"prompt": " ".join(rng.choice(words[:40], 5))}) for _ in range(30)]
        (data / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return str(llm), str(data), root


def test_paper_loader_on_tiny_llama(tiny_llm_and_prompts):
    from companion.models import causal_lm

    llm, data, _ = tiny_llm_and_prompts
    model, tok = causal_lm.load(llm, torch.device("cpu"))
    sets = paper_preset.load_sets(data)
    assert set(sets) == {*paper_preset.FILES, "ood"} and len(sets["harmful"]) == 30
    q = paper_preset.encode(tok, sets["harmful"][:4], torch.device("cpu"))
    full = model(input_ids=q.ids, attention_mask=q.mask.long(), output_hidden_states=True).hidden_states
    torch.testing.assert_close(layer_output(model, 1, q.ids, q.mask), full[2])
    assert len(decoder_blocks(model)) == 3


@pytest.mark.slow
def test_paper_preset_smoke_via_cli(tiny_llm_and_prompts):
    llm, data, root = tiny_llm_and_prompts
    out = root / "run"
    record = run_paper_smoke("actor", out, model_path=llm, data_path=data)
    assert record["status"] == "ok"
    assert record["metrics"]["setting"] == "paper: local LLM"
    assert {c["id"]: c["verdict"] for c in record["claims"]}["one-layer-only"] == "HOLDS"


def test_run_paper_in_process(tiny_llm_and_prompts):
    llm, data, _ = tiny_llm_and_prompts
    p = paper.Params.resolve("paper", model_path=llm, data_path=data, smoke=True, device="cpu")
    res = paper.run(p)
    v = {x.id: x for x in paper.check(res)}
    assert v["one-layer-only"].verdict == "HOLDS"
    assert paper.claim_values(res).preset == "paper"  # the paper preset's run is judged against the paper's bars
    assert {c: v[c].threshold for c in paper.PAPER_BARS} == pytest.approx(paper.PAPER_BARS)
    json.dumps(paper.metrics(res))
    assert np.isnan(paper.page_numbers(res, list(v.values()))["harm_cos_after_before"])


def test_fp32_block_keeps_a_small_adam_update_that_bf16_rounds_away(tiny_llm_and_prompts):
    """The paper preset's bf16 model: an Adam step of 1e-5 leaves bf16 weights of size ~1 (the norms) as they
    were; with block l* in float32 (fp32_block) ACTOR's update survives, and the other blocks still run in bf16."""
    from companion.models import causal_lm

    llm, data, _ = tiny_llm_and_prompts
    model, tok = causal_lm.load(llm, torch.device("cpu"))
    model = model.to(torch.bfloat16)
    sets = paper_preset.load_sets(data)
    enc = [paper_preset.encode(tok, sets[k][:6], torch.device("cpu")) for k in ("harmful", "harmless")]
    train = paper_preset.encode(tok, sets["harmful"][6:10] + sets["pseudo_harmful"][:4], torch.device("cpu"))
    sign = torch.tensor([1.0] * 4 + [-1.0] * 4)
    norm = "model.layers.1.input_layernorm.weight"

    plain = copy.deepcopy(model)
    actor(plain, 1, *enc, train, sign, 1.0, 0.0, "zero", 1, 2, 1e-5)
    assert torch.equal(dict(plain.named_parameters())[norm], dict(model.named_parameters())[norm])

    kept = copy.deepcopy(model)
    fp32_block(kept, 1)
    actor(kept, 1, *enc, train, sign, 1.0, 0.0, "zero", 1, 2, 1e-5)
    w = dict(kept.named_parameters())[norm].detach()
    assert w.dtype == torch.float32
    assert 0 < float((w - 1).abs().max()) < 1e-4  # ~2 steps of 1e-5 moved it; in bf16 they round to 1.0
    assert changed_outside(kept, model, 1) == (0, True)
    assert dict(kept.named_parameters())["model.layers.2.mlp.up_proj.weight"].dtype == torch.bfloat16
    with torch.no_grad():
        out = kept(input_ids=train.ids, attention_mask=train.mask.long()).logits
    assert out.dtype == torch.bfloat16 and bool(torch.isfinite(out).all())
    # ACTOR's stop hook reads block l*'s own float32 output, before fp32_block casts it back to bf16
    h = layer_output(kept, 1, train.ids, train.mask)
    assert h.dtype == torch.float32


def test_every_rows_keep_per_seed_controls_and_the_shared_sft_rows_show_once():
    """Worst-seed rows are judged on the lowest seed with every seed's value kept for the claim and its controls;
    the random-direction control can fail where ACTOR holds; the literal rows' shared SFT control is the same
    vector as the default rows' and the per-seed table shows it once."""
    keys = ("harmful", "pseudo_id", "pseudo_ood", "pseudo_id_strong", "pseudo_id_weak", "benign", "utility")

    def r(**kw):
        return {**dict.fromkeys(keys, 0.0), "harmful": 1.0, "utility": 1.0, **kw}

    seeds = [{"changed_outside": 0, "block_changed": True, "grade_spread": 0.3,
              "rates": {"base": r(pseudo_id=1.0, pseudo_id_strong=1.0, pseudo_id_weak=1.0),
                        "ACTOR": r(harmful=h), experiment.LITERAL: r(utility=0.5),
                        experiment.RANDOM: r(pseudo_id=0.9, harmful=0.97),
                        experiment.RANDOM_LITERAL: r(pseudo_id=0.95), experiment.UNIFORM: r(),
                        experiment.SFT_LAYER: r(harmful=0.9, pseudo_id=0.1)}}
             for h in (1.0, 0.96, 0.99)]
    results = paper.Results(paper.Params(), seeds, 0.0)
    v = {x.id: x for x in paper.check(results)}
    every = v["harmful-refusal-every"]
    assert every.kind == "every" and every.value == 0.96 and every.verdict == "HOLDS"
    assert every.per_seed == (1.0, 0.96, 0.99)
    ctrl = {c.name: c for c in every.controls}
    assert ctrl["random-dir"].per_seed == (0.97,) * 3 and ctrl["sft-layer"].verdict == "FAILS"
    gain = {c.name: c for c in v["over-refusal-reduced"].controls}
    assert v["over-refusal-reduced"].verdict == "HOLDS" and gain["random-dir"].verdict == "FAILS"
    shared = {c.name: c for c in v["literal-over-refusal-reduced"].controls}["sft-layer-shared"]
    assert shared.per_seed == gain["sft-layer"].per_seed
    table = paper.seed_table(results, list(v.values()))
    assert not any(k[1] == "control sft-layer-shared" for k in table.index)
    assert ("literal-over-refusal-reduced", "control random-dir-literal") in table.index
    assert list(table.loc[("harmful-refusal-every", "finding")]) == [1.0, 0.96, 0.99]


def test_paper_preset_rows_are_judged_against_the_papers_bars_and_quick_against_the_toys(tmp_path):
    """Three seeds that reproduce the paper's Llama-2-7b-chat numbers (61.53 % -> 90.74 % compliance on the
    pseudo-harmful sets) HOLD the over-refusal rows against the bars the paper's numbers give (half the paper's
    over-refusal and gain) and FAIL the toy's (0.9, 0.5); a utility 5 % down passes the toy's 0.9 and fails the
    paper's 1.5 % bound. Rows without a paper bar (and the unmeasured controls) are judged as at the toy."""
    def seed(shift, utility):
        base = {"harmful": 1.0, "pseudo_id": 1 - paper.PAPER_COMPLIANCE[0] + shift, "pseudo_ood": 0.5,
                "benign": 0.02, "utility": 1.0}
        after = {**base, "pseudo_id": 1 - paper.PAPER_COMPLIANCE[1] + shift, "harmful": 0.99, "utility": utility}
        return {"changed_outside": 0, "block_changed": True,
                "rates": {"base": base, "ACTOR": after, experiment.LITERAL: after}}

    per_seed = [seed(-0.01, 0.95), seed(0.0, 0.96), seed(0.01, 0.94)]
    bars = paper.PAPER_BARS
    assert bars["base-over-refuses"] == pytest.approx(0.3847 / 2) and bars["over-refusal-reduced"] == pytest.approx(
        0.2921 / 2) and bars["utility-kept"] == pytest.approx(1 / 1.015)
    at = {}
    for preset in ("quick", "paper"):
        params = paper.Params.resolve(preset, seeds=3, **({"model_path": str(tmp_path), "data_path": str(tmp_path)}
                                                           if preset == "paper" else {}))
        values = paper.claim_values(paper.Results(params, per_seed, 0.0))
        assert values.preset == preset
        at[preset] = {v.id: v for v in paper.check(paper.Results(params, per_seed, 0.0))}
    quick, pap = at["quick"], at["paper"]
    for cid in ("base-over-refuses", "over-refusal-reduced", "literal-over-refusal-reduced"):
        assert (quick[cid].verdict, pap[cid].verdict) == ("FAILS", "HOLDS"), cid
        assert pap[cid].threshold == pytest.approx(bars[cid]) and quick[cid].threshold > pap[cid].threshold
    for cid in ("utility-kept", "utility-literal-loss"):
        assert (quick[cid].verdict, pap[cid].verdict) == ("HOLDS", "FAILS"), cid
        assert pap[cid].threshold == pytest.approx(1 / 1.015)
    for cid in ("harmful-refusal-every", "harmful-refusal-drop", "benign-refusal", "one-layer-only"):
        assert pap[cid].threshold == quick[cid].threshold and pap[cid].verdict == quick[cid].verdict == "HOLDS", cid
    # the paper preset measures no control: each is judged at the paper's bar and is INCONCLUSIVE (NaN)
    assert {c.verdict for c in pap["over-refusal-reduced"].controls} == {"INCONCLUSIVE"}
    # a stored record is re-judged at its own preset
    stored = [claims._jsonable(v.to_dict()) for v in pap.values()]
    for preset, verdict in (("paper", "HOLDS"), ("quick", "FAILS")):
        again = {r["id"]: r for r in claims.rejudge(stored, paper.CLAIMS, preset)}
        assert again["over-refusal-reduced"]["verdict"] == verdict
