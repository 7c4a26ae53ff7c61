"""Unit checks of the diffusion-MIA reproduction: schedule, DDIM, variation API, attacks, metrics, loaders."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

from companion.papers import diffusion_mia as dm
from companion.papers.diffusion_mia import attacks as atk
from companion.papers.diffusion_mia.ddpm import Diffusion, ddim_move, make_schedule, train_ddpm
from companion.params import ParamError
from hf_tiny import run_paper_smoke

D = Diffusion(1000, 1e-4, 0.02)


def oracle(x0: torch.Tensor, bias: float = 0.0, sigma: float = 0.0, gen: torch.Generator | None = None):
    """An epsilon-function that knows x0: the exact noise of x_t (plus a constant bias and noise of sd sigma)."""

    def eps(x: torch.Tensor, t: int) -> torch.Tensor:
        a = float(D.abar[t])
        out = (x - math.sqrt(a) * x0) / math.sqrt(1 - a) + bias
        if sigma:
            out = out + sigma * torch.randn(x.shape, generator=gen, dtype=x.dtype)
        return out

    return eps


def images(n: int = 16, d: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.rand((n, d), generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2 - 1


def test_schedule_formula_and_diffusers_agree():
    abar = make_schedule(1000, 1e-4, 0.02)
    assert abar.dtype == np.float64
    assert abar[0] == pytest.approx(1 - 1e-4, abs=1e-15)
    assert np.all(np.diff(abar) < 0) and np.all((abar > 0) & (abar < 1))
    assert np.max(np.abs(D.abar - abar)) < 1e-6  # diffusers accumulates in float32


def test_q_sample_formula_and_noise_scale():
    x, eps = images(), images(seed=1)
    t = 300
    a = make_schedule(1000, 1e-4, 0.02)[t]
    assert torch.allclose(D.q_sample(x, t, eps), math.sqrt(a) * x + math.sqrt(1 - a) * eps, atol=1e-6)
    x0 = torch.zeros((20000, 4), dtype=torch.float64) + 0.5
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    resid = D.q_sample(x0, t, noise) - math.sqrt(D.abar[t]) * x0
    assert float(resid.std()) == pytest.approx(math.sqrt(1 - D.abar[t]), rel=0.05)


@pytest.mark.parametrize("t,k", [(100, 50), (200, 100), (50, 50), (100, 10), (300, 20)])
def test_ddim_denoise_recovers_x0_under_an_oracle(t, k):
    x0 = images()
    x_t = D.q_sample(x0, t, images(seed=3))
    assert torch.allclose(D.ddim_denoise(oracle(x0), x_t, t, k), x0, atol=1e-5)


def test_ddim_one_step_formula_and_stride_errors():
    x0, eps_true = images(), images(seed=4)
    net = oracle(x0, bias=0.3)
    x_t = D.q_sample(x0, 100, eps_true)
    one = D.ddim_denoise(net, x_t, 100, 100)
    a = D.abar[100]
    assert torch.allclose(one, (x_t - math.sqrt(1 - a) * net(x_t, 100)) / math.sqrt(a), atol=1e-6)
    with pytest.raises(ValueError, match="must divide"):
        D.ddim_denoise(net, x_t, 100, 30)
    with pytest.raises(ValueError, match="must divide"):
        atk.variation_api(net, D, 90, 45, torch.Generator())  # 45 does not divide T = 1000


def diffusers_denoise(sched, eps_fn, x: torch.Tensor, t: int, k: int) -> torch.Tensor:
    """The DDIM loop through diffusers' own ``step`` (the reference for :meth:`Diffusion.ddim_denoise`)."""
    for j in range(t, 0, -k):
        out = sched.step(eps_fn(x, j), j, x, eta=0.0)
        x = out.prev_sample if j > k else out.pred_original_sample
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_q_sample_equals_diffusers_add_noise(dtype):
    x, eps = images().to(dtype), images(seed=1).to(dtype)
    t = torch.arange(len(x)) * 60
    assert torch.allclose(D.q_sample(x, t, eps), D.ddpm.add_noise(x, eps, t), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("t,k", [(100, 50), (200, 100), (110, 10)])
def test_diffusers_ddim_step_matches_written_formula(t, k):
    from diffusers import DDIMScheduler

    sched = DDIMScheduler(num_train_timesteps=1000, beta_schedule="linear", beta_start=1e-4, beta_end=0.02,
                          set_alpha_to_one=True, clip_sample=False)
    sched.set_timesteps(1000 // k)
    x, e = images(seed=5), images(seed=6)
    ours = ddim_move(x, e, make_schedule(1000, 1e-4, 0.02)[t], make_schedule(1000, 1e-4, 0.02)[t - k])
    assert torch.allclose(sched.step(e, t, x, eta=0.0).prev_sample, ours, atol=1e-5)
    # a two-step denoise through our Diffusion equals two written-out moves, the last to alpha_bar = 1
    net = lambda z, j: e  # noqa: E731 - a constant noise prediction
    assert torch.allclose(D.ddim_denoise(net, x, t, k), diffusers_denoise(sched, net, x, t, k), atol=1e-6)
    two = D.ddim_denoise(net, x, t, t // 2) if t % 2 == 0 and 1000 % (t // 2) == 0 else None
    if two is not None:
        mid = ddim_move(x, e, D.abar[t], D.abar[t // 2])
        assert torch.allclose(two, ddim_move(mid, e, D.abar[t // 2], 1.0), atol=1e-6)


def test_baselines_vanish_under_exact_oracles():
    x0 = images()
    g = torch.Generator().manual_seed(0)
    assert np.abs(atk.attack_loss(oracle(x0), D, x0, 200, 3, g)).max() < 1e-8
    assert np.abs(atk.attack_pia(oracle(x0), D, x0, 200)).max() < 1e-8
    assert np.abs(atk.attack_secmi(oracle(x0), D, x0, 100, 10)).max() < 1e-8
    assert np.abs(atk.attack_secmi_official(oracle(x0), D, x0, 200)).max() < 1e-8
    # a biased network is caught by every baseline
    assert np.abs(atk.attack_loss(oracle(x0, 0.2), D, x0, 200, 1, g)).min() > 0.1
    assert np.abs(atk.attack_secmi(oracle(x0, 0.2, 0.1, g), D, x0, 100, 10)).min() > 1e-6


def official_secmi_by_hand(eps_fn, x: torch.Tensor, interval: int) -> torch.Tensor:
    """The official SecMIAttacker with attack_num = 1, written out in its own variables (y = x / sqrt(abar),
    p = sqrt(1 / abar - 1)) in float64 from the linear betas: entry 0 of its denoised list minus the image."""
    abar = make_schedule(1000, 1e-4, 0.02)
    y = lambda z, s: z / math.sqrt(abar[s])  # noqa: E731
    p = lambda s: math.sqrt(1 / abar[s] - 1)  # noqa: E731
    x_next = (eps_fn(x, 0) * (p(interval) - p(0)) + y(x, 0)) * math.sqrt(abar[interval])
    x_back = (eps_fn(x_next, interval) * (p(0) - p(interval)) + y(x_next, interval)) * math.sqrt(abar[0])
    return x_back - x


def test_official_secmi_is_one_inversion_and_one_denoising_step():
    x = images(12)
    g = torch.Generator().manual_seed(7)
    w = torch.randn((64, 64), generator=g, dtype=torch.float64) / 8
    net = lambda z, t: torch.tanh(z @ w) * (1 + t / 500)  # noqa: E731 - a small deterministic network
    counter = atk.CountingEps(net)
    err = atk.secmi_official_error(counter, D, x, 200)
    assert counter.rows == 2 * len(x)  # two network evaluations per image, whatever the ReDiffuse stride
    assert torch.allclose(err, official_secmi_by_hand(net, x, 200), atol=1e-5)
    np.testing.assert_allclose(atk.attack_secmi_official(net, D, x, 200), -(err**2).sum(dim=1).numpy(), rtol=1e-12)
    # a noise prediction that does not depend on its input makes the round trip exact: the map is 0
    const = images(12, seed=8)
    assert torch.allclose(atk.secmi_official_error(lambda z, t: const, D, x, 200), torch.zeros_like(x), atol=1e-6)
    # one step of size 1 barely moves the image (alpha_bar_1 ~ alpha_bar_0), a step of 200 does
    small = float(atk.secmi_official_error(net, D, x, 1).abs().max())
    assert small < 1e-2 < float(err.abs().max())
    # it is not SecMI-stat at (200, 100): that inverts 0 -> 100 -> 200 -> 300 and compares at t = 200
    x_hat, x_t = atk.secmi_pair(net, D, x, 200, 100)
    assert not torch.allclose(x_hat - x_t, err, atol=1e-3)
    with pytest.raises(ValueError, match="interval"):
        atk.secmi_official_error(net, D, x, 1000)


def test_variation_api_oracle_bias_and_variance():
    x = images(8)
    n = 16
    exact = atk.variation_api(oracle(x.repeat(n, 1)), D, 100, 50, torch.Generator().manual_seed(0))
    outs = atk.query_variations(exact, x, n)
    assert torch.allclose(outs.mean(0), x, atol=1e-5) and torch.allclose(outs[0], x, atol=1e-5)
    # one DDIM step with eps = true noise + c + sigma z: V = x - r (c + sigma z), r = sqrt(1-a)/sqrt(a)
    c, sigma, t = 0.05, 0.5, 100
    r = math.sqrt(1 - D.abar[t]) / math.sqrt(D.abar[t])
    reps = 400
    means = {}
    for m in (1, 16):
        g = torch.Generator().manual_seed(m)
        api = atk.variation_api(oracle(x.repeat(reps * m, 1), c, sigma, g), D, t, t, g)
        means[m] = atk.query_variations(api, x.repeat(reps, 1), m).mean(0)
    xr = x.repeat(reps, 1)
    var1, var16 = (float((means[m] - xr + r * c).var()) for m in (1, 16))
    assert var1 / var16 == pytest.approx(16, rel=0.3)
    assert var1 == pytest.approx(r**2 * sigma**2, rel=0.1)
    bias = float((means[16] - xr).mean())
    assert bias == pytest.approx(-r * c, rel=0.1)


class Guarded(torch.nn.Module):
    """A network whose attributes (weights, parameters) raise; only calls through a closure work."""

    def __init__(self, x0: torch.Tensor) -> None:
        super().__init__()
        self._eps = oracle(x0)

    def __getattr__(self, name):
        if name == "_eps":
            return super().__getattr__(name)
        raise RuntimeError(f"the black-box attack touched the network ({name})")


def test_rediffuse_sees_only_the_api():
    x = images(6)
    net = Guarded(x.repeat(4, 1))
    api = atk.variation_api(lambda z, t: net._eps(z, t), D, 100, 50, torch.Generator().manual_seed(0))
    scores = atk.attack_rediffuse(api, x, 4)
    assert np.abs(scores).max() < 1e-4  # an exact model returns each input
    with pytest.raises(RuntimeError, match="touched the network"):
        net.parameters_of_unet  # noqa: B018 - the guard itself works
    with pytest.raises(TypeError):
        atk.attack_rediffuse(api, x, 4, "l2", net)  # no slot for a model


def test_average_of_outputs_vs_distances_and_nesting():
    x = images(5)
    outs = torch.stack([x + 0.1 * images(5, seed=s) for s in range(10)])
    rd = atk.rediffuse_scores(x, outs, (1, 10))
    ad = atk.avg_distance_scores(x, outs, (1, 10))
    np.testing.assert_allclose(rd[1], ad[1])  # n = 1: the same thing
    assert np.all(rd[10] > ad[10])  # the mean output is closer than the mean distance (triangle inequality)
    np.testing.assert_allclose(rd[10], -atk.distance(x, outs.mean(0)))


def test_mia_metrics_against_sklearn_and_edge_cases():
    assert atk.mia_metrics(np.array([2.0, 3.0, 4.0]), np.array([-1.0, 0.0, 1.0])) == (1.0, 1.0, 1.0)
    rng = np.random.default_rng(0)
    auc, asr, _ = atk.mia_metrics(rng.normal(size=10000), rng.normal(size=10000))
    assert auc == pytest.approx(0.5, abs=0.05) and asr >= 0.5
    for seed in range(5):  # ties, discrete scores, a flipped sign
        r = np.random.default_rng(seed)
        sm, sn = r.integers(0, 4, 60).astype(float), r.integers(0, 4, 50).astype(float) - seed % 2
        auc, asr, tpr1 = atk.mia_metrics(sm, sn)
        assert auc == pytest.approx(roc_auc_score(np.r_[np.ones(60), np.zeros(50)], np.r_[sm, sn]), abs=1e-12)
        assert asr >= 0.5 and 0 <= tpr1 <= 1
    members = np.full(100, 0.5)
    one_fp = np.r_[1.0, np.zeros(99)]
    two_fp = np.r_[1.0, 0.9, np.zeros(98)]
    assert atk.mia_metrics(members, one_fp)[2] == 1.0  # one false positive in 100 is FPR 0.01
    assert atk.mia_metrics(members, two_fp)[2] == 0.0


def test_asr_is_exact_at_a_bar():
    """13 of 20 members and 13 of 20 non-members on the right side is balanced accuracy 0.65 exactly, which the
    rate formula 1 - (fpr + 1 - tpr) / 2 puts a hair below (0.6499999999999999) and a >= 0.65 bar would fail."""
    members = np.r_[np.ones(13), np.zeros(7)]
    non_members = np.r_[np.ones(7), np.zeros(13)]
    assert atk.mia_metrics(members, non_members)[1] == 0.65
    brute = max((np.sum(members >= c) / 20 + np.sum(non_members < c) / 20) / 2 for c in (0.0, 1.0, 2.0))
    assert brute == pytest.approx(0.65, abs=1e-12)


def test_split_and_training_are_seeded():
    m1, n1, i1 = dm.digits_split(100, np.random.default_rng(3))
    m2, n2, i2 = dm.digits_split(100, np.random.default_rng(3))
    assert len(set(i1[:100]) & set(i1[100:])) == 0 and np.array_equal(i1, i2)
    assert torch.equal(m1, m2) and torch.equal(n1, n2)
    assert float(m1.min()) == -1.0 and float(m1.max()) == 1.0
    a, _ = train_ddpm(m1, D, hidden=64, blocks=1, steps=30, batch=32, lr=1e-3, seed=5)
    b, _ = train_ddpm(m1, D, hidden=64, blocks=1, steps=30, batch=32, lr=1e-3, seed=5)
    c, _ = train_ddpm(m1, D, hidden=64, blocks=1, steps=30, batch=32, lr=1e-3, seed=6)
    for p, q, r in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    assert any(not torch.allclose(p, r) for p, r in zip(a.parameters(), c.parameters()))


def memoriser(members: torch.Tensor):
    """An epsilon-function that has memorised ``members``: it denoises x_t towards the nearest member."""

    def eps(x: torch.Tensor, t: int) -> torch.Tensor:
        a = float(D.abar[t])
        near = members[torch.cdist(x, math.sqrt(a) * members).argmin(dim=1)]
        return (x - math.sqrt(a) * near) / math.sqrt(1 - a)

    return eps


def suite_results(seeds=(0, 1), n: int = 20) -> dm.Results:
    """Results of :func:`attack_suite` on a perfect memoriser of random 16-pixel members, two seeds."""
    p = dm.Params.resolve("quick", seeds=len(seeds))
    rows, costs = [], {}
    for s in seeds:
        x = images(2 * n, 16, seed=s)
        out = dm.attack_suite(memoriser(x[:n]), D, x[:n], x[n:], p, torch.Generator().manual_seed(s), "main", s)
        rows += out["rows"]
        costs[s] = out["cost"]
    cost = pd.DataFrame([{"seed": s, "attack": a, **v} for s, c in costs.items() for a, v in c.items()])
    return dm.Results(p, pd.DataFrame(rows), cost, pd.DataFrame(), {}, {})


def test_attack_suite_rows_costs_and_a_perfect_memoriser():
    r = suite_results()
    p, t = r.params, r.table
    cost = r.cost.query("seed == 0").set_index("attack")["evals_per_image"]
    nmax = max(p.n_queries)
    assert cost[f"ReDiffuse t{p.attack_t} n{nmax}"] == nmax * p.attack_t / p.attack_k
    # SecMI-stat: t/k inversion steps, one more, one back; the official SecMI: one step there, one back
    assert cost["SecMI"] == p.secmi_t / p.secmi_k + 2 and cost["SecMI-official"] == 2
    assert cost["Loss-avg"] == p.loss_avg_draws and cost["PIA"] == 2 and cost["Loss"] == 1
    for attack in ("Loss-official", "PIA-official", "PIAN-official", "SecMI-official", "Loss-avg-official",
                   "NN-Loss-official", "NN-PIA-official", "NN-PIAN-official", "NN-SecMI-official"):
        assert set(t.query("attack == @attack")["t"]) == {p.official_t}
    assert set(t.query("attack == 'NN-SecMI'")["t"]) == {p.secmi_t}
    nn_rd = t.query("attack == 'NN-ReDiffuse'")
    assert set(zip(nn_rd["t"], nn_rd["n"])) == {(tt, n) for tt in (p.attack_t, p.official_t) for n in (1, 10)}
    assert len(t.query("attack == 'NN-AvgDist'")) == 2 * 2  # two points, two seeds
    x = images(40, 16)  # the ablation model's suite skips the NN fits (no claim reads them there)
    side = dm.attack_suite(memoriser(x[:20]), D, x[:20], x[20:], p, torch.Generator().manual_seed(0), "ablation", 0)
    assert not any(r["attack"].startswith("NN-") for r in side["rows"]) and side["rows"]
    rd = t.query("attack == 'ReDiffuse' and t == @p.attack_t")
    assert sorted(rd["n"].unique()) == sorted(p.n_queries)
    # a model that reproduces its members exactly gives them distance 0: ReDiffuse and AvgDist separate perfectly
    assert (rd["auc"] == 1.0).all()
    assert (t.query("attack == 'AvgDist' and t == @p.attack_t")["auc"] == 1.0).all()
    # the same scores against shuffled labels lose the signal
    assert t.query("attack == 'ReDiffuse-shuffled'")["auc"].max() < 0.8


def test_claim_values_pivot_matches_the_rows():
    r = suite_results()
    p, t = r.params, r.table
    auc = {(a, tt, n, s): v for a, tt, n, s, v in zip(t["attack"], t["t"], t["n"], t["seed"], t["auc"])}
    asr = {(a, tt, n, s): v for a, tt, n, s, v in zip(t["attack"], t["t"], t["n"], t["seed"], t["asr"])}
    at, ot = p.attack_t, p.official_t
    v = dm.claim_values(r)
    for s in (0, 1):
        rd10, rd1, avg10 = auc["ReDiffuse", at, 10, s], auc["ReDiffuse", at, 1, s], auc["AvgDist", at, 10, s]
        assert v["averaging-gain"][s] == pytest.approx(rd10 - rd1)
        assert v["averaging-gain@avg-distances"][s] == pytest.approx(avg10 - rd1)
        assert v["rd-vs-pia@n1"][s] == pytest.approx(rd1 - auc["PIA", p.pia_t, 1, s])
        assert v["rd-vs-secmi"][s] == pytest.approx(rd10 - auc["SecMI", p.secmi_t, 1, s])
        assert v["rd-vs-secmi-official"][s] == pytest.approx(auc["ReDiffuse", ot, 10, s] - auc["SecMI-official", ot, 1, s])
        assert v["rd-vs-loss-nn@avg-distances"][s] == pytest.approx(
            auc["NN-AvgDist", ot, 10, s] - auc["NN-Loss-official", ot, 1, s])
        assert v["rd-vs-secmi-stat-nn@n1"][s] == pytest.approx(
            auc["NN-ReDiffuse", at, 1, s] - auc["NN-SecMI", p.secmi_t, 1, s])
        assert v["outputs-vs-distances@shuffled-labels"][s] == pytest.approx(
            auc["ReDiffuse-shuffled", at, 20, s] - auc["AvgDist-shuffled", at, 20, s])
    assert v["averaging-gain-every"] == v["averaging-gain"]
    verdicts = {x.id: x for x in dm.check(r)}  # every claim and control key is present
    assert verdicts["averaging-gain-every"].value == min(v["averaging-gain"])
    asr_n1 = {c.name: c for c in verdicts["blackbox-asr-every"].controls}["n1"]
    assert asr_n1.value == min(asr["ReDiffuse", at, 1, s] for s in (0, 1)) and len(asr_n1.per_seed) == 2


def test_nn_scorer_split_and_separation():
    from companion.papers.diffusion_mia import nn_scorer

    tr, te = nn_scorer.train_split(50, 40, 0.2, seed=3)
    assert len(tr) == 10 + 8 and len(te) == 40 + 32 and not set(tr) & set(te)
    assert sorted(np.r_[tr, te]) == list(range(90))
    assert (tr < 50).sum() == 10  # 20 % of each group, members first
    g = torch.Generator().manual_seed(0)
    maps = torch.randn(200, 64, generator=g)
    null_auc = nn_scorer.nn_metrics(maps, 100, seed=0)[0]
    maps[:100, :8] *= 3.0  # members differ in one row of pixels: a pattern a threshold on the norm barely sees
    auc, asr, _ = nn_scorer.nn_metrics(maps, 100, seed=0)
    assert auc > 0.9 and asr > 0.8 and abs(null_auc - 0.5) < 0.15
    assert nn_scorer.as_images(maps).shape == (200, 1, 8, 8)


def test_bad_parameters_are_refused():
    with pytest.raises(ParamError, match="unknown parameter 'n_member'"):
        dm.Params.resolve("quick", n_member=10)
    with pytest.raises(ParamError, match="'hidden'.*not an int"):
        dm.Params.resolve("quick", hidden="wide")
    with pytest.raises(ParamError, match="'train_steps'.*out of range"):
        dm.Params.resolve("quick", train_steps=10)
    with pytest.raises(ParamError, match="'attack_k'"):
        dm.Params.resolve("quick", attack_k=30)
    with pytest.raises(ParamError, match="'n_queries'"):
        dm.Params.resolve("quick", n_queries=[1, 5])
    with pytest.raises(ParamError, match="'sweep_k'"):
        dm.Params.resolve("quick", sweep_t=[50, 100])
    with pytest.raises(ParamError, match="'n_members'"):
        dm.Params.resolve("quick", n_members=1000)
    with pytest.raises(ParamError, match="'model_path'"):
        dm.Params.resolve("paper", model_path="/nonexistent/unet")
    assert dm.Params.resolve("full").ablation_members == 200


def test_cli_bad_parameters_exit_2_before_compute(tmp_path, capsys):
    from companion import cli

    for extra in (["--preset", "paper", "-p", f"model_path={tmp_path / 'none'}"], ["-p", "attack_k=30"],
                  ["-p", "distance=cosine"], ["-p", "nosuch=1"], ["-p", "seeds=two"]):
        assert cli.main(["run", "diffusion-mia", *extra, "--out", str(tmp_path / "run")]) == 2
        assert "parameter" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def tiny_unet_and_cifar(tmp_path_factory):
    from diffusers import UNet2DModel

    root = tmp_path_factory.mktemp("dmia_paper")
    torch.manual_seed(0)
    UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
                down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"),
                norm_num_groups=4).save_pretrained(root / "unet")
    batches = root / "cifar10" / "cifar-10-batches-py"
    batches.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(1, 6):
        with open(batches / f"data_batch_{i}", "wb") as fh:
            pickle.dump({b"data": rng.integers(0, 256, (8, 3072), dtype=np.uint8), b"labels": [0] * 8}, fh)
    np.savez(root / "cifar10" / "CIFAR10_train_ratio0.5.npz", mia_train_idxs=np.arange(20),
             mia_eval_idxs=np.arange(20, 40))
    return root


def test_paper_loaders(tiny_unet_and_cifar):
    from companion.papers.diffusion_mia import paper_preset

    root = tiny_unet_and_cifar
    images_ = paper_preset.cifar_train_images(str(root / "cifar10"))
    assert images_.shape == (40, 3, 32, 32) and images_.min() >= -1 and images_.max() <= 1
    mem, non = paper_preset.sample_members(str(root / "cifar10"), 5, np.random.default_rng(0))
    assert mem.shape == (5, 3, 32, 32) and non.shape == (5, 3, 32, 32)
    pool_m = torch.from_numpy(images_[:20]).reshape(20, -1)
    assert all((pool_m == m.reshape(1, -1)).all(1).any() for m in mem)  # members come from mia_train_idxs
    eps, n_params = paper_preset.load_unet_eps(str(root / "unet"), torch.device("cpu"), batch=3)
    out = eps(mem, 10)
    assert out.shape == mem.shape and n_params > 0 and torch.isfinite(out).all()


@pytest.mark.slow
def test_paper_preset_smoke_via_cli(tiny_unet_and_cifar):
    root = tiny_unet_and_cifar
    record = run_paper_smoke("diffusion-mia", root / "run", model_path=root / "unet", data_path=root / "cifar10")
    assert record["status"] == "ok" and record["params"]["preset"] == "paper"
    assert record["metrics"]["evals_per_image"]["SecMI"] == 12.0
