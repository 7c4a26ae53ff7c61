import json
import subprocess
import sys

import numpy as np
import pytest

from companion import fingerprint, numerics


def test_digest_reads_the_bits_of_an_array_and_of_a_tensor():
    import torch

    x = np.linspace(0, 1, 7, dtype=np.float32)
    assert fingerprint.digest(x) == fingerprint.digest(torch.from_numpy(x.copy()))
    assert fingerprint.digest(x) != fingerprint.digest(np.nextafter(x, 2, dtype=np.float32))
    assert fingerprint.digest(x) != fingerprint.digest(x.astype(np.float64))


def test_the_probe_inputs_are_fixed_bits():
    assert fingerprint.digest(fingerprint._inputs(3, 4)) == fingerprint.digest(fingerprint._inputs(3, 4))
    assert fingerprint.digest(fingerprint._inputs(3, 4)) != fingerprint.digest(fingerprint._inputs(3, 4, seed=1))


def test_store_keeps_one_entry_per_machine_setting_and_compares_only_like_with_like(tmp_path):
    path = tmp_path / "numerics" / "fingerprints.json"
    entry = {"cpu": "A", "arch": "x86_64", "profile": {"P": "1"}, "threads": 2, "versions": {"torch": "1"},
             "fingerprints": {"mm": "aa", "conv": "bb"}}
    fingerprint.store(entry, path)
    fingerprint.store({**entry, "fingerprints": {"mm": "aa", "conv": "cc"}}, path)
    fingerprint.store({**entry, "cpu": "B"}, path)
    stored = fingerprint.load(path)
    assert [m["cpu"] for m in stored] == ["A", "B"] and stored[0]["fingerprints"]["conv"] == "cc"
    assert fingerprint.differing(entry, stored[0]) == ["conv"] and fingerprint.differing(entry, stored[1]) == []
    assert fingerprint.differing(entry, {**stored[1], "threads": 1}) is None
    text = fingerprint.report(entry, stored)
    assert "A: 1 probes differ: conv" in text and "B: every probe gives the same bits" in text
    assert json.loads(path.read_text())["machines"] == stored


@pytest.mark.skipif(not numerics.applies(), reason="the profile applies on x86-64 only")
def test_the_probes_see_a_changed_code_path():
    """ATen's scalar kernels give other digests than the avx2 ones the profile pins, and a rerun the same:
    the probes tell code paths apart, so a stored match is evidence, not a constant."""
    names = ["softmax 128x1000", "log_softmax 128x1000", "gelu (tanh)"]
    script = ("import json, sys; from companion import fingerprint; probes = fingerprint._torch_probes(); "
              "print(json.dumps([fingerprint.digest(probes[n]()) for n in sys.argv[1:]]))")

    def digests(**env: str) -> list[str]:
        run = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, check=True,
                             env={**numerics.profile_for({}), "PATH": "", **env})
        return json.loads(run.stdout)

    base = digests()
    assert digests() == base
    assert digests(ATEN_CPU_CAPABILITY="default") != base


def test_the_stored_fingerprints_name_their_machine_and_every_probe():
    names = set(fingerprint._torch_probes()) | set(fingerprint._numpy_probes())
    from companion.registry import project_root

    stored = fingerprint.load(project_root() / fingerprint.STORE)
    assert stored, "no machine's fingerprints are stored (companion numerics --store)"
    for m in stored:
        assert set(m["fingerprints"]) == names and m["cpu"] and m["threads"] >= 1


def test_a_candidate_profile_is_checked_before_any_compute_and_named_in_the_report():
    from companion.cli import candidate_profile
    from companion.params import ParamError

    assert candidate_profile(["MKL_CBWR=AVX2"]) == {"MKL_CBWR": "AVX2"}
    for bad in ("MKL_CBWR", "MKL_CBWR=", "MKL_DEBUG_CPU_TYPE=5"):
        with pytest.raises(ParamError, match="allowed: NAME=VALUE with NAME one of ATEN_CPU_CAPABILITY"):
            candidate_profile([bad])
    assert fingerprint.profile_text({}) == "profile off"
    assert fingerprint.profile_text(dict(numerics.PROFILE)) == "profile on"
    assert fingerprint.profile_text({**numerics.PROFILE, "MKL_CBWR": "AVX2"}) == "profile on with MKL_CBWR=AVX2"


def test_emulate_refuses_a_missing_emulator_and_an_unknown_cpu_before_any_compute(monkeypatch, capsys):
    from companion import cli

    monkeypatch.setattr(fingerprint, "machine", lambda *a, **k: pytest.fail("computed before refusing"))
    monkeypatch.setattr(fingerprint, "emulated_models", lambda: [])
    assert cli.main(["numerics", "--emulate", "EPYC-Rome"]) == 2
    assert "--emulate needs qemu-x86_64 on PATH" in capsys.readouterr().err
    monkeypatch.setattr(fingerprint, "emulated_models", lambda: ["Haswell", "EPYC-Rome", "EPYC-Milan"])
    assert cli.main(["numerics", "--emulate", "EPYC-Bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown CPU model 'EPYC-Bogus'" in err and "EPYC-Rome, EPYC-Milan" in err


def test_audit_names_the_vendor_dependent_kernels_a_paper_calls(monkeypatch, capsys):
    import types

    import torch

    from companion import cli

    monkeypatch.setenv("COMPANION_THREADS", "2")

    def paper(run):
        params = types.SimpleNamespace(resolve=lambda preset: preset)
        module = types.SimpleNamespace(Params=params, run=run, check=lambda results: results)
        return types.SimpleNamespace(slug="fake", module=lambda: module)

    assert cli.audit(paper(lambda preset: torch.sqrt(torch.ones(3)) + torch.atan(torch.ones(3)))) == 1
    out = capsys.readouterr().out
    assert "fake (quick): calls kernels" in out and "aten.sqrt.default x1" in out and "aten.atan.default x1" in out
    assert cli.audit(paper(lambda preset: torch.ones(3).pow(2).sum())) == 0
    assert "calls no kernel" in capsys.readouterr().out
    assert cli.main(["numerics", "--audit", "no-such-paper"]) == 2
    assert "unknown paper 'no-such-paper'" in capsys.readouterr().err


def test_claim_numbers_and_their_comparison_cover_every_value_of_a_claim_and_its_controls():
    claims = [{"id": "a", "statement": "s", "value": 0.5, "interval": [0.1, 0.9], "threshold": 0.2, "verdict": "HOLDS",
               "per_seed": [0.4, float("nan")], "controls": [{"name": "c", "value": 0.1, "per_seed": [0.1, 0.2]}]}]
    numbers = fingerprint.claim_numbers(claims)
    assert set(numbers) == {"a.value", "a.interval[0]", "a.interval[1]", "a.per_seed[0]", "a.per_seed[1]",
                            "a.controls[0].value", "a.controls[0].per_seed[0]", "a.controls[0].per_seed[1]"}
    assert fingerprint.unequal(numbers, dict(numbers)) == []
    moved = {**numbers, "a.controls[0].per_seed[1]": np.nextafter(0.2, 1)}
    assert fingerprint.unequal(moved, numbers) == ["a.controls[0].per_seed[1]"]
    assert fingerprint.unequal({k: v for k, v in numbers.items() if k != "a.value"}, numbers) == ["a.value"]


def test_reproduce_needs_an_emulated_cpu(capsys):
    from companion import cli

    assert cli.main(["numerics", "--reproduce", "ood-dcc"]) == 2
    assert "--reproduce needs --emulate CPU" in capsys.readouterr().err
