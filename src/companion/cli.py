"""``companion list | run | sweep | status``: the command-line contract of DESIGN.md.

Exit codes: 0 the notebook(s) ran to the end (whatever the verdicts), 1 a notebook failed,
2 a usage error (unknown paper, parameter, type or range), reported before any compute.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from companion import registry
from companion.params import PRESET_NAMES, ParamError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad command line: reported in one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print usage and exit 2 itself
        raise UsageError(message)


def _pairs(items: Sequence[str]) -> dict[str, str]:
    """``name=value`` strings to a dict; a malformed or repeated item is a usage error."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"-p expects NAME=VALUE, got {item!r}")
        if name in out:
            raise UsageError(f"parameter {name!r} given twice")
        out[name] = value.strip()
    return out


def _print_outcome(outcome) -> None:
    from companion.claims import format_table

    res = outcome.results
    print(format_table(res["claims"]))
    wall = res["provenance"]["wall_seconds"]
    note = " (from cache; --force reruns)" if outcome.cached else ""
    print(f"{res['paper']}: {res['status']} in {wall:.1f} s{note}")
    if res["status"] != "ok":
        print(f"error: {res['error']}", file=sys.stderr)
    print(f"run folder: {outcome.folder}")


def cmd_list(args: argparse.Namespace) -> int:
    """One line per paper: slug, title, last verdicts."""
    from companion.runner import latest

    root = registry.project_root()
    for slug, paper in registry.PAPERS.items():
        res = latest(root, slug)
        if res is None:
            summary = "not run"
        elif res["status"] != "ok":
            summary = "last run failed"
        else:
            counts = [c["verdict"] for c in res["claims"]]
            summary = ", ".join(f"{counts.count(v)} {v}" for v in ("HOLDS", "INCONCLUSIVE", "FAILS") if v in counts)
        print(f"{slug:24s} {paper.title[:60]:60s} {summary}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """Run one paper's notebook and print its verdict table."""
    from companion.runner import execute

    outcome = execute(args.slug, args.preset, _pairs(args.param), force=args.force,
                      out=Path(args.out) if args.out else None, log_output=args.log_output)
    _print_outcome(outcome)
    return EXIT_OK if outcome.ok else EXIT_FAILED


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a grid over one parameter; write sweep.csv and sweep.png."""
    from companion.sweep import sweep

    pairs = _pairs(args.param)
    if args.seeds is not None:
        if "seeds" in pairs:
            raise UsageError("give seeds either with --seeds or with -p seeds=..., not both")
        pairs["seeds"] = str(args.seeds)
    return sweep(args.slug, args.preset, pairs, Path(args.out) if args.out else None, args.force)


def cmd_status(args: argparse.Namespace) -> int:
    """Every paper with its last run, runtime and verdicts."""
    from companion.runner import latest

    root = registry.project_root()
    print(f"{'paper':24s} {'status':8s} {'preset':7s} {'wall s':>7s} {'started':26s} verdicts")
    for slug in registry.PAPERS:
        res = latest(root, slug)
        if res is None:
            print(f"{slug:24s} {'-':8s}")
            continue
        prov = res["provenance"]
        verdicts = " ".join(f"{c['id']}={c['verdict']}" for c in res["claims"])
        print(f"{slug:24s} {res['status']:8s} {res['params'].get('preset', '?'):7s} "
              f"{prov['wall_seconds']:7.1f} {prov['started']:26s} {verdicts}")
    return EXIT_OK


def cmd_store(args: argparse.Namespace) -> int:
    """Re-execute notebooks at the quick preset and store them (and their results) in notebooks/."""
    from companion.runner import store

    slugs = args.slugs or list(registry.PAPERS)
    failed = [slug for slug in slugs if not store(slug, force=args.force)]
    for slug in failed:
        print(f"failed: {slug} (see notebooks/{slug}.results.json)", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``companion`` command."""
    parser = _Parser(prog="companion", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="list the papers and their last verdicts").set_defaults(func=cmd_list)
    sub.add_parser("status", help="last run, runtime and verdicts per paper").set_defaults(func=cmd_status)
    store = sub.add_parser("store", help="refresh the stored notebooks at the quick preset (make notebooks)")
    store.add_argument("slugs", nargs="*", help="papers to refresh (default: all)")
    store.add_argument("--force", action="store_true", help="rerun even when a cached run matches")
    store.set_defaults(func=cmd_store)
    for name, func, helptext in (("run", cmd_run, "run one paper's notebook"),
                                 ("sweep", cmd_sweep, "sweep one parameter over a list of values")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("slug", help="paper slug (see `companion list`)")
        p.add_argument("--preset", default="quick", choices=PRESET_NAMES)
        p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                       help="override a parameter (sweep: NAME=v1,v2,...)")
        p.add_argument("--force", action="store_true", help="rerun even when a cached run matches")
        p.add_argument("--out", help="write into this folder instead of runs/SLUG/RUN-ID")
        p.set_defaults(func=func)
        if name == "run":
            p.add_argument("--log-output", action="store_true", help="stream cell output to the log")
        else:
            p.add_argument("--seeds", type=int, help="number of seeds per grid point")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, dispatch, and turn usage errors into one line and exit 2."""
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (UsageError, ParamError, registry.UnknownPaper) as err:
        print(f"companion: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as err:
        print(f"companion: error: missing dependency {err.name!r}; run `make install`", file=sys.stderr)
        return EXIT_USAGE
