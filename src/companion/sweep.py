"""``companion sweep``: run one paper over a grid of one parameter and plot each claim's metric."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping

import pandas as pd

from companion import registry
from companion.params import ParamError
from companion.runner import resolve, write_atomic


def grid(slug: str, preset: str, pairs: Mapping[str, str]) -> tuple[str, list[str], dict[str, str]]:
    """Split the ``-p`` pairs into the swept parameter, its values, and the fixed ones (validated)."""
    swept = [name for name, text in pairs.items() if "," in text]
    if len(swept) != 1:
        raise ParamError("sweep needs exactly one parameter with comma-separated values, "
                         f"e.g. -p seed=0,1,2; got {len(swept)}")
    name = swept[0]
    fixed = {k: v for k, v in pairs.items() if k != name}
    paper, _, _ = resolve(slug, preset, fixed)
    cls = paper.module().Params
    if cls.kind(name).startswith("list["):
        raise ParamError(f"parameter {name!r} takes a list and cannot be swept; sweep a scalar parameter")
    values = [v.strip() for v in pairs[name].split(",") if v.strip()]
    for value in values:
        resolve(slug, preset, {**fixed, name: value})
    return name, values, fixed


def plot(table: pd.DataFrame, name: str, path: Path) -> None:
    """One panel per claim: its metric (mean and 95% interval) against the swept value."""
    from companion.plotting import figure

    claims = list(dict.fromkeys(table["claim"]))
    fig, axes = figure(ncols=min(3, len(claims)) or 1, nrows=max(1, -(-len(claims) // 3)), width=3.4, height=2.6)
    for ax, claim in zip(axes, claims):
        rows = table[table["claim"] == claim]
        x = [str(v) for v in rows[name]]
        ax.errorbar(x, rows["value"], yerr=[rows["value"] - rows["lo"], rows["hi"] - rows["value"]],
                    marker="o", capsize=3)
        ax.axhline(rows["threshold"].iloc[0], color="grey", linestyle="--", linewidth=1)
        ax.set_title(claim)
        ax.set_xlabel(name)
    for ax in axes[len(claims):]:
        ax.set_visible(False)
    fig.savefig(path)


def rows_of(name: str, value: str, done) -> list[dict]:
    """The sweep.csv rows of one finished point: one per claim (a failed point has none)."""
    rows = []
    for c in (done.record or {}).get("claims", []):
        lo, hi = c["interval"] or (c["value"], c["value"])  # an exact claim has no interval
        rows.append({name: value, "claim": c["id"], "value": c["value"], "lo": lo, "hi": hi,
                     "threshold": c["threshold"], "verdict": c["verdict"], "run": str(done.path)})
    return rows


def sweep(slug: str, preset: str, pairs: Mapping[str, str], out: Path | None, force: bool,
          scheduler: str | None = None, threads: int | None = None, workers: int | None = None,
          quiet: bool = False) -> int:
    """Run the grid, one Dask task per point (:mod:`companion.executor`); write ``sweep.csv`` and
    ``sweep.png``; exit 1 if any point failed.

    Every point is validated before any runs. ``sweep.csv`` is rewritten as each point finishes
    (grid order), so an interrupted sweep leaves the points it finished, and rerunning the same
    command answers them from the runner's cache.
    """
    from companion.executor import Spec, run_many

    name, values, fixed = grid(slug, preset, pairs)
    root = registry.project_root()
    out = out or root / "runs" / slug / f"sweep-{name}"
    specs = [Spec(slug, preset, {**fixed, name: value}, force=force, label=f"{name}={value}")
             for value in values]
    finished: dict[str, list[dict]] = {}

    def write_table() -> pd.DataFrame:
        table = pd.DataFrame([row for value in values for row in finished.get(value, [])])
        write_atomic(out / "sweep.csv", table.to_csv(index=False))
        return table

    def point_done(done) -> None:
        value = done.spec.raw[name]
        status = (done.record or {}).get("status", "failed")
        note = " (from cache)" if done.cached else ""
        print(f"{name}={value}: {status}{note} ({done.path or done.error})", flush=True)
        finished[value] = rows_of(name, value, done)
        write_table()

    results = run_many(specs, scheduler=scheduler, threads=threads, workers=workers,
                       on_done=point_done, quiet=quiet, root=root)
    table = write_table()
    if not table.empty:
        partial = out / ".sweep.partial.png"
        plot(table, name, partial)
        partial.replace(out / "sweep.png")
        print(table.pivot(index=name, columns="claim", values="verdict").to_string())
    print(f"wrote {out / 'sweep.csv'} and {out / 'sweep.png'}")
    failed = [d for d in results if not d.ok]
    for d in failed:
        print(f"failed: {d.spec.name}: {d.error}", file=sys.stderr)
    return 1 if failed else 0
