"""The numerics profile pins the CPU code paths: the same training gives the same bits whatever
kernels the libraries would otherwise choose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from companion import numerics

# A few hundred steps of a paper's model (the tiny GPT-2 of fdiv-losses, jsae and self-ref) with
# the ops that differ between code paths: matrix products (MKL), GELU, softmax, layer norm (ATen).
TRAIN = """
import hashlib, torch
from companion.models.tiny_lm import tiny_gpt2
torch.set_num_threads(1)
model = tiny_gpt2(vocab=48, n_layer=2, n_embd=64, n_head=4, n_positions=32, seed=0)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
x = torch.randint(0, 48, (16, 32), generator=torch.Generator().manual_seed(1))
for _ in range(200):
    opt.zero_grad()
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
print(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())
"""
# Two machines' own choices, as far as one machine can show them: ATen's generic kernels against
# its AVX2 ones, and MKL's plain code path against the one it picks for this CPU.
CHOICES = ({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AUTO"}, {})


def _train(extra: dict[str, str], profile: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k not in numerics.PROFILE}
    env.update(extra)
    if profile:
        numerics.apply(env)
    else:
        env[numerics.OFF_ENV] = "off"
    done = subprocess.run([sys.executable, "-c", TRAIN], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.slow
@pytest.mark.skipif(not numerics.applies(), reason="the profile pins x86-64 code paths")
def test_the_profile_makes_two_code_path_choices_give_the_same_bits():
    free = [_train(choice, profile=False) for choice in CHOICES]
    assert free[0] != free[1], "without the profile the two choices should differ, or the test shows nothing"
    pinned = [_train(choice, profile=True) for choice in CHOICES]
    assert pinned[0] == pinned[1]


def test_a_machine_setting_of_openblas_is_kept_and_the_rest_is_pinned():
    env = {"OPENBLAS_CORETYPE": "Prescott", "MKL_CBWR": "AUTO"}
    chosen = numerics.apply(env) if numerics.applies() else {}
    if numerics.applies():
        assert env["OPENBLAS_CORETYPE"] == "Prescott" and env["MKL_CBWR"] == numerics.PROFILE["MKL_CBWR"]
        assert chosen == {**numerics.PROFILE, "OPENBLAS_CORETYPE": "Prescott"}


def test_switched_off_the_profile_sets_nothing(monkeypatch):
    monkeypatch.setenv(numerics.OFF_ENV, "off")
    env: dict[str, str] = {}
    assert numerics.apply(env) == {} and env == {}


def test_the_runner_records_the_profile_and_it_joins_the_cache_key(monkeypatch):
    from companion import keys

    base = dict(code="c", device="cpu", threads=1, paths={}, versions={})
    assert keys.cache_key(**base, profile=numerics.PROFILE) != keys.cache_key(**base, profile={})


def test_a_moved_verdict_is_named_with_its_stored_margin():
    from tests.nbval_verdicts import explain

    record = {"provenance": {"cpu": "AMD EPYC"}, "claims": [{"id": "gap", "value": 0.247, "interval": [0.11, 0.38], "direction": ">=", "threshold": 0.1},
                         {"id": "other", "value": 1.0, "interval": None, "direction": "<=", "threshold": 2}]}
    lines = explain("fr-geometry", {"gap": "HOLDS", "other": "HOLDS"}, {"gap": "INCONCLUSIVE", "other": "HOLDS"}, record)
    assert lines == ["fr-geometry: gap: stored HOLDS (stored on AMD EPYC: value 0.247 [0.11, 0.38], test >= 0.1), "
                     "here INCONCLUSIVE"]
