"""Runs that end cleanly: interrupts, unique run ids, atomic files, disk errors, corrupt records, keys."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from companion import book, cli, evidence, keys, registry, runner

ROOT = registry.project_root()


def _kill_after(seconds: float, signum: int) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


def _leftovers(project: Path) -> list[Path]:
    return [p for p in (project / "runs" / "toy-paper").iterdir() if p.name.startswith(".")]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_is_recorded_exits_130_and_leaves_nothing_half_written(toy_project, capsys, signum):
    timer = _kill_after(4.0, signum)
    try:
        assert cli.main(["run", "toy-paper", "-p", "sleep=60"]) == 130
    finally:
        timer.cancel()
    assert "interrupted" in capsys.readouterr().err
    records = list((toy_project / "runs" / "toy-paper").glob("*/results.json"))
    assert len(records) == 1 and not _leftovers(toy_project)
    res = json.loads(records[0].read_text())
    assert res["status"] == "interrupted" and res["claims"] == []
    assert cli.main(["run", "toy-paper"]) == 0


def _failing_first(monkeypatch, message: str, times: int) -> list[int]:
    """Make papermill raise RuntimeError(message) on its first ``times`` calls, then run for real."""
    import papermill

    real, calls = papermill.execute_notebook, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) <= times:
            raise RuntimeError(message)
        return real(*args, **kwargs)

    monkeypatch.setattr(papermill, "execute_notebook", flaky)
    return calls


@pytest.mark.slow
def test_a_kernel_that_dies_while_starting_is_started_again(toy_project, monkeypatch):
    calls = _failing_first(monkeypatch, runner.KERNEL_DIED_AT_START, runner.KERNEL_START_TRIES - 1)
    outcome = runner.execute("toy-paper", force=True)
    assert outcome.results["status"] == "ok" and len(calls) == runner.KERNEL_START_TRIES


def test_a_kernel_start_is_tried_a_bounded_number_of_times_and_other_errors_once(toy_project, monkeypatch):
    calls = _failing_first(monkeypatch, runner.KERNEL_DIED_AT_START, runner.KERNEL_START_TRIES)
    failed = runner.execute("toy-paper", force=True).results
    assert failed["status"] == "failed" and runner.KERNEL_DIED_AT_START in failed["error"]
    assert len(calls) == runner.KERNEL_START_TRIES
    calls = _failing_first(monkeypatch, "a cell raised", 1)
    assert runner.execute("toy-paper", force=True).results["status"] == "failed" and len(calls) == 1


def test_run_ids_are_unique_within_a_second():
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ids = {runner.new_run_id(now, "abcdef0123") for _ in range(200)}
    assert len(ids) == 200


def test_a_run_published_over_an_existing_folder_replaces_every_entry(tmp_path):
    final, tmp = tmp_path / "run", tmp_path / ".run.partial"
    for folder in (final, tmp):
        (folder / "figures").mkdir(parents=True)
        (folder / "figures" / f"{folder.name}.png").write_text(folder.name)
    (final / "stale.json").write_text("old")
    names = [f"f{i:03d}.json" for i in range(200)]
    for name in names:
        (tmp / name).write_text(name)
    runner._publish(tmp, final)
    assert not tmp.exists()
    assert sorted(p.name for p in final.iterdir()) == sorted([*names, "figures", "stale.json"])
    assert [p.name for p in (final / "figures").iterdir()] == [".run.partial.png"]
    assert all((final / name).read_text() == name for name in names)


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "sweep.csv"
    runner.write_atomic(target, "old\n")

    def full_disk(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(runner.os, "replace", full_disk)
    with pytest.raises(OSError):
        runner.write_atomic(target, "new\n")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["sweep.csv"]


def test_a_disk_error_is_one_line_and_exit_1(toy_project, capsys):
    blocker = toy_project / "a-file"
    blocker.write_text("")
    assert cli.main(["run", "toy-paper", "--out", str(blocker / "run")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("companion: error:") and "a-file" in err


def test_a_corrupt_record_is_named_and_skipped_by_status_list_and_book(toy_project, capsys):
    folder = toy_project / "data" / "results" / "toy-paper"
    folder.mkdir(parents=True)
    (folder / "quick-seed0.json").write_text('{"paper": "toy-paper", "status": "ok", "cla')
    bad_run = toy_project / "runs" / "toy-paper" / "20260101T000000Z-x"
    bad_run.mkdir(parents=True)
    (bad_run / "results.json").write_text("not json")
    assert cli.main(["status"]) == 0
    assert "unreadable" in capsys.readouterr().out
    assert cli.main(["list"]) == 0
    captured = capsys.readouterr()
    assert "page record unreadable" in captured.out and "quick-seed0.json" in captured.err
    records = {"toy-paper": evidence.judged(toy_project, "toy-paper")}
    assert book.page_results(toy_project, records) == {"toy-paper": book.UNREADABLE}
    assert "unreadable" in book.status_markdown(book.page_results(toy_project, records), records)
    assert runner.last_run(toy_project, "toy-paper") is None


def test_params_lists_every_parameter_with_type_default_and_range(capsys):
    assert cli.main(["params", "jsae"]) == 0
    out = capsys.readouterr().out
    cls = registry.get("jsae").module().Params
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    for name in cls.names():
        assert name in lines, name
        rule, kind = cls.rule(name), cls.kind(name)
        assert kind in lines[name] and rule.describe(kind).split()[0] in lines[name]
    assert "int in [1, 64]" in lines["seeds"] and "one of auto, cpu, cuda" in lines["device"]


@pytest.mark.parametrize("slug", list(registry.PAPERS))
def test_notebook_parameters_cell_lists_exactly_the_schema_all_none(slug):
    import nbformat

    paper = registry.get(slug)
    nb = nbformat.read(paper.notebook(ROOT), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assignments = {}
    for line in cell.source.splitlines():
        head = line.split("#", 1)[0]
        if "=" in head:
            name, value = (part.strip() for part in head.split("=", 1))
            assignments[name] = value
    assert set(assignments) == {"preset", *paper.module().Params.names()}
    assert assignments.pop("preset") == '"quick"'
    assert set(assignments.values()) == {"None"}


def _paper_preset_needs_a_path(slug: str) -> str | None:
    """The first path parameter that the paper preset refuses when nothing is at its default place."""
    cls = registry.get(slug).module().Params
    try:
        cls.resolve("paper")
    except runner.ParamError as err:
        return str(err)
    return None


@pytest.mark.parametrize("slug", list(registry.PAPERS))
def test_paper_presets_without_their_path_are_refused_before_compute(slug, capsys):
    message = _paper_preset_needs_a_path(slug)
    names = registry.get(slug).module().Params.names()
    path_params = [n for n in names if n.endswith(keys.PATH_SUFFIXES)]
    if not path_params:
        assert message is None
        return
    assert message is not None and any(f"'{n}'" in message for n in path_params)
    t0 = time.perf_counter()
    assert cli.main(["run", slug, "--preset", "paper"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "data/README.md" in err
    assert time.perf_counter() - t0 < 20


def test_shared_modules_serve_at_least_two_papers():
    importers: dict[str, set[str]] = {}
    for slug, paper in registry.PAPERS.items():
        package = paper.module_name
        modules, _ = keys.closure([package], package)
        for name in modules:
            if name.startswith(("companion.models.", "companion.data.")):
                importers.setdefault(name, set()).add(slug)
    shared = [p for sub in ("models", "data") for p in (ROOT / "src" / "companion" / sub).glob("*.py")
              if p.stem != "__init__"]
    for path in shared:
        name = f"companion.{path.parent.name}.{path.stem}"
        assert len(importers.get(name, ())) >= 2, f"{name} serves {sorted(importers.get(name, ()))}"


def test_framework_modules_import_no_paper():
    for name in ("cli", "runner", "params", "claims", "registry", "runtime", "sweep", "book", "plotting",
                 "keys", "evidence", "bench"):
        imported = keys.parsed(f"companion.{name}")[1]
        assert not any(m.startswith("companion.papers.") for m in imported), name


def test_external_paths_are_fingerprinted_by_content(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.bin").write_bytes(b"\x00" * 10)
    first = keys.external_paths({"model_path": str(tmp_path / "m"), "seeds": 3})
    (tmp_path / "m" / "w.bin").write_bytes(b"\x01" * 10)
    second = keys.external_paths({"model_path": str(tmp_path / "m"), "seeds": 3})
    assert set(first) == {"model_path"} and first != second
    assert keys.external_paths({"model_path": ""}) == {}


def test_fetch_offline_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(registry, "project_root", lambda: tmp_path)
    t0 = time.perf_counter()
    assert cli.main(["fetch", "extractive-structures"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot fetch allenai/OLMo-7B-hf" in err
    assert time.perf_counter() - t0 < 30


def test_fetch_of_a_synthetic_paper_says_there_is_nothing_to_fetch(capsys):
    assert cli.main(["fetch", "improvement-feedback"]) == 2
    assert "nothing to fetch" in capsys.readouterr().err


def _offline_sources(monkeypatch, *found):
    """Give ``fetch`` these sources, and mocks of both download functions that record each call."""
    import io

    import huggingface_hub

    from companion import fetch

    calls: list[tuple[str, str]] = []

    def snapshot_download(repo_id, *, repo_type, revision, local_dir, allow_patterns):
        calls.append((repo_id, revision))
        (Path(local_dir) / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)  # as the hub's does
        (Path(local_dir) / "config.json").write_text("{}")

    class Reply(io.BytesIO):
        headers = {"Content-Length": "7"}

    def urlopen(request, timeout):
        calls.append((request.full_url, ""))
        return Reply(b"weights")

    monkeypatch.setattr(fetch, "sources", lambda slug: found)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(fetch.urllib.request, "urlopen", urlopen)
    return calls


def test_fetch_gets_the_pinned_revision_and_not_again_what_is_there(tmp_path, monkeypatch):
    import hashlib

    from companion import fetch

    hub = fetch.Source("model", "a model", "MIT", repo_id="org/model", revision="0123abcd", allow=("*.json",))
    web = fetch.Source("data", "a file", "MIT", url="https://example.org/w.bin",
                       sha256=hashlib.sha256(b"weights").hexdigest())
    calls = _offline_sources(monkeypatch, hub, web)
    fetch.fetch("toy", root=tmp_path)
    assert calls == [("org/model", "0123abcd"), ("https://example.org/w.bin", "")]
    fetch.fetch("toy", root=tmp_path)
    assert len(calls) == 2  # both already there: same revision and sizes, same SHA-256
    local = tmp_path / "data" / "local" / "toy"
    (local / "model" / "config.json").write_text('{"edited": 1}')
    (local / "data" / "w.bin").write_bytes(b"wrong!!")
    fetch.fetch("toy", root=tmp_path)
    assert calls[2:] == [("org/model", "0123abcd"), ("https://example.org/w.bin", "")]
    assert (local / "data" / "w.bin").read_bytes() == b"weights"


def test_fetch_refuses_a_hub_source_without_a_revision_before_downloading(tmp_path, monkeypatch):
    from companion import fetch

    web = fetch.Source("data", "a file", "MIT", url="https://example.org/w.bin")
    calls = _offline_sources(monkeypatch, web, fetch.Source("model", "a model", "MIT", repo_id="org/model"))
    with pytest.raises(fetch.FetchError, match="org/model .*pins no revision"):
        fetch.fetch("toy", root=tmp_path)
    assert calls == []


def test_a_store_waits_for_another_store_of_the_same_paper(toy_project, monkeypatch):
    """Their records and page must not interleave: the second store runs only once the first is done."""
    ran: list[str] = []

    def execute(slug, preset, raw, **kw):  # a finished run, without a kernel
        ran.append(slug)
        params = {"preset": preset, "seed": 0}
        return runner.RunOutcome(toy_project, {"paper": slug, "status": "ok", "error": None, "params": params,
                                               "claims": [], "metrics": {}, "provenance": {"wall_seconds": 1.0}},
                                 cached=False)

    checked = threading.Event()  # the second store has validated its run and goes for the lock

    def git_state(*args):
        checked.set()
        return None, None

    monkeypatch.setattr(runner, "execute", execute)
    monkeypatch.setattr(runner, "git_state", git_state)
    second = threading.Thread(target=evidence.store, args=("toy-paper",), kwargs={"root": toy_project})
    with evidence.store_lock(toy_project, "toy-paper"):  # the first store, under way
        second.start()
        assert checked.wait(30)
        second.join(0.5)
        assert second.is_alive() and ran == []
    second.join(10)
    assert not second.is_alive() and ran == ["toy-paper"]
    assert json.loads(evidence.record_path(toy_project, "toy-paper", "quick", 0).read_text())["status"] == "ok"
