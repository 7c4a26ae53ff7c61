"""Performance anchor of Stay-Positive: the post-hoc step is cheap next to training the detector.

Times, in interleaved rounds (``companion.bench.compare``: median ratio with its range), and prints
ratios only; writes ``data/bench/stay-positive.json`` (anchor: stage 2 / stage 1, spec < 0.2):
- head retraining (LP + SP, quick settings) / one stage-1 epoch, and / the quick preset's 4 epochs;
- feature extraction + head retraining (all of stage 2) / stage 1 at the quick preset;
- inference on 1000 patches with the SP, LP and Base heads (same graph: expect 1.0 +- 0.1);
- Pillow JPEG round trips of the training reals / stage 1 (data pipeline share);
- our average precision / scikit-learn's ``average_precision_score`` on the same scores.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import torch
from sklearn.metrics import average_precision_score

from companion import bench, runtime
from companion.papers.stay_positive import photo_patches as pp
from companion.papers.stay_positive import experiment as sp

REPEATS = 3




def main() -> None:
    """Build a 1000-pair world at the quick settings once, then time each stage against stage 1."""
    runtime.limit_threads()
    p = sp.Params.resolve("quick", n_train=1000, n_test=200)
    rng, gen = runtime.generators(0)
    sets, _ = sp.make_sets(p, rng)
    real, fake = sets["train_real"], sets["train_fake"]

    model = sp.Detector(p.width, p.highpass)
    sp.train_stage1(model, real, fake, p.epochs, gen)
    sp.freeze_backbone(model)
    feats = {k: sp.extract_features(model, v) for k, v in sets.items()}

    def both_heads() -> list[torch.nn.Linear]:
        return [sp.retrain_head(feats["train_real"], feats["train_fake"], c, p.head_steps,
                                p.head_lr, gen) for c in (False, True)]

    def stage2() -> None:
        [sp.extract_features(model, v) for v in sets.values()]
        both_heads()

    q = np.random.default_rng(1).integers(65, 96, len(real))
    out = bench.compare({"one stage-1 epoch": lambda: sp.train_stage1(sp.Detector(p.width, p.highpass), real, fake, 1, gen),
                         "stage 2 (features + heads)": stage2, "head retraining (LP+SP)": both_heads,
                         "JPEG round trips": lambda: pp.jpeg_batch(pp.q8(real), q)},
                        "one stage-1 epoch", rounds=REPEATS, clock="cpu")
    e = p.epochs

    def per_stage1(c: bench.Comparison) -> bench.Comparison:
        return dataclasses.replace(c, reference=f"stage 1 ({e} epochs)", ratio=c.ratio / e, ratio_min=c.ratio_min / e,
                                   ratio_max=c.ratio_max / e, reference_seconds=c.reference_seconds * e)

    anchor = per_stage1(out["stage 2 (features + heads)"])
    lp, sph = both_heads()
    x = sp.to_tensor(sets["clean"][:1000] if len(sets["clean"]) >= 1000 else
                     np.concatenate([sets["clean"]] * (1000 // len(sets["clean"]) + 1))[:1000])

    def infer(head: torch.nn.Linear) -> Callable[[], torch.Tensor]:
        m = sp.Detector(p.width, p.highpass)
        m.load_state_dict(model.state_dict())
        m.head = head
        m.eval()
        return lambda: torch.no_grad()(m)(x)

    heads = bench.compare({"Base head": infer(model.head), "LP head": infer(lp), "SP head": infer(sph)}, "Base head",
                          rounds=7, clock="cpu")
    rs = np.random.default_rng(2)
    neg, pos = rs.normal(size=20000), rs.normal(0.5, 1.0, size=20000)
    labels, scores = np.r_[np.zeros(20000), np.ones(20000)], np.r_[neg, pos]
    ap = bench.compare({"ours": lambda: sp.average_precision(neg, pos),
                        "scikit-learn": lambda: average_precision_score(labels, scores)}, "scikit-learn", rounds=7, clock="cpu")["ours"]
    print("  " + out["head retraining (LP+SP)"].line())
    print("  " + per_stage1(out["head retraining (LP+SP)"]).line())
    print("  " + anchor.line(0.2, "<="))
    print("  " + heads["SP head"].line() + "   (expect 1.0 +- 0.1)")
    print("  " + heads["LP head"].line() + "   (expect 1.0 +- 0.1)")
    print("  " + per_stage1(out["JPEG round trips"]).line())
    print("  average precision (40k): " + ap.line())
    path = bench.record("stay-positive", anchor, target=0.2, extra={
        "heads/stage 1": per_stage1(out["head retraining (LP+SP)"]), "SP/Base inference": heads["SP head"],
        "LP/Base inference": heads["LP head"], "JPEG/stage 1": per_stage1(out["JPEG round trips"]),
        "average precision ours/scikit-learn": ap}, sizes={"n_train": 1000, "n_test": 200, "epochs": e})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
