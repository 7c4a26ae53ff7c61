"""Performance anchors: interleaved timings of compared functions and the JSON record a page shows.

:func:`compare` times two or more functions on the same inputs in rounds (A B A B ...), after
warm-up calls, so that a burst of load hits every function alike; the ratio of each function to
the reference is the median over rounds of the per-round ratio, with its min-max spread.
:func:`record` writes ``data/bench/<slug>.json`` (the ratio, the two times, the sizes, the
machine's cores and threads, the date) with the benchmark's code key, commit, lock hash and numerics
profile, which the book's performance page and each paper page read; :func:`current_code_key` tells
whether an anchor still measures today's code.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import torch


@dataclass(frozen=True)
class Comparison:
    """One function timed against a reference in the same rounds."""

    name: str
    reference: str
    ratio: float
    ratio_min: float
    ratio_max: float
    seconds: float
    reference_seconds: float
    rounds: int
    clock: str
    threads: int

    def meets(self, target: float, direction: str = "<=") -> bool | None:
        """True when the whole spread clears ``target``, False when none of it does, else None."""
        lo, hi = (self.ratio_min, self.ratio_max)
        if direction == "<=":
            return True if hi <= target else False if lo > target else None
        return True if lo >= target else False if hi < target else None

    def line(self, target: float | None = None, direction: str = "<=") -> str:
        """``name / reference: ratio (min-max over rounds)``, for a terminal; with ``target``, its status."""
        out = (f"{self.name} / {self.reference}: {self.ratio:.3g}x "
               f"(range {self.ratio_min:.3g}-{self.ratio_max:.3g} over {self.rounds} rounds, "
               f"{self.threads} thread(s), {self.clock} time)")
        if target is not None:
            out += f"; target {direction} {target:g}: {status(self.meets(target, direction))}"
        return out


def status(meets: bool | None) -> str:
    """How :meth:`Comparison.meets` reads: a spread that straddles the target is no pass."""
    return {True: "met", False: "MISSED", None: "range straddles it"}[meets]


def compare(fns: Mapping[str, Callable[[], object]], reference: str, rounds: int = 7,
            warmup: int = 1, clock: str = "wall") -> dict[str, Comparison]:
    """Time every function in ``fns`` once per round, interleaved, against ``fns[reference]``."""
    if reference not in fns:
        raise ValueError(f"reference {reference!r} is not among {', '.join(fns)}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    tick = {"wall": time.perf_counter, "cpu": time.process_time}[clock]
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = tick()
            fn()
            times[name].append(max(tick() - start, 1e-9))
    ref = times[reference]
    out = {}
    for name, ts in times.items():
        if name == reference:
            continue
        ratios = [t / r for t, r in zip(ts, ref)]
        out[name] = Comparison(name, reference, statistics.median(ratios), min(ratios), max(ratios),
                               statistics.median(ts), statistics.median(ref), rounds, clock,
                               torch.get_num_threads())
    return out


def record(slug: str, anchor: Comparison, *, target: float | None = None, direction: str = "<=",
           sizes: Mapping[str, Any] | None = None, extra: Mapping[str, Comparison] | None = None,
           root: Path | None = None, targets: Mapping[str, tuple[float, str]] | None = None,
           values: Mapping[str, Any] | None = None, device: str = "cpu") -> Path:
    """Write ``data/bench/<slug>.json``: the anchor ratio with its spread, sizes and machine facts.

    ``extra``: further ratios, each with ``targets[name] = (target, direction)`` where it has one;
    ``values``: measured numbers that are not timings (agreement of outputs, rates); ``device``:
    where the compared functions ran (``cpu``, or the CUDA device's name).
    """
    from companion import numerics, registry
    from companion.environment import lock_hash
    from companion.runner import head_commit, write_json_atomic

    root = root or registry.project_root()
    registry.get(slug)
    payload = {
        "paper": slug,
        "anchor": asdict(anchor),
        "target": target,
        "direction": direction,
        "meets_target": None if target is None else anchor.meets(target, direction),
        "extra": {k: _with_target(v, (targets or {}).get(k)) for k, v in (extra or {}).items()},
        "values": dict(values or {}),
        "sizes": dict(sizes or {}),
        "machine": {"cores": len(os.sched_getaffinity(0)), "platform": platform.platform(terse=True),
                    "device": device, "cpu": numerics.cpu_model()},
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "code_key": current_code_key(slug, root),
        "commit": head_commit(root),
        "lock": lock_hash(root),
        "numerics": numerics.active(),
    }
    path = root / "data" / "bench" / f"{slug}.json"
    write_json_atomic(path, payload)
    return path


def _with_target(c: Comparison, target: tuple[float, str] | None) -> dict[str, Any]:
    out: dict[str, Any] = asdict(c)
    if target is not None:
        out.update(target=target[0], direction=target[1], meets_target=c.meets(*target))
    return out


def script_path(slug: str, root: Path) -> Path:
    """The benchmark script of ``slug``: ``benchmarks/bench_<slug with underscores>.py``."""
    return root / "benchmarks" / f"bench_{slug.replace('-', '_')}.py"


def current_code_key(slug: str, root: Path) -> str | None:
    """The code key today's benchmark of ``slug`` would record (None when it has no script)."""
    from companion import keys

    script = script_path(slug, root)
    return keys.script_key(script) if script.is_file() else None


def load(slug: str, root: Path) -> dict[str, Any] | None:
    """The stored benchmark record of ``slug`` (None when missing or unreadable)."""
    path = root / "data" / "bench" / f"{slug}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
