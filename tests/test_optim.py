import dataclasses
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from companion import fingerprint, numerics
from companion.models import ieee, optim


def _trained(optimizer: type[torch.optim.Optimizer], steps: int = 5) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    opt = optimizer(model.parameters(), lr=1e-2, weight_decay=1e-3)
    x, y = torch.randn(64, 16, generator=torch.Generator().manual_seed(1)), torch.arange(64) % 4
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().ravel() for p in model.parameters()])


@pytest.mark.parametrize("ours, theirs", [(optim.Adam, torch.optim.Adam), (optim.AdamW, torch.optim.AdamW)])
def test_the_fused_optimizers_are_torchs_own_algorithm(ours, theirs):
    """Same updates as torch's default (foreach) kernel to float rounding, through the fused kernel."""
    assert ours(torch.nn.Linear(2, 2).parameters(), lr=1e-3).defaults["fused"] is True
    torch.testing.assert_close(_trained(ours), _trained(theirs), rtol=1e-5, atol=1e-6)
    assert not torch.equal(_trained(theirs), _trained(theirs, steps=4))


def test_the_audit_counts_the_vendor_dependent_kernels_forward_and_backward():
    x = torch.rand(50, requires_grad=True) + 0.1
    with fingerprint.vendor_dependent_calls() as seen:
        (torch.sqrt(x).sum() + x.pow(0.5).sum() + x.pow(2).sum() + torch.atan(x).sum()).backward()
    assert seen["aten.sqrt.default"] >= 1 and seen["aten.pow.Tensor_Scalar"] == 1 and seen["aten.atan.default"] == 1
    with fingerprint.vendor_dependent_calls() as seen:
        _trained(torch.optim.Adam)
    assert sum(seen.values()) > 0, "torch's default Adam takes its square roots through MKL's vsSqrt"
    with fingerprint.vendor_dependent_calls() as seen:
        _trained(optim.Adam)
        _trained(optim.AdamW)
    assert not seen


def test_fr_geometry_ood_dcc_and_suitability_filter_train_without_a_vendor_dependent_kernel():
    from companion.papers import ood_dcc, suitability_filter
    from companion.papers.fr_geometry import embedder, faces
    from companion.papers.ood_dcc import experiment as ood
    from companion.papers.suitability_filter import experiment as suitability

    rng = np.random.default_rng(0)
    ids = faces.sample_identities(16, rng)
    cfg = embedder.TrainConfig(2, 1e-3, 14, 2, 0.2, faces.BASE_RANGES, 16)  # 28 rows: cdist's matrix-product path
    with fingerprint.vendor_dependent_calls() as seen:
        embedder.train(embedder.FaceCNN(8, 16), ids, cfg, rng)
        ood.digits_bank(dataclasses.replace(ood_dcc.Params(), epochs=10), 0)
        suitability.train_model(dataclasses.replace(suitability_filter.Params(), n_train=500, epochs=1),
                                np.random.default_rng(0), torch.Generator().manual_seed(0))
    assert not seen, dict(seen)


def test_ieee_sqrt_is_the_square_root_without_a_vendor_dependent_kernel():
    t = torch.cat([torch.rand(10_000, dtype=torch.float64) * 1e3, torch.tensor([0.0, 1.0, 4.0, float("inf")])])
    for x in (t, t.float()):
        with fingerprint.vendor_dependent_calls() as seen:
            root = ieee.sqrt(x)
            assert torch.equal(ieee.power(x, 0.5), root) and torch.equal(ieee.power(x, 2.0), x**2)
        assert not seen
        torch.testing.assert_close(root, torch.sqrt(x), rtol=2 * torch.finfo(x.dtype).eps, atol=0)
        assert root[-4:].tolist() == [0.0, 1.0, 2.0, float("inf")]
    assert torch.isnan(ieee.sqrt(torch.tensor([-1.0]))).all()
    x = (torch.rand(20, dtype=torch.float64) + 0.1).requires_grad_(True)
    assert torch.autograd.gradcheck(ieee.sqrt, (x,))


def test_fdiv_losses_diffusion_mia_and_flat_influence_compute_without_a_vendor_dependent_kernel():
    from companion.papers.diffusion_mia import ddpm
    from companion.papers.fdiv_losses import experiment as fdiv
    from companion.papers.fdiv_losses.fdivergence import get_divergence
    from companion.papers.flat_influence.optimize import adam_descent

    t = torch.rand(64, dtype=torch.float64) + 0.01
    x = torch.rand(32, 8, generator=torch.Generator().manual_seed(0))
    diffusion = ddpm.Diffusion(100)
    with fingerprint.vendor_dependent_calls() as seen:
        for name in ("hellinger", "alpha1.5"):
            div = get_divergence(name)
            div.f(t), div.fprime(t)
        fdiv.train_classifier("hellinger", fdiv.digits_split(0), 16, 1, 1e-3, 0, 10, None)
        model, _ = ddpm.train_ddpm(x, diffusion, hidden=16, blocks=1, steps=3, batch=8, lr=1e-3, seed=0)
        diffusion.ddim_denoise(ddpm.mlp_eps_fn(model), diffusion.q_sample(x, 40, torch.randn_like(x)), 40, 20)
        adam_descent(lambda th: (th**2).sum(), torch.ones(5), 3, 1e-2)
    assert not seen, dict(seen)


TRAIN = """
import json, sys, torch
from companion import numerics; numerics.apply()
from companion import fingerprint
from companion.models import ieee, optim
torch.set_num_threads(2)
def run(cls):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 10))
    opt = cls(m.parameters(), lr=1e-3)
    x, y = fingerprint._t(256, 32), torch.arange(256) % 10
    for _ in range(100):
        opt.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
    return fingerprint.digest(torch.cat([p.detach().ravel() for p in m.parameters()]))
print(json.dumps([run(torch.optim.Adam), run(optim.Adam), fingerprint.digest(ieee.sqrt(fingerprint._t(100_000).abs()))]))
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(fingerprint.QEMU) is None or not numerics.applies(),
                    reason="needs qemu-x86_64 (QEMU 10; Debian: apt-get install -t bookworm-backports qemu-user)")
def test_a_training_gives_the_same_bits_on_an_emulated_amd_cpu_only_with_the_fused_adam():
    """QEMU as an AMD EPYC computes rsqrtps in its own way, as a vendor does: torch's default Adam trains other
    bits there than here, the fused one the same bits; so does ieee.sqrt."""
    here = json.loads(subprocess.run([sys.executable, "-c", TRAIN], capture_output=True, text=True,
                                     check=True).stdout)
    there = json.loads(subprocess.run([fingerprint.QEMU, "-cpu", "EPYC-Rome", sys.executable, "-c", TRAIN],
                                      capture_output=True, text=True, check=True).stdout)
    assert here[0] != there[0]
    assert here[1:] == there[1:], "the fused Adam and ieee.sqrt give the same bits on both vendors"
