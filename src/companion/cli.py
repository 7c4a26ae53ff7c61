"""``companion list | params | run | run-all | sweep | store | status | rejudge | verify | open | fetch``.

Exit codes: 0 the notebook(s) ran to the end (whatever the verdicts), 1 a notebook failed or the
disk refused a write, 2 a usage error (unknown paper, parameter, type, range or path), reported
before any compute, 130 interrupted (the run is recorded as ``interrupted``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from companion import numerics, registry
from companion.params import PRESET_NAMES, ParamError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


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


def _progress(args: argparse.Namespace) -> bool:
    """Show per-cell progress only on a terminal and without --quiet."""
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


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


def _counts(record: dict[str, Any]) -> str:
    """``5 HOLDS, 1 FAILS`` for a record's claims."""
    verdicts = [c["verdict"] for c in record["claims"]]
    return ", ".join(f"{verdicts.count(v)} {v}" for v in ("HOLDS", "INCONCLUSIVE", "FAILS") if v in verdicts)


def cmd_list(args: argparse.Namespace) -> int:
    """One line per paper: slug, title, the stored page's verdicts; the last run on a second line."""
    from companion.evidence import page_record
    from companion.runner import RecordError, last_run

    root = registry.project_root()
    for slug, paper in registry.PAPERS.items():
        try:
            page = page_record(root, slug)
            summary = "no stored run" if page is None else f"page: {_counts(page)}"
        except RecordError as err:
            summary = "page record unreadable"
            print(f"companion: {err}", file=sys.stderr)
        print(f"{slug:24s} {paper.title[:56]:56s} {summary}")
        last = last_run(root, slug)
        if last is not None:
            print(f"{'':24s} last run: {last['params'].get('preset', '?')} preset, seed "
                  f"{last['params'].get('seed', '?')}, {last['status']}"
                  + (f" ({_counts(last)})" if last["status"] == "ok" else ""))
    return EXIT_OK


def cmd_params(args: argparse.Namespace) -> int:
    """Every parameter of one paper: type, quick default, full and paper values, what is allowed."""
    from companion.runner import params_class

    paper = registry.get(args.slug)
    cls = params_class(paper)
    presets = {name: _preset_values(cls, name) for name in PRESET_NAMES}
    doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
    print(f"{paper.slug}: {paper.title}\n{doc}\n")
    rows = [("name", "type", "quick", "full", "paper", "allowed", "help")]
    for name in cls.names():
        rule, kind = cls.rule(name), cls.kind(name)
        vals = [_short(presets[p][name]) for p in PRESET_NAMES]
        rows.append((name, kind, *vals, rule.describe(kind), rule.help))
    widths = [min(max(len(r[i]) for r in rows), 28) for i in range(6)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:6], widths)) + "  " + r[6])
    what = getattr(paper.module(), "PAPER_PRESET", None)
    if what:
        print(f"\npaper preset: {what}")
    return EXIT_OK


def _preset_values(cls: Any, preset: str) -> dict[str, Any]:
    """A preset's values, each checked, without the cross-parameter checks of a run: listing the
    ``paper`` preset must not require its local weights to exist."""
    values = {f.name: f.default for f in dataclasses.fields(cls) if f.name != "preset"}
    values.update(cls.PRESETS.get(preset, {}))
    return {name: cls.check(name, value) for name, value in values.items()}


def _short(value: Any) -> str:
    """A parameter value in a table cell (lists comma-joined, empty string as '')."""
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "()"
    return repr(value) if value == "" else str(value)


def cmd_run(args: argparse.Namespace) -> int:
    """Run one paper's notebook and print its verdict table."""
    from companion.runner import execute

    outcome = execute(args.slug, args.preset, _pairs(args.param), force=args.force,
                      out=Path(args.out) if args.out else None, log_output=args.log_output,
                      progress=_progress(args))
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
    return sweep(args.slug, args.preset, pairs, Path(args.out) if args.out else None, args.force,
                 scheduler=args.scheduler, threads=args.threads, workers=args.workers, quiet=args.quiet)


def _records(args: argparse.Namespace) -> list[tuple[str, int | None]]:
    """The (preset, seed) records ``store`` keeps: --evidence, or --preset with --seed S[,S...]."""
    from companion.evidence import EVIDENCE

    if args.evidence:
        if args.seed is not None:
            raise UsageError("--evidence stores every record of the robustness table; drop --seed")
        return list(EVIDENCE)
    if args.seed is None:
        return [(args.preset, None)]
    try:
        return [(args.preset, int(s)) for s in args.seed.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seed expects an integer or a comma-separated list, got {args.seed!r}") from None


def cmd_run_all(args: argparse.Namespace) -> int:
    """Every paper's notebook at one preset, one Dask task each; the verdict table of each."""
    from companion.claims import format_table
    from companion.executor import Spec

    raw = _pairs(args.param)
    specs = [Spec(slug, args.preset, raw, force=args.force) for slug in registry.PAPERS]

    def show(done) -> None:
        res = done.record
        if res is None:
            print(f"{done.spec.slug}: failed ({done.error})\n", flush=True)
            return
        note = " (from cache)" if done.cached else ""
        print(format_table(res["claims"]))
        print(f"{res['paper']}: {res['status']} in {res['provenance']['wall_seconds']:.1f} s{note}"
              + (f"; error: {res['error']}" if res["status"] != "ok" else ""))
        print(f"run folder: {done.path}\n", flush=True)

    return _run_specs(args, specs, show, lambda d: f"failed: {d.spec.slug}: {d.error}")


def status_rows(root: Path) -> list[dict[str, Any]]:
    """Per paper, each stored record: preset, seed, status, verdicts, wall time, current, dirty."""
    from companion import evidence

    rows = []
    for slug in registry.PAPERS:
        records = []
        for stored in evidence.load(root, slug):
            if stored.record is None:
                records.append({"file": stored.path.name, "readable": False, "error": stored.error})
                continue
            res, prov = stored.record, stored.record["provenance"]
            records.append({
                "file": stored.path.name, "readable": True, "preset": res["params"].get("preset"),
                "seed": res["params"].get("seed"), "status": res["status"],
                "verdicts": {c["id"]: c["verdict"] for c in res["claims"]},
                "wall_seconds": prov.get("wall_seconds"), "cpu_seconds": prov.get("cpu_seconds"),
                "load_average": prov.get("load_average"), "started": prov.get("started"),
                "commit": prov.get("commit"), "dirty": prov.get("dirty"), "current": stored.current,
                "judged": stored.judged, "env_drift": stored.env_drift, "state": stored.state,
                "cpu": prov.get("cpu"),
            })
        rows.append({"paper": slug, "records": records})
    return rows


def _optional(value: float | None, width: int, digits: int) -> str:
    """A number right-aligned in ``width``, or a dash for records that predate the field."""
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}s}"


def cmd_status(args: argparse.Namespace) -> int:
    """Every paper's stored records: preset, seed, status, wall time, current or stale, verdicts."""
    rows = status_rows(registry.project_root())
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    print(f"{'paper':24s} {'record':20s} {'status':8s} {'wall s':>7s} {'cpu s':>7s} {'load':>5s} "
          f"{'state':18s} verdicts")
    for row in rows:
        if not row["records"]:
            print(f"{row['paper']:24s} {'-':20s}")
        for r in row["records"]:
            if not r["readable"]:
                print(f"{row['paper']:24s} {r['file']:20s} unreadable: {r['error']}")
                continue
            counts = _counts({"claims": [{"verdict": v} for v in r["verdicts"].values()]})
            print(f"{row['paper']:24s} {r['file']:20s} {r['status']:8s} {r['wall_seconds'] or 0:7.1f} "
                  f"{_optional(r['cpu_seconds'], 7, 1)} {_optional(r['load_average'], 5, 1)} "
                  f"{r['state'].upper() if not r['current'] else r['state']:18s} {counts}")
    return EXIT_OK


def cmd_store(args: argparse.Namespace) -> int:
    """Run papers at a preset and seed and keep the records (the quick default also as the page)."""
    from companion.executor import Spec

    slugs = args.slugs or list(registry.PAPERS)
    for slug in slugs:
        registry.get(slug)
    specs = [Spec(slug, preset, {} if seed is None else {"seed": str(seed)}, kind="store", force=args.force,
                  label=f"{slug} {preset}" + ("" if seed is None else f" seed {seed}"), progress=_progress(args))
             for slug in slugs for preset, seed in _records(args)]

    def show(done) -> None:
        res = done.record
        if res is None:
            print(f"{done.spec.name}: failed ({done.error})", flush=True)
            return
        print(f"{done.spec.slug} {res['params']['preset']} seed {res['params']['seed']}: {res['status']} in "
              f"{res['provenance']['wall_seconds']:.1f} s" + (" (cached)" if done.cached else ""), flush=True)
        if res["status"] != "ok":
            print(f"  {res['error']}", flush=True)

    return _run_specs(args, specs, show, lambda d: f"failed: {d.spec.name} (see data/results/{d.spec.slug}/)")


def _slugs(given: Sequence[str]) -> list[str]:
    """The papers named (each checked), or every paper when none is."""
    for slug in given:
        registry.get(slug)
    return list(given) or list(registry.PAPERS)


def cmd_rejudge(args: argparse.Namespace) -> int:
    """Re-evaluate stored records' verdicts from their stored values with today's declarations."""
    from companion import evidence

    root = registry.project_root()
    unjudgeable = 0
    for slug in _slugs(args.slugs):
        for r in evidence.rejudge_paper(root, slug, write=not args.dry_run):
            name = r.path.relative_to(root)
            if r.error:
                unjudgeable += 1
                print(f"{name}: {r.error}", file=sys.stderr)
            for claim, old, new in r.moved:
                print(f"{name}: {claim}: {old} -> {new}")
    print(f"rejudge: done{' (dry run, nothing written)' if args.dry_run else ''}"
          + (f"; {unjudgeable} record(s) need a re-run" if unjudgeable else ""))
    return EXIT_FAILED if unjudgeable else EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """Re-run stale records at their stored preset, seed and threads; re-stamp those that reproduce."""
    from companion import evidence
    from companion.executor import Spec, run_many

    if args.slugs and args.all:
        raise UsageError("give paper slugs or --all, not both")
    if not args.slugs and not args.all:
        raise UsageError("name the papers to verify, or --all for every paper")
    root = registry.project_root()
    todo = evidence.to_verify(root, _slugs(args.slugs), args.preset, args.env)
    if not todo:
        print("verify: every record is current" + (" and made in this environment" if args.env else ""))
        return EXIT_OK
    failed = 0
    for threads, group in evidence.by_threads(todo).items():
        specs = [Spec(slug, record["params"]["preset"], {"seed": str(record["params"]["seed"])}, kind="verify",
                      label=f"{slug} {record['params']['preset']} seed {record['params']['seed']}")
                 for slug, record in group]
        before = {(slug, r["params"]["preset"], r["params"]["seed"]): r for slug, r in group}

        def show(done, before=before) -> None:
            res = done.record
            if res is None:
                print(f"{done.spec.name}: failed ({done.error})", flush=True)
                return
            old = before[(done.spec.slug, res["params"]["preset"], res["params"]["seed"])]
            print(evidence.verify_report(done.spec.name, old, res), flush=True)

        results = run_many(specs, scheduler=args.scheduler, threads=threads, workers=args.workers,
                           on_done=show, quiet=args.quiet)
        failed += sum(not d.ok for d in results)
    left = evidence.to_verify(root, _slugs(args.slugs), args.preset, args.env)
    for slug, record in left:
        print(f"still not current: {slug} {record['params']['preset']} seed {record['params']['seed']}",
              file=sys.stderr)
    return EXIT_FAILED if failed or left else EXIT_OK


def cmd_open(args: argparse.Namespace) -> int:
    """Copy a paper's page into a scratch folder for editing in Jupyter; the stored page stays as it is."""
    import shutil

    paper = registry.get(args.slug)
    root = registry.project_root()
    folder = Path(args.dir) if args.dir else root / "scratch"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{paper.slug}.ipynb"
    if target.exists() and not args.force:
        raise UsageError(f"{target} exists (your earlier edits); --force replaces it with the stored page")
    shutil.copyfile(paper.notebook(root), target)
    print(f"{target}\nedit and run it in Jupyter (kernel 'Python (companion)'); the stored page "
          f"notebooks/{paper.slug}.ipynb is untouched")
    return EXIT_OK


def _run_specs(args: argparse.Namespace, specs: list[Any], show: Callable[[Any], None],
               failure: Callable[[Any], str]) -> int:
    """Run the tasks on the chosen cluster, name each failed one on stderr; exit 1 if any failed."""
    from companion.executor import run_many

    results = run_many(specs, scheduler=args.scheduler, threads=args.threads, workers=args.workers,
                       on_done=show, quiet=args.quiet)
    failed = [d for d in results if not d.ok]
    for d in failed:
        print(failure(d), file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


def _cluster_options(p: argparse.ArgumentParser, threads: bool = True) -> None:
    """--scheduler, --threads, --workers: where the notebooks of sweep, store and run-all run."""
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="an existing Dask scheduler (default: $COMPANION_SCHEDULER, else an embedded "
                        "local cluster; 'inline' runs the notebooks one after another in this process)")
    if threads:  # verify runs each record at the thread count it was stored with
        p.add_argument("--threads", type=int, help="threads per notebook on a worker (default: "
                                                   "$COMPANION_THREADS, else 1)")
    p.add_argument("--workers", type=int, help="worker processes of the embedded cluster (default: "
                                               "cores / threads)")


def cmd_fetch(args: argparse.Namespace) -> int:
    """Download a paper's public weights and data into data/local/<slug>/ (needs the network)."""
    from companion.fetch import fetch

    for folder in fetch(args.slug):
        print(f"fetched: {folder}")
    return EXIT_OK


def candidate_profile(settings: Sequence[str]) -> dict[str, str]:
    """``NAME=VALUE`` settings of the numerics profile's variables, checked (a candidate profile to measure)."""
    out = {}
    for setting in settings:
        name, sep, value = setting.partition("=")
        if not sep or not value or name not in numerics.PROFILE:
            raise ParamError(f"--candidate: {setting!r}; allowed: NAME=VALUE with NAME one of "
                             f"{', '.join(numerics.PROFILE)}")
        out[name] = value
    return out


def cmd_numerics(args: argparse.Namespace) -> int:
    """Which numerical kernels give other bits here than on the machines stored in the repository."""
    from companion import fingerprint

    if args.threads < 1:
        raise ParamError(f"--threads: {args.threads}; allowed: an integer >= 1")
    if args.audit is not None:
        return audit(registry.get(args.audit))
    if args.reproduce is not None and args.emulate is None:
        raise ParamError("--reproduce needs --emulate CPU (the CPU to reproduce the record on)")
    if args.emulate is not None:
        models = fingerprint.emulated_models()
        if not models:
            raise ParamError(f"--emulate needs {fingerprint.QEMU} on PATH (QEMU 10; Debian: apt-get install -t "
                             "bookworm-backports qemu-user)")
        if args.emulate not in models:
            amd = [m for m in models if m.startswith("EPYC")]
            raise ParamError(f"--emulate: unknown CPU model {args.emulate!r}; allowed: a model of "
                             f"`{fingerprint.QEMU} -cpu help`, e.g. {', '.join(amd[:4] or models[:4])}")
    if args.reproduce is not None:
        return reproduce(registry.get(args.reproduce), args.emulate)
    os.environ.update(candidate_profile(args.candidate))  # no numerical library is loaded yet
    path = registry.project_root() / fingerprint.STORE
    here = fingerprint.machine(args.threads)
    entries = [here] if args.emulate is None else [here, fingerprint.emulated(args.emulate, args.threads)]
    others = [e for e in fingerprint.load(path) if not any(fingerprint.same_setting(e, f) for f in entries)]
    print(fingerprint.report(entries[-1], others + entries[:-1]))
    if args.store:
        for entry in entries:
            fingerprint.store(entry, path)
        print(f"stored the fingerprints of {' and '.join(e['cpu'] for e in entries)} in "
              f"{path.relative_to(registry.project_root())}")
    return EXIT_OK


def audit(paper: registry.Paper) -> int:
    """Run ``paper``'s quick preset here and name the vendor-dependent kernels it calls (exit 1 if any)."""
    from companion import fingerprint

    os.environ["COMPANION_THREADS"] = "1"  # its seeds run inline, in this process, where the audit sees them
    module = paper.module()
    params = module.Params.resolve("quick")
    with fingerprint.vendor_dependent_calls() as seen:
        module.check(module.run(params))
    if not seen:
        print(f"{paper.slug} (quick): calls no kernel whose bits depend on the CPU's vendor")
        return EXIT_OK
    calls = ", ".join(f"{name} x{n}" for name, n in seen.most_common())
    print(f"{paper.slug} (quick): calls kernels whose bits depend on the CPU's vendor: {calls}")
    return EXIT_FAILED


def reproduce(paper: registry.Paper, model: str) -> int:
    """Re-run ``paper``'s stored quick record at seed 0 under QEMU as ``model``; exit 1 unless every number equals."""
    from companion import evidence, fingerprint

    path = evidence.record_path(registry.project_root(), paper.slug, "quick", 0)
    if not path.exists():
        raise ParamError(f"--reproduce: {paper.slug} has no stored quick record at seed 0 ({path})")
    record = json.loads(path.read_text())
    got = fingerprint.claim_numbers(fingerprint.emulated_claims(
        paper.module_name, "quick", 0, int(record["provenance"]["threads"]), model))
    stored = fingerprint.claim_numbers(record["claims"])
    differ = fingerprint.unequal(got, stored)
    where = f"{paper.slug} (quick, seed 0) under {fingerprint.QEMU} as {model}"
    if not differ:
        print(f"{where}: all {len(stored)} numbers of the stored record's claims reproduced bit for bit")
        return EXIT_OK
    print(f"{where}: {len(differ)} of {len(stored)} numbers differ from the stored record: {', '.join(differ[:8])}")
    return EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``companion`` command."""
    parser = _Parser(prog="companion", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="the papers, their stored verdicts and last runs").set_defaults(func=cmd_list)
    params = sub.add_parser("params", help="every parameter of one paper with its presets and range")
    params.add_argument("slug", help="paper slug (see `companion list`)")
    params.set_defaults(func=cmd_params)
    fetch = sub.add_parser("fetch", help="download a paper's public weights and data into data/local/ (network)")
    fetch.add_argument("slug", help="paper slug (see `companion list`)")
    fetch.set_defaults(func=cmd_fetch)
    status = sub.add_parser("status", help="stored records per paper: runtime, current or stale, verdicts")
    status.add_argument("--json", action="store_true", help="print the records as JSON")
    status.set_defaults(func=cmd_status)
    rejudge = sub.add_parser("rejudge", help="re-evaluate stored verdicts from stored values (no compute)")
    rejudge.add_argument("slugs", nargs="*", help="papers to rejudge (default: all)")
    rejudge.add_argument("--dry-run", action="store_true", help="print what would move, write nothing")
    rejudge.set_defaults(func=cmd_rejudge)
    verify = sub.add_parser("verify", help="re-run stale records; re-stamp the ones that reproduce")
    verify.add_argument("slugs", nargs="*", help="papers to verify")
    verify.add_argument("--all", action="store_true", help="every paper")
    verify.add_argument("--preset", choices=PRESET_NAMES, help="only records of this preset")
    verify.add_argument("--env", action="store_true",
                        help="also re-run current records made in another environment (env-drift)")
    verify.add_argument("--quiet", action="store_true", help="no progress display")
    _cluster_options(verify, threads=False)
    verify.set_defaults(func=cmd_verify)
    numerics_ = sub.add_parser("numerics", help="kernel fingerprints: which kernels give other bits here than on "
                               "the machines stored in data/numerics/ (cross-CPU reproducibility)")
    numerics_.add_argument("--store", action="store_true", help="add this machine's fingerprints to the store")
    numerics_.add_argument("--threads", type=int, default=2, help="torch threads (the records use 2)")
    numerics_.add_argument("--audit", metavar="SLUG", help="run a paper's quick preset here and name the kernels "
                           "it calls whose bits depend on the CPU's vendor (exit 1 if any)")
    numerics_.add_argument("--reproduce", metavar="SLUG", help="with --emulate: re-run the paper's stored quick "
                           "record at seed 0 under the emulated CPU and compare every claim number (slow: QEMU)")
    numerics_.add_argument("--emulate", metavar="CPU", help="also run the probes under QEMU as this CPU model "
                           "(e.g. EPYC-Rome): a probe that differs depends on the CPU's vendor")
    numerics_.add_argument("--candidate", action="append", default=[], metavar="NAME=VALUE",
                           help="measure a candidate profile: this profile variable set to VALUE instead "
                                "(repeatable; e.g. MKL_CBWR=AVX2); compared only with entries of the same profile")
    numerics_.set_defaults(func=cmd_numerics)
    open_ = sub.add_parser("open", help="copy a page into scratch/ for editing in Jupyter")
    open_.add_argument("slug", help="paper slug (see `companion list`)")
    open_.add_argument("--dir", help="the scratch folder (default: scratch/ in the project)")
    open_.add_argument("--force", action="store_true", help="replace an earlier copy")
    open_.set_defaults(func=cmd_open)
    store = sub.add_parser("store", help="run and keep stored records (make notebooks)")
    store.add_argument("slugs", nargs="*", help="papers to store (default: all)")
    store.add_argument("--preset", default="quick", choices=PRESET_NAMES)
    store.add_argument("--seed", help="base seed, or several comma-separated (default: the preset's)")
    store.add_argument("--evidence", action="store_true",
                       help="every record of the robustness table (quick seeds 0, 100, 1000 and full seed 0)")
    store.add_argument("--force", action="store_true", help="rerun even when a cached run matches")
    store.add_argument("--quiet", action="store_true", help="no progress display")
    _cluster_options(store)
    store.set_defaults(func=cmd_store)
    run_all = sub.add_parser("run-all", help="every paper's notebook at one preset, in parallel")
    run_all.add_argument("--preset", default="quick", choices=PRESET_NAMES)
    run_all.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                         help="override a parameter of every paper (e.g. seeds=2)")
    run_all.add_argument("--force", action="store_true", help="rerun even when a cached run matches")
    run_all.add_argument("--quiet", action="store_true", help="no progress display")
    _cluster_options(run_all)
    run_all.set_defaults(func=cmd_run_all)
    for name, func, helptext in (("run", cmd_run, "run one paper's notebook"),
                                 ("sweep", cmd_sweep, "sweep one parameter over a list of values")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("slug", help="paper slug (see `companion list`)")
        p.add_argument("--preset", default="quick", choices=PRESET_NAMES)
        p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                       help="override a parameter (sweep: NAME=v1,v2,...)")
        p.add_argument("--force", action="store_true", help="rerun even when a cached run matches")
        p.add_argument("--out", help="write into this folder instead of runs/SLUG/RUN-ID")
        p.add_argument("--quiet", action="store_true", help="no progress display")
        p.set_defaults(func=func)
        if name == "run":
            p.add_argument("--log-output", action="store_true", help="stream cell output to the log")
        else:
            p.add_argument("--seeds", type=int, help="number of seeds per grid point")
            _cluster_options(p)
    return parser


def _terminate_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, dispatch; usage errors exit 2, disk errors 1, interrupts 130, one line each."""
    import faulthandler
    import signal

    numerics.apply()  # before a kernel, a Dask worker or a process pool starts: they inherit it
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread and sys.__stderr__ is not None:  # `kill -USR1 PID`: where a stuck command is, every thread
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    previous = signal.signal(signal.SIGTERM, _terminate_as_interrupt) if main_thread else None
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    """Parse and dispatch, each failure as one line and its exit code (SIGTERM reads as Ctrl-C)."""
    try:
        from companion.evidence import UncommittedCode
        from companion.executor import SchedulerError
        from companion.fetch import FetchError

        args = build_parser().parse_args(argv)
        return args.func(args)
    except KeyboardInterrupt as err:  # first: an interrupt during the imports leaves their names unbound
        from companion.runner import Interrupted

        where = f"; recorded in {err}" if isinstance(err, Interrupted) else ""
        print(f"companion: interrupted{where}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (UsageError, ParamError, registry.UnknownPaper, UncommittedCode, SchedulerError, FetchError) as err:
        print(f"companion: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as err:
        print(f"companion: error: missing dependency {err.name!r}; run `make install`", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # the reader (e.g. `| head`) closed early: not an error; keep Python's exit-time flush quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as err:
        print(f"companion: error: {err.strerror or err} ({err.filename or 'no file'})", file=sys.stderr)
        return EXIT_FAILED
