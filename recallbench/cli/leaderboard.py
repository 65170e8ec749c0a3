"""``recallbench leaderboard``: run a suite, validate and verify submissions, render tables.

    recallbench leaderboard run --suite leaderboards/cpu-small --adapter NAME --store STORE
                                [--set model.key=value ...] [--limit N]
    recallbench leaderboard validate FILE...        (or a suite folder: all its submissions)
    recallbench leaderboard verify FILE --sample K [--device cpu]
    recallbench leaderboard render SUITE_DIR... [--check] [--no-plot]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from recallbench.api.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)

    p = sub.add_parser("run", help="run a suite's grid for one adapter into a result store")
    p.add_argument("--suite", required=True, help="suite folder (holds suite.yaml)")
    p.add_argument("--adapter", required=True, help="adapter name (see `recallbench list adapters`)")
    p.add_argument("--store", required=True, help="result store folder (results.jsonl is appended)")
    p.add_argument("--set", action="append", metavar="model.KEY=VALUE",
                   help="adapter settings the suite leaves open (model.* only); repeatable")
    p.add_argument("--limit", type=int, help="run at most this many missing points")

    p = sub.add_parser("validate", help="check submissions: schema, suite, hashes, Fano bound")
    p.add_argument("files", nargs="+", help="submission .yaml files or suite folders")
    p.add_argument("--no-scores", action="store_true",
                   help="skip recomputing S_eff and capacity from the counts")

    p = sub.add_parser("verify", help="re-run sampled points of a submission")
    p.add_argument("file", help="submission .yaml")
    p.add_argument("--sample", type=int, default=2, metavar="K", help="points to re-run (default 2)")
    p.add_argument("--device", help="override train.device for the re-runs")

    p = sub.add_parser("render", help="write a suite's README.md table and plot")
    p.add_argument("suites", nargs="+", help="suite folders")
    p.add_argument("--check", action="store_true", help="exit 1 if README.md is stale; write nothing")
    p.add_argument("--no-plot", action="store_true", help="do not write the PNG")


def _model_sets(items: list[str] | None) -> dict:
    from recallbench.api.config import apply_overrides

    raw = apply_overrides({}, items or [])
    extra = set(raw) - {"model"}
    if extra:
        raise ConfigError(f"--set: only model.* settings may be given (the suite fixes "
                          f"{', '.join(sorted(extra))})")
    return raw.get("model", {})


def command(args) -> int:
    from recallbench import leaderboard as lb

    if args.action == "run":
        suite = lb.load_suite(args.suite)
        fixed = set()
        for b in suite.budgets:
            fixed |= set(b["model"])
        extra = _model_sets(args.set)
        clash = sorted(set(extra) & (fixed | {"adapter"}))
        if clash:
            raise ConfigError(f"--set model.{clash[0]}: fixed by suite {suite.name}")
        counts = lb.run_suite(suite, args.adapter, args.store, model_extra=extra, limit=args.limit,
                              log=lambda m: print(m, flush=True))
        print(f"done: {counts['ran']} ran, {counts['failed']} failed, {counts['skipped']} skipped "
              f"(store {args.store})")
        return 1 if counts["failed"] else 0

    if args.action == "validate":
        files: list[Path] = []
        for f in args.files:
            p = Path(f)
            if p.is_dir():
                found = lb.submission_files(p)
                if not found:
                    raise ConfigError(f"{p}: no submissions in {p / lb.SUBMISSIONS_DIR}")
                files += found
            else:
                files.append(p)
        bad = 0
        for f in files:
            try:
                sub, suite, notes = lb.validate_file(f, check_scores=not args.no_scores)
            except ConfigError as exc:
                print(f"INVALID {exc}")
                bad += 1
                continue
            n = sum(len(b["points"]) for b in sub["budgets"])
            print(f"ok {f}: {sub['model']['name']} ({sub['model']['adapter']}) on {suite.name}, "
                  f"{n} points" + "".join(f"; note: {x}" for x in notes))
        if bad:
            raise ConfigError(f"{bad} of {len(files)} submission(s) invalid")
        return 0

    if args.action == "verify":
        if args.sample < 1:
            raise ConfigError("--sample must be >= 1")
        sub, suite, _ = lb.validate_file(args.file)
        rows = lb.verify(sub, suite, args.sample, device=args.device, log=lambda m: print(m, flush=True))
        bad = [r for r in rows if not r["ok"]]
        if bad:
            print(f"verify FAILED: {len(bad)} of {len(rows)} re-run point(s) disagree beyond "
                  f"the suite's tolerance {suite.tolerance}")
            return 1
        print(f"verify ok: {len(rows)} re-run point(s) agree within {suite.tolerance}")
        return 0

    if args.action == "render":
        stale = 0
        for s in args.suites:
            fresh, msgs = lb.render(s, check=args.check, plot=not args.no_plot)
            for m in msgs:
                print(m)
            stale += not fresh
            if args.check and fresh:
                print(f"{s}: README.md is up to date")
        return 1 if stale else 0
    raise ConfigError(f"unknown action {args.action!r}")
