"""Performance anchor of Stay-Positive: the post-hoc step is cheap next to training the detector.

Times, in one run (median of repeats), and prints ratios only:
- head retraining (LP + SP, quick settings) / one stage-1 epoch, and / the quick preset's 4 epochs;
- feature extraction + head retraining (all of stage 2) / stage 1 at the quick preset;
- inference on 1000 patches with the SP, LP and Base heads (same graph: expect 1.0 +- 0.1);
- Pillow JPEG round trips of the training reals / stage 1 (data pipeline share);
- our average precision / scikit-learn's ``average_precision_score`` on the same scores.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from sklearn.metrics import average_precision_score

from companion import runtime
from companion.runtime import median_time
from companion.papers.stay_positive import photo_patches as pp
from companion.papers import stay_positive as sp

REPEATS = 3




def main() -> None:
    """Build a 1000-pair world at the quick settings once, then time each stage against stage 1."""
    runtime.limit_threads()
    p = sp.Params.resolve("quick", n_train=1000, n_test=200)
    rng, gen = runtime.generators(0)
    sets = sp.make_sets(p, rng)
    real, fake = sets["train_real"], sets["train_fake"]

    model = sp.Detector(p.width, p.highpass)
    epoch = median_time(lambda: sp.train_stage1(model, real, fake, 1, gen), REPEATS)
    sp.freeze_backbone(model)
    feats = {k: sp.extract_features(model, v) for k, v in sets.items()}
    extract = median_time(lambda: [sp.extract_features(model, v) for v in sets.values()], REPEATS)

    def both_heads() -> list[torch.nn.Linear]:
        return [sp.retrain_head(feats["train_real"], feats["train_fake"], c, p.head_steps,
                                p.head_lr, gen) for c in (False, True)]

    heads = median_time(both_heads, REPEATS)
    lp, sph = both_heads()
    x = sp.to_tensor(sets["clean"][:1000] if len(sets["clean"]) >= 1000 else
                     np.concatenate([sets["clean"]] * (1000 // len(sets["clean"]) + 1))[:1000])

    def infer(head: torch.nn.Linear) -> Callable[[], torch.Tensor]:
        m = sp.Detector(p.width, p.highpass)
        m.load_state_dict(model.state_dict())
        m.head = head
        m.eval()
        return lambda: torch.no_grad()(m)(x)

    t_base, t_lp, t_sp = (median_time(infer(h), 5) for h in (model.head, lp, sph))
    q = np.random.default_rng(1).integers(65, 96, len(real))
    jpeg = median_time(lambda: pp.jpeg_batch(pp.q8(real), q), REPEATS)

    rs = np.random.default_rng(2)
    neg, pos = rs.normal(size=20000), rs.normal(0.5, 1.0, size=20000)
    labels, scores = np.r_[np.zeros(20000), np.ones(20000)], np.r_[neg, pos]
    ours = median_time(lambda: sp.average_precision(neg, pos), 7)
    ref = median_time(lambda: average_precision_score(labels, scores), 7)

    stage1 = p.epochs * epoch
    print(f"head retraining (LP+SP) / one stage-1 epoch     : {heads / epoch:.3f}")
    print(f"head retraining (LP+SP) / stage 1 ({p.epochs} epochs)     : {heads / stage1:.3f}")
    print(f"stage 2 (features + heads) / stage 1 ({p.epochs} epochs)  : "
          f"{(extract + heads) / stage1:.3f}   (spec: < 0.2)")
    print(f"inference SP / Base, LP / Base (1000 patches)   : {t_sp / t_base:.2f}, {t_lp / t_base:.2f}"
          "   (expect 1.0 +- 0.1)")
    print(f"JPEG round trips of training reals / stage 1    : {jpeg / stage1:.3f}")
    print(f"average precision: ours / scikit-learn (40k)    : {ours / ref:.2f}")


if __name__ == "__main__":
    main()
