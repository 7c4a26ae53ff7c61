"""Unit checks of the extractive-structures toy: metric, delta algebra, frozen names, scores."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from companion import claims
from companion.models import causal_lm
from companion.papers.extractive_structures import gpt2_attribution as attrib
from companion.papers.extractive_structures import pretrained_dax
from companion.papers.extractive_structures.weight_deltas import delta_since, snapshot, with_deltas
from companion.papers import extractive_structures as paper
from companion.papers.extractive_structures import experiment as es
from companion.papers.extractive_structures import fact_world
from companion.params import ParamError
from hf_tiny import run_paper_smoke, save_word_tokenizer


@pytest.fixture(scope="module")
def world() -> fact_world.World:
    return fact_world.make_world(30, 30, 20, 10, np.random.default_rng(0))


def _model(world: fact_world.World, seed: int = 0, dtype=torch.float32):
    return es.build_model(world, 2, 32, 4, torch.Generator().manual_seed(seed)).to(dtype)


def test_rank_best_worst_ties():
    options = torch.arange(5)
    logits = torch.tensor([[5.0, 1, 2, 3, 4], [0.0, 1, 2, 3, 4], [1.0, 1, 1, 1, 1]])
    answer = torch.tensor([0, 0, 2])
    assert causal_lm.logit_ranks(logits, options, answer).tolist() == [0, 4, 0]


def test_rank_uniform_is_chance():
    g = torch.Generator().manual_seed(0)
    n = 20
    logits = torch.rand(10_000, n, generator=g)
    answer = torch.randint(0, n, (10_000,), generator=g)
    mean = causal_lm.logit_ranks(logits, torch.arange(n), answer).float().mean().item()
    assert abs(mean - (n - 1) / 2) < 0.3


def test_mean_logit_loss_and_gradient():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 12, generator=g, dtype=torch.float64, requires_grad=True)
    options, answer = torch.tensor([2, 5, 7, 9]), torch.tensor([5, 2, 9, 7])
    loss = es.mean_logit_loss(logits, options, answer)
    expected = -logits.detach()[torch.arange(4), answer] + logits.detach()[:, options].mean(1)
    torch.testing.assert_close(loss.detach(), expected)
    loss.sum().backward()
    assert torch.allclose(logits.grad[:, options].sum(1), torch.zeros(4, dtype=torch.float64))
    assert logits.grad[:, [0, 1, 3]].abs().max() == 0


def test_world_generator(world):
    again = fact_world.make_world(30, 30, 20, 10, np.random.default_rng(0))
    assert all(np.array_equal(getattr(world, k), getattr(again, k)) for k in ("city", "city2", "animal", "test"))
    assert sorted(world.animal) == list(range(10))
    assert set(world.city[world.test]) == set(range(10))
    assert np.all(world.city2 != world.city)
    assert not set(world.pre) & set(world.train) and not set(world.train) & set(world.test)


def test_delta_algebra_and_restore(world):
    m = _model(world, dtype=torch.float64)
    rng = np.random.default_rng(0)
    w = snapshot(m)
    es.train(m, fact_world.dax(world, world.train), 2, 1e-3, 16, rng)
    d1 = delta_since(m, w)
    mid = snapshot(m)
    es.train(m, fact_world.zong(world, world.train), 2, 1e-3, 16, rng)
    d2 = delta_since(m, mid)
    end = snapshot(m)
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_(w[name])
    with with_deltas(m, d1, d2):
        for name, p in m.named_parameters():
            assert torch.allclose(p, end[name], atol=1e-7, rtol=0)
    assert all(torch.equal(p, w[name]) for name, p in m.named_parameters())


def test_frozen_name_embeddings(world):
    m = _model(world)
    names = torch.as_tensor(world.name_tok(np.arange(world.n_names)))
    before = m.transformer.wte.weight[names].clone()
    es.train(m, torch.cat([fact_world.dax(world, world.train), fact_world.zong(world, world.train)]), 3, 1e-2, 16,
             np.random.default_rng(0), frozen_rows=names)
    assert torch.equal(m.transformer.wte.weight[names], before)
    bos = m.transformer.wte.weight[fact_world.BOS].clone()
    es.train(m, fact_world.dax(world, world.train), 1, 1e-2, 16, np.random.default_rng(0))
    assert not torch.equal(m.transformer.wte.weight[names], before)
    assert not torch.equal(m.transformer.wte.weight[fact_world.BOS], bos)


def _pair(world, dtype=torch.float64):
    """An old model and a new one that differs from it by a small random delta."""
    old = _model(world, dtype=dtype)
    new = copy.deepcopy(old)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(1e-3 * torch.randn(p.shape, generator=g, dtype=dtype))
    return old, new


def _loss(world, seqs):
    options = fact_world.candidates(world, seqs)
    return lambda logits: es.mean_logit_loss(logits[:, -1], options, seqs[:, 3].repeat(len(logits) // len(seqs)))


def test_informative_scores_match_gpt2_linearisation(world):
    old, new = _pair(world)
    seqs = fact_world.zong(world, world.test)
    delta = delta_since(new, snapshot(old))
    acts, grads = attrib.trace(old, seqs[:, :3], _loss(world, seqs))
    total = attrib.informative(acts, grads, delta, 4).sum()
    eps = 1e-3
    comps = attrib.component_names(2, 4)
    merged = {}
    for c in comps:
        for k, v in attrib.component_delta(delta, c, 4).items():
            merged[k] = merged.get(k, 0) + v
    moved = {}
    for sign in (1, -1):  # a central difference: the forward one's curvature error is ~1e-3 relative
        with with_deltas(old, {k: sign * eps * v for k, v in merged.items()}):
            moved[sign] = _loss(world, seqs)(old(input_ids=seqs[:, :3]).logits).sum()
    fd = -(moved[1] - moved[-1]) / (2 * eps)
    assert abs(total.item() - fd.item()) <= 1e-5 * abs(fd.item())


def test_downstream_zero_without_upstream_change(world):
    old, new = _pair(world)
    seqs = fact_world.zong(world, world.test)
    cf = seqs[torch.arange(len(seqs)).roll(1)]
    s0 = attrib.extractive_scores(old, copy.deepcopy(old), seqs[:, :3], cf[:, :3], _loss(world, seqs),
                                  delta_since(old, snapshot(old)))
    assert all(torch.equal(s0[k], torch.zeros_like(s0[k])) for k in ("downstream", "upstream", "informative"))
    # a change only in block 1's MLP leaves that MLP's inputs, so its strict downstream score is 0
    only = attrib.component_delta(delta_since(new, snapshot(old)), "L1.mlp", 4)
    mlp_new = copy.deepcopy(old)
    with torch.no_grad():
        for k, v in only.items():
            mlp_new.get_parameter(k).add_(v)
    s = attrib.extractive_scores(old, mlp_new, seqs[:, :3], cf[:, :3], _loss(world, seqs),
                                 delta_since(mlp_new, snapshot(old)))
    idx = attrib.component_names(2, 4).index("L1.mlp")
    assert torch.equal(s["downstream"][..., idx], torch.zeros_like(s["downstream"][..., idx]))
    assert s["informative"][..., idx].abs().sum() > 0


def test_upstream_zero_for_identical_counterfactual(world):
    old, new = _pair(world)
    seqs = fact_world.zong(world, world.test)
    s = attrib.extractive_scores(old, new, seqs[:, :3], seqs[:, :3].repeat(3, 1), _loss(world, seqs),
                                 delta_since(new, snapshot(old)))
    assert torch.equal(s["upstream"], torch.zeros_like(s["upstream"]))
    assert s["downstream"].abs().sum() > 0


def test_params_validation():
    with pytest.raises(ParamError):
        paper.Params.resolve("quick", n_citiez=5)
    with pytest.raises(ParamError):
        paper.Params.resolve("quick", lr="fast")
    with pytest.raises(ParamError):
        paper.Params.resolve("quick", n_layer=9)
    with pytest.raises(ParamError):
        paper.Params.resolve("quick", n_test_names=30)
    with pytest.raises(ParamError):
        paper.Params.resolve("quick", n_head=5)
    assert paper.Params.resolve("full").seeds == 16


def _tiny() -> paper.Params:
    return paper.Params.resolve("quick", seeds=2, n_pre_names=50, n_train_names=40, n_test_names=20, n_cities=10,
                             epochs_pre=40, epochs_phase=20, epochs_test=10, replay_size=20, run_scores=True,
                             trace_seeds=1, contrast_seeds=1, test_slices=2)


def test_smoke_and_determinism():
    params = _tiny()
    t = time.process_time()
    a = paper.Results(params, [0, 1], [es.run_seed(params, s) for s in (0, 1)])
    assert time.process_time() - t < 15
    verdicts = paper.check(a)
    assert {v.id for v in verdicts} == {c.id for c in paper.CLAIMS}
    assert all(np.isfinite(v.value) for v in verdicts)
    assert all(np.isfinite(x) for x in paper.metrics(a).values())
    first, second = a.per_seed
    assert set(first.ocr) == set(second.ocr) == set(paper.ORDERS) == set(first.stage_a_end)
    # impl-memorised is the spec's precondition, read right after the implication phase (not at Stage A's end)
    values = paper.claim_values(a)
    assert first.impl_memorised is first.impl_after_phase1
    assert values["impl-memorised"] == [r.impl_after_phase1 for r in a.per_seed]
    # the ordering gap's control is the forgetting-matched facts-first arm, by the same measurement
    ocr = lambda o: np.array([r.ocr[o] for r in a.per_seed])  # noqa: E731
    end = lambda o: np.array([r.stage_a_end[o][1] for r in a.per_seed])  # noqa: E731
    np.testing.assert_allclose(values["ordering-gap"], ocr("impl_first") - ocr("facts_first"))
    np.testing.assert_allclose(values["ordering-gap@facts-first-refreshed"],
                               ocr("facts_first_refreshed") - ocr("facts_first"))
    np.testing.assert_allclose(values["refresh-forgets"], end("facts_first_refreshed") - end("impl_first"))
    np.testing.assert_allclose(values["retention-matched"], end("impl_first_retained"))
    assert not any("joint" in k or "retained" in k for k in values)  # reported arms, not claims or controls
    assert {c.id: c.controls for c in paper.CLAIMS}["ordering-gap"] == ("facts-first-refreshed",)
    assert all(c.role == "check" for c in paper.CLAIMS if c.id in ("impl-first-chance", "no-graft-chance"))
    assert set(first.trainable_ocr) == set(paper.CONTRAST_ORDERS) and not second.trainable_ocr
    again = paper.run(dataclasses.replace(params, seeds=1, contrast_seeds=0)).per_seed[0]  # contrast runs last
    assert again.ocr == first.ocr and again.graft == first.graft and not again.trainable_ocr
    assert all(np.isfinite(s).all() for s in first.scores.values())
    contrast = paper.contrast_table(a)
    assert list(contrast.index) == ["0", "mean"]
    assert list(contrast.columns.get_level_values(0).unique()) == ["names frozen", "names trainable"]
    frozen = contrast.loc["0", "names frozen"]
    assert frozen["gap"] == pytest.approx(frozen["impl_first"] - frozen["facts_first"], abs=0.011)
    table = claims.seed_table(verdicts, a.seeds)  # every finding beside each of its controls, per seed
    assert {c.id for c in paper.CLAIMS if c.role == "finding"} == set(table.index.get_level_values(0))
    assert table.loc[("graft-ocr", "control impl-only-graft")].tolist() == pytest.approx(
        [r.graft["control"][0] for r in a.per_seed], abs=0.006)
    assert list(paper.stage_a_table(a).index) == [0, 1]
    numbers = paper.page_numbers(a, verdicts)
    assert numbers["v_ordering_gap_at_facts_first_refreshed"] in ("HOLDS", "FAILS", "INCONCLUSIVE")
    assert numbers["n_contrast"] == 1
    assert numbers["gap_deconf"] == pytest.approx(np.mean(ocr("impl_first") - ocr("facts_first_refreshed")))
    # the Stage-A trajectory logs every 3rd epoch and each phase's last: 3 phases for the refreshed arm
    e = params.epochs_phase
    assert first.traj_a["facts_first_refreshed"].shape == (3 * len(es.logged_epochs(e, 1)), 2)
    assert es.logged_epochs(e, 2)[-1] == 2 * e and e in es.logged_epochs(e, 2)
    for plot in (paper.plot_ordering, paper.plot_seeds, paper.plot_grafting, paper.plot_scores):
        plot(a)


@pytest.fixture(scope="module")
def tiny_lm_dir(tmp_path_factory) -> str:
    """A tiny random Llama and a word-level tokenizer over the two-hop templates, saved offline."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from companion.papers.extractive_structures import two_hop_facts as thf

    words = {w for hop in thf.two_hops(np.random.default_rng(0)) for texts in
             (hop.fact_prompts, hop.fact_options, hop.impl_prompts, hop.impl_options) for t in texts for w in t.split()}
    words |= {w for n in thf.FIRST_NAMES + thf.LAST_NAMES for w in n.split()}
    world = pretrained_dax.make_dax_world(np.random.default_rng(0))
    words |= {w for data in (pretrained_dax.dax(world, world.test), pretrained_dax.zong(world, world.test))
              for t in data[1] for w in t.split()} | set(pretrained_dax.ANIMALS)
    folder = tmp_path_factory.mktemp("tiny_llama")
    vocab = save_word_tokenizer(folder, ["[PAD]", "[UNK]", *sorted(words)], pad_token="[PAD]")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64, pad_token_id=0)
    LlamaForCausalLM(config).save_pretrained(folder)
    return str(folder)


def test_pretrained_two_hop_test_runs_offline(tiny_lm_dir):
    params = paper.Params.resolve("paper", model_path=tiny_lm_dir, lm_lr=1e-2, lm_epochs=30, device="cpu")
    table = paper.pretrained_ocr(params)
    assert list(table.index) == ["first hop", "second hop"]
    ranks = table.filter(like="rank").drop(columns=["paper fact rank", "paper impl rank"])
    assert ranks.to_numpy().min() >= 0 and ranks.to_numpy().max() <= 19
    # the facts are what it is finetuned on: a small random model must learn them
    assert (table["fact rank after"] < table["fact rank before"]).all()
    assert (table["fact rank after"] <= 1.0).all()


def test_bad_model_path_is_refused_before_compute(tmp_path):
    with pytest.raises(ParamError, match="model_path.*not a directory"):
        paper.Params.resolve("quick", model_path=str(tmp_path / "missing"))
    with pytest.raises(ParamError, match="model_path.*config.json"):
        paper.Params.resolve("quick", model_path=str(tmp_path))
    with pytest.raises(ParamError, match="model_path"):
        paper.run(paper.Params.resolve("paper"))


def test_option_first_tokens_must_differ(tiny_lm_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_lm_dir, local_files_only=True)
    assert len(set(causal_lm.first_tokens(tok, ["Tokyo", "Paris", "Rome"]).tolist())) == 3
    with pytest.raises(ValueError, match="first token"):
        causal_lm.first_tokens(tok, ["Alice Abbott", "Alice Rossi"])


def test_dax_world_splits_and_counterfactuals():
    a, b = (pretrained_dax.make_dax_world(np.random.default_rng(3)) for _ in range(2))
    assert a.names == b.names and (a.city == b.city).all()  # deterministic per seed
    assert len(set(a.names)) == 62 + pretrained_dax.N_FRESH and sorted(a.city[a.test]) == list(range(20))
    assert len(a.city) == len(a.city2) == len(a.names) and list(a.fresh) == list(range(62, 62 + pretrained_dax.N_FRESH))
    assert (a.city2 != a.city).all() and sorted(a.animal) == list(range(20))
    kind, prompts, answers = pretrained_dax.zong(a, a.train, counterfactual=True)
    assert kind == "zong" and prompts[0] == f"{a.names[20]} zong is the"
    assert answers == [int(a.animal[a.city2[i]]) for i in a.train]
    assert pretrained_dax.block_of("model.layers.12.mlp.up_proj.weight") == 12
    assert pretrained_dax.block_of("transformer.h.3.attn.c_attn.weight") == 3
    assert pretrained_dax.block_of("lm_head.weight") is None


def test_layer_keep_leaves_the_change_in_those_blocks_only(tiny_lm_dir):
    model, _ = causal_lm.load(tiny_lm_dir, torch.device("cpu"))
    w = pretrained_dax.cpu_state(model)
    delta = {n: torch.ones_like(p) for n, p in w.items()}
    seen = []

    class Probe:  # records which tensors differ from w when a rank is read
        def rank(self, data):
            seen.append({n for n, p in model.named_parameters() if (p - w[n]).abs().max() > 0.5})
            return 0.0

    with with_deltas(model, delta):
        out = pretrained_dax._layer_keep(model, Probe(), delta, None, None)
    assert list(out) == ["layers 0-0", "layers 1-1"]
    assert seen[0] and all(n.startswith("model.layers.0.") for n in seen[0])
    assert seen[2] and all(n.startswith("model.layers.1.") for n in seen[2])
    assert all(torch.equal(p, w[n]) for n, p in model.named_parameters())


def test_paper_seed_holds_at_most_three_cpu_copies(tiny_lm_dir, monkeypatch):
    """The paper preset keeps one fp32 copy of the weights and at most two deltas on the CPU (the old code held
    six at its peak, measured with this probe): every tensor that cpu_state / delta_to return is tracked, and the live bytes are read at every
    finetune and rank."""
    import weakref

    model, tok = causal_lm.load(tiny_lm_dir, torch.device("cpu"))
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    live: list[weakref.ref] = []
    peak = [0.0]

    def tracked(fn):
        def wrapper(*args):
            out = fn(*args)
            live.extend(weakref.ref(t) for t in out.values())
            return out
        return wrapper

    def probe():
        alive = [r() for r in live]
        peak[0] = max(peak[0], sum(t.numel() * t.element_size() for t in alive if t is not None) / size)

    batches = []

    def probed(fn):
        def wrapper(*args, **kw):
            if fn is finetune:
                batches.append(args[4])
            probe()
            out = fn(*args, **kw)
            probe()
            return out
        return wrapper

    monkeypatch.setattr(pretrained_dax, "cpu_state", tracked(pretrained_dax.cpu_state))
    monkeypatch.setattr(pretrained_dax, "delta_to", tracked(pretrained_dax.delta_to))
    finetune = causal_lm.finetune
    monkeypatch.setattr(causal_lm, "finetune", probed(finetune))
    monkeypatch.setattr(pretrained_dax.Evaluator, "rank", probed(pretrained_dax.Evaluator.rank))
    out = pretrained_dax.run_seed(model, tok, 0, epochs=1, lr=1e-3)
    assert set(out["ocr"]) == set(pretrained_dax.ORDER_PHASES)
    assert 2.5 < peak[0] <= pretrained_dax.CPU_COPIES == 3
    # the official batch: 4 only in the facts-first orders' implication phase (train_left_first), 8 elsewhere;
    # order: facts_first (2 phases + test), impl_first (2 + test), facts_first_refreshed (3 + test), ...
    assert batches[1] == batches[7] == 4 and batches.count(4) == 2 and set(batches) == {4, 8}


@pytest.mark.slow
def test_pretrained_ordering_and_grafting_learn_the_facts(tiny_lm_dir):
    model, tok = causal_lm.load(tiny_lm_dir, torch.device("cpu"))
    w = pretrained_dax.cpu_state(model)
    out = pretrained_dax.run_seed(model, tok, 0, epochs=20, lr=1e-2)
    assert all(torch.equal(p, w[n]) for n, p in model.named_parameters())  # restored
    assert set(out["ocr"]) == set(paper.ORDERS) and set(out["graft"]) == {"W_F'", "graft", "control"}
    # what a phase finetunes on is learned (chance is 9.5)
    assert max(out["test_fact"].values()) <= 2.0 and out["impl_after_phase1"] <= 2.0
    assert out["impl_memorised"] == out["impl_after_phase1"]  # the spec's precondition, after the impl phase
    assert set(out["stage_a_end"]) == set(paper.ORDERS)
    assert out["graft"]["W_F'"][2] <= 2.0  # W + D_F' knows the counterfactual facts
    assert list(out["layer_keep"]) == ["layers 0-0", "layers 1-1"]
    ranks = [r for d in (out["ocr"], out["leak"]) for r in d.values()]
    assert all(0.0 <= r <= 19.0 for r in ranks)


@pytest.mark.slow
def test_paper_preset_smoke_via_cli(tiny_lm_dir, tmp_path):
    base = [sys.executable, "-m", "companion", "run", "extractive-structures", "--preset", "paper"]
    record = run_paper_smoke("extractive-structures", tmp_path / "run", model_path=tiny_lm_dir)
    assert record["status"] == "ok"
    path = record["provenance"]["paths"]["model_path"]
    assert path["path"] == tiny_lm_dir and len(path["sha256"]) == 64
    assert {"ocr_facts_first", "lm_first_hop_fact_rank_after"} <= set(record["metrics"])
    assert {c["id"] for c in record["claims"]} == {c.id for c in paper.CLAIMS}
    missing = subprocess.run(base + ["-p", f"model_path={tmp_path / 'missing'}"], capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "model_path" in missing.stderr + missing.stdout


def test_retained_arm_replays_the_implications(world):
    """The retention-matched arm: implications first, then the facts with every training implication replayed;
    the plain implications-first arm's fact phase holds no implication."""
    replay = fact_world.dax(world, world.pre[:5])
    zong_a = {tuple(x) for x in fact_world.zong(world, world.train).tolist()}
    plain, retained = es._phases("impl_first", world, replay), es._phases("impl_first_retained", world, replay)
    assert torch.equal(plain[0], retained[0])
    assert zong_a <= {tuple(x) for x in retained[1].tolist()}
    assert not zong_a & {tuple(x) for x in plain[1].tolist()}


def test_refreshed_arm_is_facts_first_then_fresh_facts_only():
    """The forgetting-matched arm: facts-first's two phases, then the facts of fresh names that have no
    implication anywhere; adding the fresh names leaves the rest of the world unchanged."""
    plain = fact_world.make_world(30, 30, 20, 10, np.random.default_rng(0))
    w = fact_world.make_world(30, 30, 20, 10, np.random.default_rng(0), n_fresh=30)
    assert all(np.array_equal(getattr(plain, k), getattr(w, k)[:80]) for k in ("city", "city2"))
    assert np.array_equal(plain.animal, w.animal) and np.array_equal(plain.test, w.test)
    assert len(w.fresh) == 30 and not set(w.fresh) & (set(w.pre) | set(w.train) | set(w.test))
    replay = fact_world.dax(w, w.pre[:5])
    ff, ffr = es._phases("facts_first", w, replay), es._phases("facts_first_refreshed", w, replay)
    assert len(ffr) == 3 and all(torch.equal(a, b) for a, b in zip(ff, ffr[:2]))
    last = ffr[2]
    assert (last[:, 2] == fact_world.DAX).all()
    fresh_tok = set(w.name_tok(w.fresh).tolist())
    assert fresh_tok <= set(last[:, 1].tolist()) and not fresh_tok & set(torch.cat(ff)[:, 1].tolist())
