"""Data ordering, weight grafting and layer keeping on a pretrained causal LM (the ``paper`` preset).

Follows the paper's dax/zong procedure (Feng, Russell and Steinhardt, ICML 2025; official
``data_ordering.py`` and ``gradient_grafting.py``) on the model at ``model_path``:

- facts ``"{name} dax is" -> city`` and implications ``"{name} zong is the" -> animal`` with
  zong = wug ∘ dax for a hidden bijection city -> animal (wug is never trained); 62 names per seed, 20
  test names (one per city) and 42 training names, each training name also with a counterfactual city;
- data ordering: from the pretrained weights W, train facts then implications, implications then facts,
  or both jointly on the training names, plus two companion arms (facts, implications, then the facts of
  42 fresh names without implications: the forgetting-matched control; implications, then facts with the
  implications replayed), then only the test names' facts; the OCR rank is the test implications' rank after
  that;
- grafting: W + Δ_F' (counterfactual facts) with Δ_{F,Impl} (implications learned on top of the facts)
  or with the control Δ_Impl (implications learned alone), evaluated on Impl(F'), Impl(F) and F';
- layer keeping: the facts-first model's test-fact change kept only in the first three quarters or only
  in the last quarter of the blocks (the paper split 32 layers at 24).

Every phase is the official finetune (``companion.models.causal_lm.finetune``: fresh Adam, constant lr,
answer tokens only), batch 8 except the implication phase of facts-first (and of the forgetting-matched
facts-first arm), batch 4 as in the official ``train_left_first`` (its ``train_both_first`` keeps batch 8).
The graft delta Δ_{F,Impl} is that batch-4 phase; the official ``gradient_grafting.py`` trains it separately
at batch 8 (not done here, to save one finetune per seed). Memory: one fp32 CPU copy of the starting weights and at most two deltas from it
(:data:`CPU_COPIES`), about 83 GB for OLMo-7B (6.9 B parameters x 4 bytes x 3), within a 128 GiB host;
the earlier code held up to six copies (about 165 GB). The entities are the companion's own: cities from
:mod:`.two_hop_facts`, animals below, people from its first and last names (the official lists carry no
licence), so no data file is read. The dax/zong words are the paper's nonce relation names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from companion.models import causal_lm
from companion.papers.extractive_structures.two_hop_facts import CITIES, FIRST_NAMES, LAST_NAMES
from companion.papers.extractive_structures.weight_deltas import Delta, with_deltas

ANIMALS = ("dog", "cat", "horse", "lion", "tiger", "bear", "wolf", "fox", "rabbit", "eagle", "owl", "shark",
           "whale", "dolphin", "snake", "frog", "monkey", "elephant", "zebra", "camel")
N_TEST, N_TRAIN = 20, 42  # the official split: names 0-19 test (one per city), 20-61 train
BATCH = 8  # the official batch size of the fact phases
CPU_COPIES = 3  # full fp32 weight copies on the CPU at most: w and two deltas (about 83 GB for OLMo-7B)
N_FRESH = N_TRAIN  # refresh names (facts only) of the forgetting-matched facts-first arm
# the Stage-A phases of each order, as kinds of set; facts_first_refreshed ends on the facts of fresh names (no
# implications), impl_first_retained replays the implications in its fact phase
ORDER_PHASES = {"facts_first": [["dax"], ["zong"]], "impl_first": [["zong"], ["dax"]],
                "facts_first_refreshed": [["dax"], ["zong"], ["fresh"]],
                "impl_first_retained": [["zong"], ["dax", "zong"]], "joint": [["dax", "zong"]]}
IMPL_BATCH = 4  # the official train_left_first (facts first) trains its implication phase with batch 4
# (train_both_first, implications first, keeps batch 8 in both phases)


@dataclass(frozen=True)
class DaxWorld:
    """One seed's names with their cities (real and counterfactual) and the hidden city -> animal map."""

    names: list[str]
    city: np.ndarray  # (62,) index into CITY_NAMES
    city2: np.ndarray  # (62,) counterfactual city, never equal to ``city``
    animal: np.ndarray  # (20,) index into ANIMALS of each city, a permutation

    @property
    def test(self) -> np.ndarray:
        """Indices of the test names."""
        return np.arange(N_TEST)

    @property
    def train(self) -> np.ndarray:
        """Indices of the training names."""
        return np.arange(N_TEST, N_TEST + N_TRAIN)

    @property
    def fresh(self) -> np.ndarray:
        """Indices of the refresh names (facts only; not in the official split)."""
        return np.arange(N_TEST + N_TRAIN, N_TEST + N_TRAIN + N_FRESH)


CITY_NAMES = tuple(CITIES)


def make_dax_world(rng: np.random.Generator) -> DaxWorld:
    """62 distinct people (the official split), then N_FRESH refresh people, drawn after everything else; test
    names get distinct cities, the others random ones; every name moves in F'."""
    n_c = len(CITY_NAMES)
    pairs = rng.choice(len(FIRST_NAMES) * len(LAST_NAMES), size=N_TEST + N_TRAIN, replace=False)
    city = np.concatenate([rng.permutation(n_c), rng.integers(0, n_c, size=N_TRAIN)])
    city2 = (city + rng.integers(1, n_c, size=len(city))) % n_c
    animal = rng.permutation(len(ANIMALS))
    rest = np.setdiff1d(np.arange(len(FIRST_NAMES) * len(LAST_NAMES)), pairs)
    pairs = np.concatenate([pairs, rng.choice(rest, size=N_FRESH, replace=False)])
    fresh_city = rng.integers(0, n_c, size=N_FRESH)
    city = np.concatenate([city, fresh_city])
    city2 = np.concatenate([city2, (fresh_city + rng.integers(1, n_c, size=N_FRESH)) % n_c])
    names = [f"{FIRST_NAMES[i // len(LAST_NAMES)]} {LAST_NAMES[i % len(LAST_NAMES)]}" for i in pairs]
    return DaxWorld(names, city, city2, animal)


Set = tuple[str, list[str], list[int]]  # ("dax" | "zong", prompts, answer indices)


def dax(world: DaxWorld, idx: np.ndarray, counterfactual: bool = False) -> Set:
    """Fact prompts ``"{name} dax is"`` and the index of the city answering each."""
    cities = world.city2 if counterfactual else world.city
    return "dax", [f"{world.names[i]} dax is" for i in idx], [int(cities[i]) for i in idx]


def zong(world: DaxWorld, idx: np.ndarray, counterfactual: bool = False) -> Set:
    """Implication prompts ``"{name} zong is the"`` and the index of the animal answering each."""
    cities = world.city2 if counterfactual else world.city
    return "zong", [f"{world.names[i]} zong is the" for i in idx], [int(world.animal[cities[i]]) for i in idx]


def _words(kind: str) -> tuple[str, ...]:
    """The options of a set's kind: cities for dax, animals for zong."""
    return CITY_NAMES if kind == "dax" else ANIMALS


class Evaluator:
    """Encodes sets of one tokenizer's prompts and ranks their answers among the 20 options."""

    def __init__(self, model, tok) -> None:
        self.model, self.tok = model, tok
        self.options = {kind: causal_lm.first_tokens(tok, _words(kind)) for kind in ("dax", "zong")}

    def encode(self, *sets: Set) -> causal_lm.Encoded:
        """``prompt + " " + answer`` sequences of every set, to finetune on."""
        prompts = [p for _, ps, _ in sets for p in ps]
        answers = [_words(kind)[a] for kind, _, ans in sets for a in ans]
        return causal_lm.encode(self.tok, prompts, answers)

    def rank(self, data: Set) -> float:
        """Mean rank of the right option (0 = best, chance 9.5)."""
        ranks = causal_lm.option_ranks(self.model, self.encode(data), self.options[data[0]], torch.tensor(data[2]))
        return float(ranks.float().mean())


def cpu_state(model: torch.nn.Module) -> Delta:
    """A CPU copy of every parameter (spares accelerator memory)."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}


def delta_to(model: torch.nn.Module, before: Delta) -> Delta:
    """``W_now - W_before`` on the CPU."""
    return {n: p.detach().cpu() - before[n] for n, p in model.named_parameters()}


def restore(model: torch.nn.Module, state: Delta) -> None:
    """Set every parameter back to ``state``."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(state[n])


def block_of(name: str) -> int | None:
    """The transformer block a parameter belongs to (``h.3.`` or ``layers.3.``), or None."""
    found = re.search(r"\.(?:h|layers|blocks)\.(\d+)\.", name)
    return int(found.group(1)) if found else None


def run_seed(model, tok, seed: int, epochs: int, lr: float) -> dict:
    """The orders with the test finetune, grafting and layer keeping for one seed's world.

    Returns the fields of the toy's per-seed result: ``ocr``, ``test_fact``, ``leak``, ``stage_a_end``,
    ``impl_memorised`` = ``impl_after_phase1`` (right after the implication phase), ``graft`` and ``layer_keep``. ``model``
    is restored to its weights on return. Memory: one fp32 CPU copy of the weights (``w``) and at most two
    deltas from it are held at once (:data:`CPU_COPIES`); every other state is built in place.
    """
    rng = np.random.default_rng(seed)
    world = make_dax_world(rng)
    ev = Evaluator(model, tok)
    w = cpu_state(model)

    def fit(*sets: Set, batch: int = BATCH) -> None:
        causal_lm.finetune(model, ev.encode(*sets), epochs, lr, batch, rng)

    facts, impls, fresh = dax(world, world.train), zong(world, world.train), dax(world, world.fresh)
    test_facts, test_impls = dax(world, world.test), zong(world, world.test)
    out: dict = {"ocr": {}, "test_fact": {}, "leak": {}, "graft": {}, "layer_keep": {}, "stage_a_end": {}}
    deltas: dict[str, Delta] = {}
    for order, phases in ORDER_PHASES.items():
        restore(model, w)
        for k, phase in enumerate(phases):
            # as the official train_left_first: batch 4 in the implication phase of the facts-first orders
            batch = IMPL_BATCH if order.startswith("facts_first") and k == 1 else BATCH
            fit(*[{"dax": facts, "zong": impls, "fresh": fresh}[kind] for kind in phase], batch=batch)
            if (order, k) == ("facts_first", 0):
                d_stage = delta_to(model, w)  # the facts' change; becomes the Stage-A change below
            if (order, k) == ("facts_first", 1):
                deltas["F,Impl"] = delta_to(model, w)  # implications learned on top of the facts
                for n, d in deltas["F,Impl"].items():
                    d.sub_(d_stage[n])
                    d_stage[n].add_(d)
            if (order, k) == ("impl_first", 0):
                deltas["Impl"] = delta_to(model, w)  # implications learned alone
                out["impl_after_phase1"] = out["impl_memorised"] = ev.rank(impls)
        out["stage_a_end"][order] = [ev.rank(facts), ev.rank(impls)]
        out["leak"][order] = ev.rank(test_impls)
        fit(test_facts)
        out["test_fact"][order], out["ocr"][order] = ev.rank(test_facts), ev.rank(test_impls)
        if order == "facts_first":
            with torch.no_grad():  # the test change, in place of the Stage-A change: W_now - w - D_stage
                for n, p in model.named_parameters():
                    d_stage[n].neg_().add_(p.detach().cpu()).sub_(w[n])
            out["layer_keep"] = _layer_keep(model, ev, d_stage, test_facts, test_impls)
            del d_stage
    restore(model, w)
    fit(dax(world, world.train, True))  # the model is now W_F' = w + D_F'
    evals = (zong(world, world.train, True), impls, dax(world, world.train, True))
    for label, extra in (("W_F'", []), ("graft", [deltas["F,Impl"]]), ("control", [deltas["Impl"]])):
        with with_deltas(model, *extra):
            out["graft"][label] = [ev.rank(data) for data in evals]
    restore(model, w)
    return out


def _layer_keep(model, ev: Evaluator, delta: Delta, facts: Set, impls: Set) -> dict[str, list[float]]:
    """Test-fact change kept in the first three quarters or the last quarter of the blocks: [fact, OCR] ranks.

    The change outside the kept blocks is subtracted in place (no CPU copy); the weights are restored exactly.
    """
    n = 1 + max(b for b in map(block_of, delta) if b is not None)
    split = max(1, (3 * n) // 4)
    params = dict(model.named_parameters())
    out = {}
    for blocks in (range(split), range(split, n)):
        if not blocks:
            continue
        with with_deltas(model), torch.no_grad():
            for name, d in delta.items():
                if block_of(name) not in blocks:
                    params[name].sub_(d.to(params[name].device))
            out[f"layers {blocks.start}-{blocks.stop - 1}"] = [ev.rank(facts), ev.rank(impls)]
    return out
