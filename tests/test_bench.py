"""companion.bench: interleaved timing, target status of a spread, the JSON record."""

from __future__ import annotations

import json
import shutil

import pytest

from companion import bench


def test_compare_interleaves_and_reports_median_ratio_with_spread(monkeypatch) -> None:
    order: list[str] = []
    ticks = iter(range(1000))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: float(next(ticks)))
    cost = {"a": 1, "ref": 1}

    def make(name):
        def fn():
            order.append(name)
            for _ in range(cost[name] - 1):
                next(ticks)
        return fn

    cost["a"] = 3
    out = bench.compare({"ref": make("ref"), "a": make("a")}, "ref", rounds=4, warmup=1)
    assert order == ["ref", "a"] * 5  # warm-up round, then A B A B ...
    c = out["a"]
    assert (c.ratio, c.ratio_min, c.ratio_max, c.rounds) == (3.0, 3.0, 3.0, 4)
    with pytest.raises(ValueError):
        bench.compare({"a": make("a")}, "ref")


def test_a_spread_that_straddles_the_target_is_no_pass() -> None:
    c = bench.Comparison("ours", "ref", 1.9, 1.7, 2.3, 1.0, 0.5, 9, "cpu", 1)
    assert c.meets(2.0) is None and "range straddles it" in c.line(2.0)
    assert c.meets(2.5) is True and c.line(2.5).endswith("met")
    assert c.meets(1.5) is False and "MISSED" in c.line(1.5)
    assert c.meets(1.5, ">=") is True and c.meets(2.0, ">=") is None


def test_record_writes_anchor_extras_with_targets_values_and_device(tmp_path) -> None:
    a = bench.Comparison("ours", "ref", 0.4, 0.3, 0.6, 1.0, 2.5, 7, "wall", 2)
    b = bench.Comparison("other", "ref", 40.0, 35.0, 45.0, 1.0, 0.025, 7, "wall", 2)
    path = bench.record("jsae", a, target=0.5, extra={"other/ref": b}, targets={"other/ref": (30.0, "<=")},
                        values={"max diff": 1e-7}, sizes={"k": [1, 2]}, device="NVIDIA H200", root=tmp_path)
    data = json.loads(path.read_text())
    assert data["meets_target"] is None and data["anchor"]["ratio_min"] == 0.3
    assert data["extra"]["other/ref"]["meets_target"] is False and data["extra"]["other/ref"]["target"] == 30.0
    assert data["values"] == {"max diff": 1e-7} and data["machine"]["device"] == "NVIDIA H200"
    assert bench.load("jsae", tmp_path) == data


def test_record_carries_the_benchmark_code_key_and_a_code_edit_stales_it(tmp_path, monkeypatch) -> None:
    from companion import keys, registry

    (tmp_path / "benchmarks").mkdir()
    script = tmp_path / "benchmarks" / "bench_jsae.py"
    shutil.copyfile(registry.project_root() / "benchmarks" / "bench_jsae.py", script)
    a = bench.Comparison("ours", "ref", 0.4, 0.3, 0.6, 1.0, 2.5, 7, "wall", 2)
    data = json.loads(bench.record("jsae", a, root=tmp_path).read_text())
    assert data["code_key"] == bench.current_code_key("jsae", tmp_path) and "numerics" in data
    script.write_text(script.read_text() + "\n# a comment\n")
    assert bench.current_code_key("jsae", tmp_path) == data["code_key"]
    script.write_text(script.read_text() + "\nROUNDS_EDITED = 3\n")
    assert bench.current_code_key("jsae", tmp_path) != data["code_key"]
    assert keys.script_key(script) == bench.current_code_key("jsae", tmp_path)
