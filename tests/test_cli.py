"""The companion command: exit codes, one-line refusals before compute, runner contract, cache."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from companion import cli, registry, runner

CONTRACT_KEYS = {"paper", "status", "error", "params", "claims", "metrics", "provenance"}
CLAIM_KEYS = {"id", "statement", "paper_value", "value", "interval", "threshold", "verdict", "role", "kind",
              "per_seed", "direction"}
PROVENANCE_KEYS = {"commit", "dirty", "versions", "device", "threads", "paths", "started", "wall_seconds",
                   "cpu_seconds", "load_average", "cache_key", "code_key", "verdict_key", "extra_modules", "lock",
                   "numerics", "cpu"}


@pytest.mark.parametrize("argv, words", [
    (["run", "no-such-paper"], ["unknown paper 'no-such-paper'", "fdiv-losses"]),
    (["run", "../etc"], ["unknown paper '../etc'"]),
    (["run", "fdiv-losses", "-p", "no_such=1"], ["unknown parameter 'no_such'"]),
    (["run", "fdiv-losses", "-p", "seeds=-1"], ["'seeds'", "-1", "out of range"]),
    (["run", "fdiv-losses", "-p", "seeds=abc"], ["'seeds'", "'abc'", "not an int"]),
    (["run", "fdiv-losses", "-p", "seeds"], ["NAME=VALUE"]),
    (["run", "fdiv-losses", "--preset", "huge"], ["invalid choice: 'huge'"]),
    (["sweep", "fdiv-losses", "-p", "lm_steps=300"], ["exactly one parameter"]),
    (["sweep", "fdiv-losses", "-p", "lm_steps=300,x"], ["'lm_steps'", "'x'"]),
    (["sweep", "fdiv-losses", "-p", "lm_losses=kl,js"], ["takes a list"]),
    (["bogus"], ["invalid choice"]),
])
def test_usage_errors_exit_2_with_one_line(argv, words, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("companion: error:")
    for word in words:
        assert word in err


def test_list_names_every_registered_paper(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for slug in registry.PAPERS:
        assert slug in out


@pytest.mark.parametrize("slug", list(registry.PAPERS))
def test_params_lists_every_preset_without_local_weights(slug, capsys):
    """`companion params` shows the paper preset's values even where its paths do not exist yet."""
    assert cli.main(["params", slug]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("name"))
    assert header.split()[:5] == ["name", "type", "quick", "full", "paper"]
    assert "seed" in out


@pytest.mark.slow
def test_run_writes_the_contract_and_answers_repeats_from_cache(toy_project, capsys):
    assert cli.main(["run", "toy-paper", "-p", "seeds=4"]) == 0
    first = capsys.readouterr().out
    folder = toy_project / first.split("run folder: ")[1].strip()
    res = json.loads((folder / "results.json").read_text())
    assert set(res) == CONTRACT_KEYS and res["status"] == "ok" and res["error"] is None
    assert set(res["claims"][0]) >= CLAIM_KEYS and res["claims"][0]["verdict"] == "HOLDS"
    assert set(res["provenance"]) == PROVENANCE_KEYS and res["params"]["seeds"] == 4
    assert res["provenance"]["cpu_seconds"] > 0.1, "the kernel's own CPU time is measured, not zero"
    assert (folder / "notebook.ipynb").is_file()
    executed = json.loads((folder / "notebook.ipynb").read_text())
    assert "papermill" not in executed["metadata"]
    streams = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("name") == "stderr"]
    assert streams == [], streams

    t0 = time.perf_counter()
    assert cli.main(["run", "toy-paper", "-p", "seeds=4"]) == 0
    assert time.perf_counter() - t0 < 10
    assert "from cache" in capsys.readouterr().out

    assert cli.main(["run", "toy-paper", "-p", "seeds=4", "--force"]) == 0
    assert "from cache" not in capsys.readouterr().out
    assert len(list((toy_project / "runs" / "toy-paper").iterdir())) == 2


@pytest.mark.slow
def test_failing_notebook_is_recorded_and_exits_1(toy_project, capsys):
    assert cli.main(["run", "toy-paper", "-p", "fail=true"]) == 1
    captured = capsys.readouterr()
    assert "ValueError: boom from the toy paper" in captured.err
    res = json.loads(next((toy_project / "runs" / "toy-paper").glob("*/results.json")).read_text())
    assert res["status"] == "failed" and "cell" in res["error"] and "ValueError" in res["error"]


@pytest.mark.slow
def test_sweep_writes_csv_and_png(toy_project, capsys):
    out = toy_project / "sweep"
    assert cli.main(["sweep", "toy-paper", "-p", "level=0.2,0.9", "--seeds", "2", "--out", str(out)]) == 0
    csv = (out / "sweep.csv").read_text().splitlines()
    assert csv[0].startswith("level,claim,value") and len(csv) == 3
    assert "FAILS" in csv[1] and "HOLDS" in csv[2]
    assert (out / "sweep.png").stat().st_size > 1000


@pytest.mark.slow
def test_store_refreshes_the_stored_notebook_without_volatile_metadata(toy_project):
    from companion.evidence import store

    assert store("toy-paper", root=toy_project)
    nb = json.loads((toy_project / "notebooks" / "toy-paper.ipynb").read_text())
    assert "papermill" not in nb["metadata"]
    counts = [c["execution_count"] for c in nb["cells"] if c["cell_type"] == "code"]
    assert counts == list(range(1, len(counts) + 1))
    assert not any("injected-parameters" in c["metadata"].get("tags", []) for c in nb["cells"])
    record = json.loads((toy_project / "data" / "results" / "toy-paper" / "quick-seed0.json").read_text())
    assert record["status"] == "ok" and record["params"]["seed"] == 0


def test_results_are_written_readable_by_others(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        runner.write_json_atomic(tmp_path / "results.json", {"status": "ok"})
    finally:
        os.umask(old)
    assert (tmp_path / "results.json").stat().st_mode & 0o777 == 0o644
    assert json.loads((tmp_path / "results.json").read_text()) == {"status": "ok"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
