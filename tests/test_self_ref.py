"""Unit checks of the Self-REF reproduction (spec: shared/papers/self-ref.md, "Unit checks")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from companion import claims
from companion.params import ParamError
from companion.papers import self_ref as sr
from companion.papers.self_ref import confidence, lm, qa_data, routing
from companion.papers.self_ref.pipeline import selfref_data
from hf_tiny import run_paper_smoke, save_word_tokenizer


def test_vocab_has_each_confidence_token_once_and_new_rows_are_the_mean():
    v = qa_data.base_vocab()
    vc = v.with_tokens(qa_data.CONFIDENCE).with_tokens(qa_data.CONFIDENCE)
    assert "<CN>" not in v.tokens and vc.tokens.count("<CN>") == 1 and vc.tokens.count("<UN>") == 1
    assert len(vc) == len(v) + 2
    model = lm.build(len(v), 1, 32, seed=0)
    old = model.get_input_embeddings().weight.detach().clone()
    confidence.add_confidence_tokens(model, len(v), len(vc))
    emb = model.get_input_embeddings().weight.detach()
    assert emb.shape[0] == len(vc)
    torch.testing.assert_close(emb[: len(v)], old)
    torch.testing.assert_close(emb[len(v):], old.mean(0).expand(2, -1))
    # the tied output rows equal, so the fresh score is exactly 1/2
    prompts = qa_data.Split(np.array([0]), np.array([[1, 2, 3]]), np.array([6]), np.array([True])).prompts(vc)
    s = lm.selfref_score(model, prompts, np.array([6]), vc.id("<CN>"), vc.id("<UN>"))
    assert s[0] == pytest.approx(0.5, abs=1e-6)


def test_algorithm1_labels_targets_ratio_and_determinism():
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 10, 400)
    pred = np.where(rng.random(400) < 0.7, gold, (gold + 1) % 10)
    for ratio in (0.2, 0.5, 0.8):
        aug = confidence.algorithm1(pred, gold, ratio, np.random.default_rng(1))
        assert np.array_equal(aug.confident, pred[aug.index] == gold[aug.index])
        assert np.array_equal(aug.answer, pred[aug.index])  # targets are the model's own answers
        assert abs(aug.un_share - ratio) <= 1 / len(aug.index) + 1e-12
    a = confidence.algorithm1(pred, gold, 0.5, np.random.default_rng(5))
    b = confidence.algorithm1(pred, gold, 0.5, np.random.default_rng(5))
    assert np.array_equal(a.index, b.index)
    scarce = confidence.algorithm1(np.ones(10, int), np.zeros(10, int), 0.5, np.random.default_rng(0))
    assert scarce.un_share == 1.0 and len(scarce.index) == 10
    with pytest.raises(ValueError, match="un_ratio"):
        confidence.algorithm1(pred, gold, 1.0, rng)


def test_label_masking_of_selfref_sequences():
    vc = qa_data.base_vocab().with_tokens(qa_data.CONFIDENCE)
    split = qa_data.Split(np.array([0, 1, 2, 3]), np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [0, 0, 1]]),
                          np.array([6, 6, 4, 5]), np.ones(4, bool))
    pred = np.array([6, 5, 4, 2])  # right, wrong, right, wrong
    seq, lab, share, n = selfref_data(split, vc, pred, 0.5, True, np.random.default_rng(0))
    assert n == 4 and share == 0.5
    assert (lab[:, : lm.PROMPT_LEN] == confidence.IGNORE).all()
    ok = torch.as_tensor(pred == split.gold)
    assert (lab[~ok, lm.PROMPT_LEN] == confidence.IGNORE).all()
    assert (lab[~ok, lm.PROMPT_LEN + 1] == vc.id("<UN>")).all()
    assert torch.equal(lab[ok, lm.PROMPT_LEN], torch.as_tensor(pred[ok.numpy()]))
    assert (lab[ok, lm.PROMPT_LEN + 1] == vc.id("<CN>")).all()
    _, unmasked, _, _ = selfref_data(split, vc, pred, 0.5, False, np.random.default_rng(0))
    assert torch.equal(unmasked[~ok, lm.PROMPT_LEN], torch.as_tensor(pred[~ok.numpy()]))


def test_score_is_sigmoid_of_the_two_logits_and_ignores_others():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 21, generator=g) * 5
    s = confidence.confidence_score(logits, 19, 20)
    p = logits.softmax(-1)
    torch.testing.assert_close(s, p[:, 19] / (p[:, 19] + p[:, 20]))
    assert ((s >= 0) & (s <= 1)).all()
    other = logits.clone()
    other[:, :19] += torch.randn(50, 19, generator=g) * 10
    torch.testing.assert_close(confidence.confidence_score(other, 19, 20), s)


def test_train_warmup_takes_small_first_steps_and_decays_to_zero():
    rng = np.random.default_rng(0)
    seq = torch.as_tensor(rng.integers(0, 10, (32, 9)))
    labels = lm.prompt_masked(seq)

    def change(steps: int, warmup: int) -> tuple[float, list[float]]:
        model = lm.build(19, 1, 32, seed=0)
        before = [p.detach().clone() for p in model.parameters()]
        losses = lm.train(model, seq, labels, steps, 1e-2, 8, torch.Generator().manual_seed(0), warmup=warmup)
        return max(float((p.detach() - q).abs().max()) for p, q in zip(model.parameters(), before)), losses

    # Adam's first update moves a weight by about the step size: lr without warm-up, lr / warmup with it
    flat, _ = change(1, 0)
    warm, _ = change(1, 10)
    assert flat == pytest.approx(1e-2, rel=0.05) and warm == pytest.approx(1e-3, rel=0.05)
    # a cosine-decayed run and a constant one draw the same minibatches but end at different weights
    _, a = change(20, 5)
    _, b = change(20, 0)
    assert len(a) == len(b) == 20 and a[0] == b[0] and a[-1] != b[-1]


def test_routing_curve_endpoints_rate_and_ties():
    rng = np.random.default_rng(0)
    n = 97
    small, large = rng.random(n) < 0.5, rng.random(n) < 0.9
    scores = rng.integers(0, 4, n).astype(float)  # many ties
    rates = np.linspace(0, 1, 21)
    acc = routing.routed_accuracy(scores, small, large, rates)
    assert acc[0] == small.mean() and acc[-1] == large.mean()
    for r in rates:
        m = routing.route_mask(scores, r)
        assert abs(m.mean() - r) <= 1 / n
    m = routing.route_mask(np.zeros(10), 0.3)
    assert np.array_equal(np.flatnonzero(m), [0, 1, 2])  # ties go by index
    oracle = routing.oracle_accuracy(small, large, rates)
    for s in (scores, rng.random(n), -scores, small.astype(float)):
        assert (oracle >= routing.routed_accuracy(s, small, large, rates) - 1e-12).all()
    # random routing: the mean over many random orders is the straight line
    sims = np.mean([routing.routed_accuracy(rng.random(n), small, large, rates) for _ in range(2000)], 0)
    np.testing.assert_allclose(sims, routing.random_accuracy(small, large, rates), atol=0.01)
    assert routing.rate_to_match(rates, acc, large.mean()) <= 1.0


def test_auroc_and_ece_match_references():
    rng = np.random.default_rng(0)
    for s, y in [(rng.random(200), rng.random(200) < 0.4),
                 (rng.integers(0, 3, 200).astype(float), rng.random(200) < 0.6),
                 (np.r_[np.ones(50), np.zeros(50)], np.r_[np.ones(30, bool), np.zeros(70, bool)])]:
        assert routing.auroc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    # ECE against a reference that bins differently: with n = 15 k distinct scores, the 15 equal-mass bins are
    # the rows of the sorted arrays reshaped to (15, k)
    for k in (1, 4, 13):
        s, y = rng.permutation(15 * k) / (15 * k), rng.random(15 * k) < 0.5
        o = np.argsort(s)
        ref = np.abs(s[o].reshape(15, k).mean(1) - y[o].reshape(15, k).mean(1)).mean()
        assert routing.ece(s, y) == pytest.approx(ref, abs=1e-12)
    # tied scores are binned by index (stable sort): bins of 2, the first 12 all right, the last 3 all wrong
    tied = routing.ece(np.full(30, 0.8), np.r_[np.ones(24, bool), np.zeros(6, bool)])
    assert tied == pytest.approx((24 * 0.2 + 6 * 0.8) / 30)
    assert routing.ece(np.ones(30), np.zeros(30, bool)) == pytest.approx(1.0)
    assert np.isnan(routing.auroc(np.ones(3), np.ones(3, bool)))


def test_splits_disjoint_and_fact_mix():
    mx = qa_data.make_mixture(qa_data.OPS, 0.5, np.random.default_rng(3))
    key = lambda sp, o: {tuple(t) for t in sp.abc[sp.op == o]}  # noqa: E731
    for o in range(3):
        parts = [key(getattr(mx, k), o) for k in "PSVT"]
        assert sum(map(len, parts)) == len(set().union(*parts))
    f = qa_data.OPS.index("FACT")
    in_p = key(mx.P, f)
    idx = lambda t: 100 * t[0] + 10 * t[1] + t[2]  # noqa: E731
    assert all(mx.fact_known[idx(t)] for t in in_p) and len(in_p) == mx.fact_known.sum()
    for k in "SVT":
        sp = getattr(mx, k)
        fact = sp.op == f
        assert sp.known[fact].mean() == 0.5
        assert all((tuple(t) in in_p) == kn for t, kn in zip(sp.abc[fact], sp.known[fact]))
    assert np.array_equal(qa_data.base_vocab().digit_of(np.array([0, 9, 10, 18, -1])), [0, 9, -1, -1, -1])


def test_test_set_is_not_grouped_so_an_operation_level_score_ties_at_random():
    mx = qa_data.make_mixture(qa_data.OPS, 0.5, np.random.default_rng(3))
    op_only = mx.T.op.astype(float)  # constant within an operation, like the op-only control
    routed = mx.T.op[routing.route_mask(op_only, 0.1)]
    assert set(routed) == {0}  # the lowest score's operation only ...
    assert len(set(mx.T.op[: len(mx.T) // 10])) >= 3  # ... but T is not in operation order
    fact = mx.T.op == qa_data.OPS.index("FACT")
    first_fact = mx.T.known[fact][: fact.sum() // 4]
    assert 0 < first_fact.mean() < 1  # known and unknown facts interleave


def test_params_validation():
    with pytest.raises(ParamError, match="un_ratio"):
        sr.Params.resolve(un_ratio=0.95)
    with pytest.raises(ParamError, match="report_rate"):
        sr.Params.resolve(report_rate=0.33)
    with pytest.raises(ParamError, match="use_lora"):
        sr.Params.resolve(use_lora=True)
    with pytest.raises(ParamError, match="ops"):
        sr.Params.resolve(ops=("SUM", "DIV"))
    with pytest.raises(ParamError, match="model_path"):
        sr.Params.resolve("paper", model_path="/nonexistent/llm")


def test_tiny_run_is_deterministic_and_checks():
    p = sr.Params.resolve(seeds=1, base_steps=100, sharpen_steps=0, selfref_steps=50, batch_size=16)
    a, b = sr.run(p), sr.run(p)
    ca, cb = a.seeds[0].conditions["plain"], b.seeds[0].conditions["plain"]
    np.testing.assert_array_equal(ca.conf, cb.conf)
    np.testing.assert_array_equal(ca.msp, cb.msp)
    verdicts = sr.check(a)
    assert [v.id for v in verdicts] == [c.id for c in sr.CLAIMS]
    for v, c in zip(verdicts, sr.CLAIMS):  # every finding's controls measured in the same run
        assert [x.name for x in v.controls] == list(c.controls) and (c.role == "finding") == bool(c.controls)
    json.dumps(sr.metrics(a))


@pytest.fixture(scope="module")
def two_seeds():
    """A tiny sharpened run of two seeds, in process (no worker pool to start)."""
    from companion.papers.self_ref.pipeline import run_seed

    p = sr.Params.resolve(seeds=2, base_steps=100, sharpen_steps=50, selfref_steps=50, batch_size=16)
    return sr.Results(p, [run_seed(p.to_dict(), s) for s in p.seed_list()], np.asarray(p.routing_rates), "tiny", 0.0)


def test_controls_put_their_scorer_in_self_refs_place(two_seeds):
    res = two_seeds
    vals, m = sr.claim_values(res), sr.measures(res, "sharp")
    assert vals.preset == "quick"
    np.testing.assert_allclose(vals["route-vs-msp@msp-sft"], m["acc_at_r_sft"] - m["acc_at_r_msp"])
    np.testing.assert_allclose(vals["auroc-selfref@op-only"], m["auroc_oponly"])
    np.testing.assert_allclose(vals["route-auc-vs-random@msp-sft"], m["auc_sft"] - m["auc_random_sft"])
    items = np.asarray(vals["route-vs-msp"]) * m["n_test"].to_numpy()
    np.testing.assert_allclose(items, items.round(), atol=1e-6)  # a gain is a whole number of test items
    assert vals["route-vs-msp-seed-share"] == (items.round() >= 1).astype(float).tolist()  # a seed gains >= 1 item
    share = next(c for c in sr.CLAIMS if c.id == "route-vs-msp-seed-share")
    # with six seeds the row behaves as a sign test: it holds only when every seed gains, fails only when none does
    verdicts = [claims.evaluate(share, [1.0] * k + [0.0] * (6 - k)).verdict for k in range(7)]
    assert verdicts == [claims.FAILS] + [claims.INCONCLUSIVE] * 5 + [claims.HOLDS]
    # the op-only score is constant within an operation: its within-op AUROC is 1/2 wherever both classes occur
    o = res.seeds[0]
    assert all(len(np.unique(o.conditions["sharp"].op_only[o.op == k])) == 1 for k in np.unique(o.op))
    assert m["within_op_auroc_oponly"].tolist() == [0.5, 0.5]


def test_op_only_score_is_the_per_op_accuracy_on_s():
    from companion.papers.self_ref.pipeline import op_only_score

    op_s, ok_s = np.array([0, 0, 0, 1, 1, 2]), np.array([1, 1, 0, 0, 0, 1], bool)
    np.testing.assert_allclose(op_only_score(op_s, ok_s, np.array([2, 1, 0, 3])), [1.0, 0.0, 2 / 3, np.nan])


def test_sft_baseline_runs_only_for_the_sharpened_condition(two_seeds):
    res = two_seeds
    plain, sharp = res.seeds[0].conditions["plain"], res.seeds[0].conditions["sharp"]
    assert plain.ok_sft is None and sharp.ok_sft is not None
    assert "MSP (SFT)" not in sr.curves(res.seeds[0], "plain", res.rates)
    table = sr.summary_table(res)
    assert np.isnan(table.loc["AUROC MSP (SFT)", "no sharpening"])
    assert table.loc["AUROC MSP (SFT)", "sharpened base"] == round(sr.measures(res, "sharp")["auroc_sft"].mean(), 3)
    sr.plot_routing(res)


@pytest.fixture(scope="module")
def tiny_llama_and_jsonl(tmp_path_factory):
    """A tiny random Llama with a word-level tokenizer and a tiny JSONL dataset, saved offline."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("self_ref_paper")
    words = ["Q:", "A:", "what", "is", "plus", *map(str, range(10))]
    vocab = save_word_tokenizer(root / "llm", ["[PAD]", "[UNK]", "</s>", *words], pad_token="[PAD]", eos_token="</s>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64, pad_token_id=0,
                      eos_token_id=2, bos_token_id=2, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(root / "llm")
    rng = np.random.default_rng(0)
    rows = []
    for i, split in enumerate(["train"] * 20 + ["val"] * 6 + ["test"] * 10 + ["unanswerable"] * 4):
        a, b = rng.integers(0, 5, 2)
        rows.append({"prompt": f"Q: what is {a} plus {b} A:", "answer": str(a + b), "split": split,
                     "strong_correct": bool(i % 3)})
    (root / "data").mkdir()
    (root / "data" / "toyqa.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(root / "llm"), str(root / "data"), root


def test_paper_loader_adds_tokens_once(tiny_llama_and_jsonl):
    from companion.models import causal_lm
    from companion.papers.self_ref import paper_preset

    llm, data, _ = tiny_llama_and_jsonl
    model, tok = causal_lm.load(llm, torch.device("cpu"))
    n = len(tok)
    head = model.get_output_embeddings().weight.detach().clone()
    cn, un = paper_preset.add_tokens(model, tok)
    assert paper_preset.add_tokens(model, tok) == (cn, un) and len(tok) == n + 2
    torch.testing.assert_close(model.get_output_embeddings().weight[cn].detach(), head.mean(0))
    rows = paper_preset.read_jsonl(paper_preset.dataset_files(data)[0])
    assert [len(rows[s]) for s in paper_preset.SPLITS] == [20, 6, 10, 4]


class _EmitsConfidence(torch.nn.Module):
    """A stub causal LM whose next token depends on the last one: after "A:" it answers "7", then <CN>, then EOS."""

    def __init__(self, vocab: int, table: dict[int, dict[int, float]]):
        super().__init__()
        self.logits = torch.full((vocab, vocab), -10.0)
        for last, nxt in table.items():
            for tok_id, z in nxt.items():
                self.logits[last, tok_id] = z
        self.device = torch.device("cpu")

    def forward(self, input_ids, cache=None, use_cache=False, **_):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.logits[input_ids], cache=None)


def test_paper_answers_stop_before_the_confidence_token_and_score_reads_its_position(tiny_llama_and_jsonl):
    from transformers import AutoTokenizer

    from companion.papers.self_ref import paper_preset

    tok = AutoTokenizer.from_pretrained(tiny_llama_and_jsonl[0])
    tok.add_special_tokens({"additional_special_tokens": ["<CN>", "<UN>"]})
    cn, un, eos, seven, a = (tok.convert_tokens_to_ids(t) for t in ("<CN>", "<UN>", "</s>", "7", "A:"))
    # a trained Self-REF model: answer, then the confidence token (CN over UN by 3 logits), then EOS
    stub = _EmitsConfidence(len(tok), {a: {seven: 5.0}, seven: {cn: 4.0, un: 1.0}, cn: {eos: 5.0, un: 4.0}})
    prompt = "Q: what is 3 plus 4 A:"
    answers, _ = paper_preset.greedy(stub, tok, [prompt], 5, stop=(cn, un))
    assert answers == [[seven]] and paper_preset.decode(tok, answers[0]) == "7"
    conf = paper_preset.selfref_scores(stub, tok, [prompt], answers, cn, un)
    assert conf[0] == pytest.approx(1 / (1 + np.exp(-3.0)))  # read where <CN>/<UN> is predicted, not after it
    # without the stop ids the answer carries <CN>; decoding still skips it, so "7<CN>" never reaches the grader
    raw, _ = paper_preset.greedy(stub, tok, [prompt], 5)
    assert raw == [[seven, cn]] and paper_preset.decode(tok, raw[0]) == "7"


def test_paper_preset_pools_datasets_within_a_seed(tiny_llama_and_jsonl):
    llm, data, root = tiny_llama_and_jsonl
    two = root / "two"
    two.mkdir(exist_ok=True)
    text = (Path(data) / "toyqa.jsonl").read_text()
    for name in ("alpha", "beta"):
        (two / f"{name}.jsonl").write_text(text)
    res = sr.run(sr.Params.resolve("paper", model_path=llm, data_path=str(two), smoke=True, device="cpu"))
    assert [o.seed for o in res.seeds] == [0] and res.op_names == ("alpha", "beta")
    o = res.seeds[0]
    assert sorted(np.unique(o.op)) == [0, 1] and len(o.op) == 16  # 8 test items of each dataset, one seed
    assert list(sr.per_op_table(res).index) == ["alpha", "beta"]
    # the paper preset's values are judged against the paper's bars (Claim.paper_threshold), the toy's elsewhere
    from dataclasses import replace

    vals = sr.claim_values(res)
    assert vals.preset == "paper"
    assert [v.threshold for v in sr.check(res)] == [c.at("paper").threshold for c in sr.CLAIMS]
    bars = [replace(c, paper_threshold=c.threshold + 1.0) for c in sr.CLAIMS]  # a paper bar on every row
    assert [v.threshold for v in claims.evaluate_all(bars, vals)] == [c.threshold + 1.0 for c in sr.CLAIMS]
    at_quick = claims.AtPreset("quick", vals)
    assert [v.threshold for v in claims.evaluate_all(bars, at_quick)] == [c.threshold for c in sr.CLAIMS]


@pytest.mark.slow
def test_paper_preset_smoke_via_cli(tiny_llama_and_jsonl):
    llm, data, root = tiny_llama_and_jsonl
    out = root / "run"
    record = run_paper_smoke("self-ref", out, model_path=llm, data_path=data)
    assert record["status"] == "ok" and "local LLM" in record["metrics"]["source"]


def test_cached_confidence_step_equals_the_full_pass_on_distinct_confidence_rows():
    v = qa_data.base_vocab()
    vc = v.with_tokens(qa_data.CONFIDENCE)
    model = lm.build(len(v), 2, 64, seed=0)
    confidence.add_confidence_tokens(model, len(v), len(vc))
    with torch.no_grad():  # fresh mean rows score 1/2 on every path; random rows make a wrong cache visible
        model.get_input_embeddings().weight[len(v):] = torch.randn(2, 64, generator=torch.Generator().manual_seed(1))
    model.eval()
    prompts = torch.as_tensor(qa_data.make_mixture(qa_data.OPS, 0.5, np.random.default_rng(0)).T.prompts(vc)[:16])
    cn, un = vc.id("<CN>"), vc.id("<UN>")
    cached = [lm.selfref_query(model, p, cn, un) for p in prompts]
    full = lm.selfref_score(model, prompts.numpy(), np.array([a for a, _ in cached]), cn, un)
    assert np.std(full) > 1e-3
    np.testing.assert_allclose([c for _, c in cached], full, atol=1e-5)
    assert [a for a, _ in cached] == [lm.msp_query(model, p)[0] for p in prompts]


def test_mask_ablation_reports_accuracy_and_auroc_of_the_unmasked_model():
    from companion.papers.self_ref.pipeline import run_seed

    p = sr.Params.resolve(seeds=1, base_steps=100, sharpen_steps=0, selfref_steps=50, batch_size=16, mask_ablation=True)
    res = sr.Results(p, [run_seed(p.to_dict(), 0)], np.asarray(p.routing_rates), "tiny", 0.0)
    c = res.seeds[0].conditions["plain"]
    assert c.ok_unmasked is not None and c.conf_unmasked.shape == c.conf.shape
    plain = sr.metrics(res)["plain"]
    assert plain["acc_unmasked"] == round(float(c.ok_unmasked.mean()), 4) and "auroc_unmasked" in plain


@pytest.mark.parametrize("n_layer,n_embd,length", [(2, 64, 9), (4, 128, 8), (1, 32, 8)])
def test_label_logits_pass_equals_the_full_forward_and_its_loss_and_gradients(n_layer, n_embd, length, monkeypatch):
    """The lean training pass (last token not fed, shared prefixes once, last block only at the labelled
    positions) is GPT-2's full forward pass: same logits, loss and gradients up to float rounding."""
    import copy

    from companion.models.gpt2_pass import gpt2_label_logits
    from companion.papers.self_ref.confidence import IGNORE

    torch.manual_seed(0)
    model = lm.build(26, n_layer, n_embd, 0)
    seq = torch.randint(0, 26, (37, length))
    seq[:, 0], seq[:, 1] = 1, torch.randint(2, 5, (37,))  # BOS OP: few distinct prefixes, computed once each
    seq[-1, 1] = 7  # and one prefix of a single row
    labels = lm.prompt_masked(seq)
    labels[::3, lm.PROMPT_LEN] = IGNORE  # UN examples: the wrong answer masked, only the confidence token learned
    full = model(input_ids=seq, use_cache=False).logits
    first = lm.PROMPT_LEN - 1
    torch.testing.assert_close(gpt2_label_logits(model, seq, first, lm.SHARED_PREFIX), full[:, first:-1], rtol=0,
                               atol=1e-5)

    def reference(m):  # the loss over every position, as before
        return torch.nn.functional.cross_entropy(m(input_ids=seq, use_cache=False).logits[:, :-1].flatten(0, 1),
                                                 labels[:, 1:].flatten(), ignore_index=IGNORE)

    model.train()
    lean, ref = lm.lm_loss(model, seq, labels), reference(model)
    torch.testing.assert_close(lean, ref, rtol=0, atol=1e-6)
    for a, b in zip(torch.autograd.grad(lean, list(model.parameters())),
                    torch.autograd.grad(ref, list(model.parameters()))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # a label on a prompt position: the full pass (the lean one would not see it)
    labels[0, 2] = 3
    torch.testing.assert_close(lm.lm_loss(model, seq, labels), reference(model))
    # a few Adam steps with the lean pass follow those with the full pass (same minibatches)
    twin = copy.deepcopy(model)
    lean_losses = lm.train(model, seq, lm.prompt_masked(seq), 5, 3e-3, 16, torch.Generator().manual_seed(1))
    monkeypatch.setattr(lm, "lm_loss", lambda m, s, lab: torch.nn.functional.cross_entropy(
        m(input_ids=s, use_cache=False).logits[:, :-1].flatten(0, 1), lab[:, 1:].flatten(), ignore_index=IGNORE))
    full_losses = lm.train(twin, seq, lm.prompt_masked(seq), 5, 3e-3, 16, torch.Generator().manual_seed(1))
    np.testing.assert_allclose(lean_losses, full_losses, rtol=1e-5)
