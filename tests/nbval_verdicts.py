"""A pytest plugin for the nbval run: a verdict line that moved is reported as a claim and its margin.

nbval compares a page's verdict lines (``claim-id: VERDICT``) with the stored ones and, when they
differ, shows a text diff. This plugin adds, for each claim whose verdict moved, the stored record's
value, interval and bar, and what this machine is, so that a reader sees at once which claim sits
where, which CPU stored the record and which this machine is, and which kernel probes
(:mod:`companion.fingerprint`) give other bits here than on the machines stored in the repository
(``make test`` loads it with ``-p tests.nbval_verdicts``).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import pytest

from companion import numerics

MOVED: list[str] = []


def _lines(outputs: Any) -> dict[str, str]:
    """``{claim: verdict}`` from a cell's stream outputs."""
    text = "".join(o.get("text", "") for o in outputs or [] if o.get("output_type") == "stream")
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def explain(slug: str, stored: dict[str, str], now: dict[str, str], record: dict[str, Any] | None) -> list[str]:
    """One line per claim whose verdict differs: the stored verdict, value, interval and bar, and today's."""
    claims = {c["id"]: c for c in (record or {}).get("claims", [])}
    out = []
    for claim in sorted(set(stored) | set(now)):
        if stored.get(claim) == now.get(claim):
            continue
        c = claims.get(claim, {})
        where = ""
        if c:
            interval = c.get("interval")
            span = f" [{interval[0]:.3g}, {interval[1]:.3g}]" if interval and None not in interval else ""
            value = "nan" if c.get("value") is None else f"{c['value']:.3g}"
            cpu = (record or {}).get("provenance", {}).get("cpu", "an unrecorded CPU")
            where = f" (stored on {cpu}: value {value}{span}, test {c['direction']} {c['threshold']:g})"
        out.append(f"{slug}: {claim}: stored {stored.get(claim, 'absent')}{where}, here {now.get(claim, 'absent')}")
    return out


def _machine() -> str:
    # Measured: under the profile, records stored on an AMD EPYC reproduce bit for bit on an Intel Xeon for
    # some papers and not for others, so "covered" does not promise identical numbers across CPU vendors.
    covered = ("under the numerics profile (which does not yet make every paper identical across CPU "
               "vendors; verdicts at their bar can move)") if numerics.applies() else \
        "NOT covered by the numerics profile (its code paths differ; verdicts at their bar can move)"
    return f"this machine: {numerics.cpu_model()} ({platform.machine()}), {covered}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    cell = getattr(item, "cell", None)
    if report.when != "call" or not report.failed or cell is None or "NBVAL_CHECK_OUTPUT" not in cell.source:
        return
    slug = Path(str(item.fspath)).stem
    path = Path(str(item.fspath)).parent.parent / "data" / "results" / slug / "quick-seed0.json"
    record = json.loads(path.read_text()) if path.is_file() else None
    moved = explain(slug, _lines(cell.outputs), _lines(getattr(item, "test_outputs", None)), record)
    if moved:
        MOVED.extend(moved)
        report.sections.append(("verdicts that moved", "\n".join([*moved, _machine()])))


def _kernels(root: Path) -> str:
    """Which kernel probes give other bits here than on the stored machines (``companion numerics``)."""
    from companion import fingerprint

    try:
        return fingerprint.report(fingerprint.machine(), fingerprint.load(root / fingerprint.STORE))
    except Exception as err:  # a diagnosis must not hide the verdicts above it
        return f"kernel fingerprints not computed: {err!r}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if MOVED:
        terminalreporter.section("verdicts that moved on this machine")
        for line in [*MOVED, _machine(), _kernels(Path(__file__).resolve().parent.parent)]:
            terminalreporter.line(line)
