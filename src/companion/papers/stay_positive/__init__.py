"""Stay-Positive: A Case for Ignoring Real Image Features in Fake Image Detection.

Anirudh Sundara Rajan and Yong Jae Lee, ICML 2025, https://arxiv.org/abs/2502.07778.

A fake-image detector ends in ``sigmoid(w^T z + b)`` with post-ReLU features ``z >= 0`` and
label 1 = fake. A negative weight ``w_i`` makes pattern ``i`` evidence for *real*. Stay-Positive
freezes the trained backbone, zero-initializes the last layer and retrains it with the weights
projected onto ``w >= 0`` after every optimizer step (the bias stays free), so only fake evidence
can move the score.

Reproduced at small scale, on CPU, with photos bundled in scikit-learn / scikit-image: reals are
JPEG-compressed patches, fakes are the same patches through a 2x "decoder" (nearest or transposed
conv), so both a real artifact (JPEG) and a fake artifact (upsampling) predict the label during
training. At test time fakes are JPEG-compressed, and reals are partially inpainted. We compare
the stage-1 detector (Base), its retrained unconstrained head (LP) and Stay-Positive (SP). Each seed
also runs a control world without the premise: the same fakes, reals never JPEG-compressed, its own
backbone and heads; every finding is measured in both worlds. A third world instantiates the premise
with a trace built for it: reals carry a fixed faint "camera" pattern that leaves the decoder's
fingerprint intact, and the test adds it to the fakes (its control: the no-JPEG world, whose reals carry
no trace).

Written by hand because no maintained library does them: the synthetic real/fake world
(:mod:`companion.papers.stay_positive.photo_patches`), the small high-pass CNN detector, the head retraining with
the non-negativity projection, and average precision / recall at a fixed-FPR threshold (checked
against scikit-learn in the tests). JPEG is Pillow; networks and optimizers are PyTorch.

This module holds the declarations; the experiment (:mod:`.experiment`), the figures (:mod:`.plots`),
the synthetic data (:mod:`.photo_patches`) and the real setting (:mod:`.paper_preset`) load on first use.

The ``paper`` preset runs the real setting instead (:mod:`.paper_preset`): a local detector
checkpoint in the official layout (ResNet-50 "res50nodown", e.g. Corvi et al.'s or the authors'),
frozen, and local real/fake image folders; Base, LP and SP heads under the same test conditions.
"""

from __future__ import annotations

from dataclasses import dataclass

from companion.claims import Claim
from companion.contract import exports
from companion.params import BaseParams, ParamError, local_default, param, require_path

REAL, FAKE = 0, 1  # Stay-Positive needs class 1 = fake; with real = 1 the clamp keeps real evidence
HEADS = ("base", "lp", "sp")
HEAD_NAMES = {"base": "Base", "lp": "LP (retrained)", "sp": "SP (Stay-Positive)"}
CLAIM_Q, BOTH_Q = 75, 85
NO_JPEG = "no-jpeg"  # the control world: the same fakes, reals without the JPEG trace (and without the camera's)
TRACE = "trace"  # the camera-trace world: the same fakes, reals with the camera trace and no JPEG
TRACE_FAKE = "trace_fake"  # the test fakes with the camera trace added
PARTS_SETS = ("real_test", "clean", f"jpeg{CLAIM_Q}", TRACE_FAKE)  # where the logit is split into its signed parts
SLUG = "stay-positive"
N_VAL, BATCH, LR_STAGE1, HEAD_BATCH = 400, 64, 1e-3, 256


@dataclass(frozen=True)
class Params(BaseParams):
    """Synthetic real/fake world and small CNN (quick, full); paper: a local res50nodown detector on local images."""

    seeds: int = param(4, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    patch: int = param(32, lo=16, hi=512, help="patch side in pixels (multiple of 8); paper: centre-crop side")
    n_train: int = param(2000, lo=500, hi=20000, help="aligned real/fake training pairs (paper: most images per train folder)")
    n_test: int = param(300, lo=200, hi=5000, help="patches per test set (paper: most images per test folder)")
    jpeg_q_train: tuple[int, ...] = param((65, 95), lo=30, hi=100, min_len=2,
                                          help="(lowest, highest) JPEG quality of training reals")
    jpeg_q_test: tuple[int, ...] = param((95, 85, 75), lo=30, hi=100,
                                         help="JPEG qualities applied to test fakes")
    trace_sd: float = param(10.0, lo=0.0, hi=64.0,
                            help="s.d. of the camera trace on the trace world's reals, in 8-bit levels")
    generator: str = param("nearest", choices=("nearest", "tconv"), help="the fake decoder")
    tconv_eps: float = param(0.5, lo=0.0, hi=1.0, help="fingerprint strength of the tconv decoder")
    highpass: bool = param(True, help="fixed high-pass filter in front of the CNN")
    width: int = param(8, lo=4, hi=32, help="CNN width w (features: 4w)")
    epochs: int = param(4, lo=1, hi=30, help="stage-1 epochs")
    head_steps: int = param(400, lo=100, hi=5000, help="stage-2 optimizer steps")
    head_lr: float = param(1e-2, lo=1e-4, hi=5e-2, help="stage-2 Adam learning rate")
    target_fpr: float = param(0.05, lo=0.01, hi=0.2, help="FPR on validation reals fixing tau")
    inpaint_sizes: tuple[int, ...] = param((16, 8), lo=2, hi=510, help="side of the inpainted square")
    ablations: bool = param(False, help="also run the tconv and no-high-pass variants")
    model_path: str = param(local_default(SLUG, "detector.pth"),
                            help="paper preset: detector checkpoint (res50nodown, official key layout)")
    data_path: str = param(local_default(SLUG, "images"),
                           help="paper preset: folder train/{real,fake}, [val/real], test/real, test/<generator>")
    smoke: bool = param(False, help="paper preset on a tiny budget (a few images, 64-px crops; < 2 min CPU)")

    PRESETS = {
        # The spec's 5 seeds and quick's 2000 pairs: 10 seeds and 3000 pairs, each seed training two worlds,
        # took 1356 s on 2 cores (changed for time, after reading that record's verdicts; the page says so).
        # 4 seeds since the trace world (issue 56): a third backbone per seed adds ~73 CPU s at full to each
        # seed's ~150 (the 5-seed record: 959 CPU s, 494 s wall), and five three-world seeds on two workers take
        # three rounds, about 650 s; four take two. Decided from that cost, before any full run of the trace world.
        "full": {"seeds": 4, "n_train": 2000, "n_test": 1000,
                 "jpeg_q_test": (95, 90, 85, 80, 75, 65, 50), "width": 16, "epochs": 8,
                 "head_steps": 800, "inpaint_sizes": (24, 16, 8), "ablations": True},
        # the real detector on local images: n_train/n_test cap the images per folder
        "paper": {"seeds": 5, "patch": 256, "n_train": 20000, "n_test": 5000,
                  "jpeg_q_test": (95, 90, 85, 80, 75, 65, 50), "head_steps": 5000, "head_lr": 1e-4,
                  "inpaint_sizes": (128, 64)},
    }

    def __post_init__(self) -> None:
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a detector checkpoint file (res50nodown state dict, "
                         "e.g. Corvi et al.'s or the authors' weights.pth)", "file")
            require_path("data_path", self.data_path, "an image folder with train/real, train/fake, test/real "
                         "and test/<generator> subfolders", "dir")
        if self.patch % 8:
            raise ParamError(f"parameter 'patch': {self.patch} is not a multiple of 8")
        lo_hi = self.jpeg_q_train
        if len(lo_hi) != 2 or lo_hi[0] > lo_hi[1]:
            raise ParamError(f"parameter 'jpeg_q_train': {lo_hi!r} must be (lowest, highest)")
        bad = [s for s in self.inpaint_sizes if s % 2 or s >= self.patch]
        if bad:
            raise ParamError(f"parameter 'inpaint_sizes': {bad[0]} must be even and < patch")


# ----------------------------------------------------------------------------- claims

CLAIMS = [
    Claim("jpeg75-recall",
          "At a threshold fixed on validation reals (5% FPR), SP recalls more JPEG-75 fakes than Base "
          "(mean per-seed gain in TPR); controls: LP - Base (the constraint removed), and SP - Base in the "
          "no-JPEG world (the premise removed: reals carry no JPEG trace)",
          "qualitative: Corvi+/Rajan+ more robust to compression (Sec. 4; tables not quoted here)",
          0.05, controls=("lp", NO_JPEG)),
    Claim("jpeg75-recall-every",
          "SP recalls at least as many JPEG-75 fakes as Base in every seed (the smallest per-seed gain "
          "in TPR; the spec's second condition of claim 2); control: the same in the no-JPEG world",
          "qualitative: Corvi+/Rajan+ more robust to compression (Sec. 4; tables not quoted here)",
          0.0, kind="every", controls=(NO_JPEG,)),
    Claim("clean-ap-cost",
          "SP costs at most 0.02 AP on clean fakes vs Base (AP_SP - AP_Base, mean over seeds); a check: "
          "non-inferiority at the AP ceiling, which Base and LP pass trivially",
          "qualitative: + detectors keep in-distribution AP (tables not quoted here)", -0.02, role="check"),
    Claim("clean-ap-cost-every",
          "SP costs at most 0.02 AP on clean fakes vs Base in every seed (the smallest per-seed "
          "AP_SP - AP_Base; the spec's form of this check); a check, as above",
          "qualitative: + detectors keep in-distribution AP (tables not quoted here)", -0.02, kind="every",
          role="check"),
    Claim("inpaint16-ap",
          "SP separates reals from 25%-inpainted reals better than Base (gain in AP); controls: LP - Base "
          "(the constraint removed), and SP - Base in the no-JPEG world (the premise removed)",
          "qualitative: better detection of inpainted reals (inpainting figure)", 0.10,
          controls=("lp", NO_JPEG)),
    Claim("base-neg-weights",
          "The Base detector puts negative weight on >= 20% of its features; a check: it cannot fail, "
          "since any unconstrained head (LP, the no-JPEG world's Base) has about half its weights negative",
          "qualitative: real-image features are used as evidence for real (Sec. 3)", 0.20, role="check"),
    Claim("trace-fools-base",
          "The trace world's premise: Base recalls >= 0.2 fewer fakes at tau once the camera trace is added to "
          "them (TPR on clean fakes - TPR on traced fakes, in the world whose reals carry the trace); a check, "
          "since the trace's strength was chosen on seed 0 for it",
          "qualitative: real-image features are used as evidence for real (Sec. 3)", 0.20, role="check"),
    Claim("trace-recall",
          "SP recalls more fakes carrying the camera trace than Base, in the trace world (mean per-seed gain in "
          "TPR at tau); controls: LP - Base (the constraint removed), and SP - Base in the no-JPEG world, whose "
          "reals carry no trace (the premise removed)",
          "qualitative: a detector that ignores real-image features is not fooled when they appear in fakes "
          "(Sec. 3; numbers not quoted here)", 0.05, controls=("lp", NO_JPEG)),
    Claim("constraint-not-retrain",
          "The gain comes from the constraint: SP recalls more JPEG-75 fakes than the "
          "unconstrained retrained head LP (mean per-seed gain in TPR); control: the same in the "
          "no-JPEG world",
          "the paper's ablation (retraining without the constraint); not quoted here", 0.05,
          controls=(NO_JPEG,)),
]

EVERY_SEED = {"jpeg75-recall-every": "jpeg75-recall", "clean-ap-cost-every": "clean-ap-cost"}
CLAIM_WORLD = {"trace-fools-base": TRACE, "trace-recall": TRACE}  # judged in that world; the rest in the JPEG world

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "claim_values", "Results", "summary_table", "parts_table", "generator_table",
                   "seed_table", "head_means", "parts_means", "ablation_table"),
    "plots": ("plot_examples", "plot_recall_vs_quality", "plot_logit_parts", "plot_inpainting"),
})
