"""``recallbench leaderboard``: run a suite, validate and verify submissions, render tables.

    recallbench leaderboard run --suite leaderboards/cpu-v2 --adapter NAME --store STORE
                                [--set model.key=value ...] [--limit N]
                                [--executor inprocess|processes] [--workers K]
                                [--time-budget SECONDS] [--point-timeout SECONDS]
    recallbench leaderboard run --suite CAPACITY_SUITE --adapter NAME --store STORE
                                [--shape TERM=V] [--executor ray [--address ADDR]]
    recallbench leaderboard validate FILE...        (or a suite folder: all its submissions)
    recallbench leaderboard verify FILE --sample K [--seed N] [--device cpu]
    recallbench leaderboard render SUITE_DIR... [--check] [--no-plot]
    recallbench leaderboard states SUITE_DIR --out DIR [--view mean|best]
"""
from __future__ import annotations

import argparse
import os

from recallbench.api.errors import ConfigError
from recallbench.cli import leaderboard_reseed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)

    p = sub.add_parser("run", help="run a suite's grid for one adapter into a result store")
    p.add_argument("--suite", required=True, help="suite folder (holds suite.yaml)")
    p.add_argument("--adapter", required=True, help="adapter name (see `recallbench list adapters`)")
    p.add_argument("--store", required=True, help="result store folder (results.jsonl is appended)")
    p.add_argument("--set", action="append", metavar="model.KEY=VALUE",
                   help="adapter settings the suite leaves open (model.* only); repeatable")
    p.add_argument("--shape", metavar="TERM=V",
                   help="a capacity suite of card method 2: the adapter at another shape of "
                        "each budget's state S (for example key=8: the settings that keep S, "
                        "as `recallbench capacity --shapes` plans them); submit with the same "
                        "--shape")
    p.add_argument("--limit", type=int, help="run at most this many missing points (>= 1)")
    p.add_argument("--executor", choices=["inprocess", "processes", "ray"], default="inprocess",
                   help="inprocess: one point after another here (default); processes: "
                        "--workers local worker processes; ray (a capacity suite): each "
                        "card's runs as tasks on a Ray cluster (--address), a lost node's "
                        "runs retried on the nodes left")
    p.add_argument("--address", help="--executor ray: the cluster's head, host:port (ray start "
                   "--head --port) or auto (default: RAY_ADDRESS if set, else a local "
                   "instance of --workers CPUs)")
    p.add_argument("--workers", type=int, metavar="K",
                   help="worker processes (--executor processes; default: the CPUs). On a "
                        "CPU suite at most the CPUs; on a cuda suite they share the GPU and "
                        "may number up to 4 per CPU (at most 32). A capacity suite trains "
                        "each cell's seeds in K processes (default 1: the card's CPU "
                        "budget counts every run's CPU time, which runs side by side can "
                        "raise)")
    p.add_argument("--budget", action="append", metavar="NAME",
                   help="a capacity suite: run only this budget's card (repeatable; default: "
                        "every budget); a submission still needs them all")
    p.add_argument("--refuse-stale", action="store_true",
                   help="a capacity suite: stop (exit 2, nothing trained) when the store holds "
                        "runs of its cards made by other adapter source than the one here; by "
                        "default they are reused, with one warning line per run")
    p.add_argument("--from-submission", metavar="FILE",
                   help="a method-2 capacity suite: first put the runs of this submission "
                        "(the adapter's, checked as validate checks it) into --store, so the "
                        "search trains only what its cards still lack")
    p.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="start a point on a free worker only while the time left of this many "
                        "seconds holds the longest a point has taken so far (the first always "
                        "runs); the same command continues where it stopped")
    from recallbench.runs.watchdog import HELP

    p.add_argument("--point-timeout", type=float, metavar="SECONDS", help=HELP)
    p.add_argument("--dry-run", action="store_true",
                   help="list the points left and an ETA from step times measured here "
                        "(two short runs per budget); train nothing")

    p = sub.add_parser("validate", help="check submissions: schema, suite, hashes, Fano bound")
    p.add_argument("files", nargs="+", help="submission .yaml files or suite folders")
    p.add_argument("--no-scores", action="store_true",
                   help="skip recomputing S_eff and capacity from the counts")

    p = sub.add_parser("verify", help="re-run sampled points of a submission")
    p.add_argument("file", help="submission .yaml")
    p.add_argument("--sample", type=int, default=2, metavar="K", help="points to re-run (default 2)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="draw the points with this seed, to repeat a verification (default: "
                        "a fresh seed from the system's randomness, printed)")
    p.add_argument("--device", help="override train.device for the re-runs")
    p.add_argument("--reseed", action="store_true",
                   help="a method-2 capacity submission: re-run each card with seeds disjoint "
                        "from the submission's and say whether the N50 intervals agree")
    p.add_argument("--seeds", metavar="S,S", help="with --reseed: the new seeds (default: as "
                   "many as the suite's, the smallest not among them)")
    p.add_argument("--store", metavar="DIR", help="with --reseed (required): the result store "
                   "the re-seeded runs go to (an interrupted re-seeding resumes from it)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="with --reseed: worker processes (default 1)")
    p.add_argument("--budget", action="append", metavar="NAME",
                   help="with --reseed: re-run only this budget's card (repeatable; default "
                        "every card); the file --write makes then names the budgets re-run")
    p.add_argument("--from-reseeding", metavar="FILE",
                   help="with --reseed: first put the runs of this earlier re-seeding of the "
                        "model into --store (its seeds are the default --seeds), so only what "
                        "the cards still lack is trained")
    p.add_argument("--write", metavar="FILE", help="with --reseed: also write the re-seeded "
                   "cards to FILE (not there yet), a re-seeding the board shows beside the "
                   "submission when FILE is <suite>/reseeds/NAME.yaml")

    p = sub.add_parser("render", help="write a suite's README.md table, plot and web page "
                       "(index.html; refused, writing nothing, when any submission is invalid)")
    p.add_argument("suites", nargs="+", help="suite folders")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if README.md or index.html is stale; write nothing")
    p.add_argument("--no-plot", action="store_true",
                   help="do not write the PNG (the page is then written without its figure)")

    p = sub.add_parser("states", help="write the effective-state table of a suite's submissions "
                       "(states.json, README.md, states.png; refused when any is invalid)")
    p.add_argument("suite", help="suite folder")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write into")
    p.add_argument("--view", choices=["mean", "best"], default="mean",
                   help="mean over seeds (default, as the leaderboard) or best of seeds")


def _model_sets(items: list[str] | None) -> dict:
    from recallbench.api.config import apply_overrides

    raw = apply_overrides({}, items or [])
    extra = set(raw) - {"model"}
    if extra:
        raise ConfigError(f"--set: only model.* settings may be given (the suite fixes "
                          f"{', '.join(sorted(extra))})")
    return raw.get("model", {})


def _check_run_settings(suite, adapter: str, extra: dict) -> None:
    """The suite's first point with these settings resolves: bad values are one line now."""
    from recallbench.api.config import resolve
    from recallbench.leaderboard.checks import short

    try:
        first = (suite.points() or [{"budget": suite.budgets[0]["name"], "num_facts": 2,
                                     "seed": suite.seeds[0]}])[0]
        resolve(suite.point_config(adapter, first, extra))
    except ConfigError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        raise ConfigError(f"--set: {short(extra, 120)} cannot be used ({type(exc).__name__}: "
                          f"{str(exc)[:100]})") from None


def _check_run_flags(args) -> None:
    """Flags that are wrong whatever the suite: one line before anything is read."""
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit {args.limit}: must be >= 1")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: must be >= 1")
    if args.address is not None and args.executor != "ray":
        raise ConfigError("--address is for --executor ray")
    if args.from_submission is not None and args.dry_run:
        raise ConfigError("--from-submission with --dry-run is not allowed: --dry-run writes "
                          "nothing; import the runs first (without --dry-run)")
    if args.shape is not None and args.set:
        raise ConfigError("--shape with --set is not allowed: a shape's settings are the ones "
                          "that keep each budget's S")
    from recallbench.runs.budget import check_budget

    check_budget(args.time_budget)
    from recallbench.runs.watchdog import check_point_timeout

    check_point_timeout(args.point_timeout, args.executor)


def _suite_to_run(args):
    """The suite, and the model settings of --set: refused in one line when the suite is
    retired, a setting is one the suite fixes, or the first point does not resolve."""
    from recallbench import leaderboard as lb

    suite = lb.load_suite(args.suite)
    if suite.retired:
        raise ConfigError(f"suite {suite.name} is retired, no new runs: {suite.retired}")
    fixed = set()
    for b in suite.budgets:
        fixed |= set(b["model"])
    extra = _model_sets(args.set)
    clash = sorted(set(extra) & (fixed | {"adapter"}))
    if clash:
        raise ConfigError(f"--set model.{clash[0]}: fixed by suite {suite.name}")
    _check_run_settings(suite, args.adapter, extra)
    if str(suite.data.get("device") or "").startswith("cuda"):
        from recallbench.harness.prepare import pick_device

        pick_device(suite.data["device"])  # no GPU here: one line, before any worker starts
    return suite, extra


def _run(args) -> int:
    import sys

    from recallbench import leaderboard as lb
    from recallbench.runs.interrupt import Terminated, sigterm_unwinds, stopped

    _check_run_flags(args)
    suite, extra = _suite_to_run(args)
    if suite.is_capacity:
        return _run_capacity(args, suite, extra)
    _shape(args, suite)  # a grid suite: --shape is refused
    if args.from_submission is not None:
        raise ConfigError(f"--from-submission is for a method-2 capacity suite; {suite.name} "
                          "is a grid suite")
    if args.budget:
        raise ConfigError(f"--budget is for a capacity suite; {suite.name} is a grid suite "
                          "(its points run together)")
    if args.executor == "ray":
        raise ConfigError(f"--executor ray is for a capacity suite; {suite.name} is a grid "
                          "suite: inprocess or processes (a grid on Ray: `recallbench sweep "
                          "--executor ray`)")
    if args.dry_run:
        workers = args.workers or ((os.cpu_count() or 1) if args.executor == "processes" else 1)
        lb.plan(suite, args.adapter, args.store, model_extra=extra, workers=workers)
        return 0
    notify = lambda m: print(f"recallbench: {m}", file=sys.stderr, flush=True)  # noqa: E731
    executor = lb.suite_executor(suite, args.executor, args.workers, notify=notify,
                                 point_timeout=args.point_timeout)
    try:
        with sigterm_unwinds():  # SIGTERM unwinds like Ctrl-C: the workers stop, records stay
            counts = lb.run_suite(suite, args.adapter, args.store, model_extra=extra,
                                  limit=args.limit, executor=executor,
                                  time_budget=args.time_budget, log=lambda m: print(m, flush=True))
    except (KeyboardInterrupt, Terminated) as exc:
        line, status = stopped(exc, args.store)
        print(line, file=sys.stderr, flush=True)
        return status
    finally:
        executor.close()
    left = (f", {counts['left']} left: run the same command again to continue"
            if counts["left"] else "")
    print(f"done: {counts['ran']} ran, {counts['failed']} failed, {counts['skipped']} skipped "
          f"(store {args.store}){left}")
    return 1 if counts["failed"] else 0


def _shape(args, suite) -> dict | None:
    """--shape parsed, or None; refused in one line off a method-2 suite."""
    if args.shape is None:
        return None
    from recallbench.leaderboard.capacity import shape_entry

    shape_entry.check_suite(suite, "--shape")
    return shape_entry.parse(args.shape)


def _run_capacity(args, suite, extra) -> int:
    """A capacity suite: each budget's search (``capacity_suite.run_capacity_suite``)."""
    import sys

    from recallbench.leaderboard.capacity.suite import run_capacity_suite
    from recallbench.runs.interrupt import Terminated, sigterm_unwinds, stopped

    if args.limit is not None or args.time_budget is not None:
        flag = "--limit" if args.limit is not None else "--time-budget"
        key = ("work_budget_mtok" if suite.capacity.get("method", 1) == 2
               else "cpu_budget_min")
        raise ConfigError(f"{flag} is not for a capacity suite ({suite.name}): its search "
                          f"has its own budget per card (suite.yaml capacity.{key}); "
                          "--dry-run gives the ETA")
    shape = _shape(args, suite)
    if shape:
        from recallbench.leaderboard.capacity.shape_entry import describe
        from recallbench.leaderboard.capacity.suite import chosen

        for b in chosen(suite, args.budget):
            print(describe(suite, args.adapter, b, shape), flush=True)
    workers = args.workers or 1
    if not 1 <= workers <= (os.cpu_count() or 1):
        raise ConfigError(f"--workers {workers} is not allowed: must be in "
                          f"[1, {os.cpu_count() or 1}]"
                          + (" (the local Ray instance's CPUs)" if args.executor == "ray" else ""))
    if args.dry_run:
        from recallbench.leaderboard.capacity.suite import plan_capacity_suite

        plan_capacity_suite(suite, args.adapter, args.store, model_extra=extra, workers=workers,
                            log=lambda m: print(m, flush=True), budgets=args.budget,
                            shape=shape)
        return 0
    if args.from_submission is not None:
        _import(args, suite, shape)
    executor = None
    if args.executor == "ray":  # one connection for every card; a card's runs are its tasks
        from recallbench.runs.executors import make_executor

        executor = make_executor("ray", workers=workers, address=args.address, threads=1)
        print(f"runs on {executor.name}, {executor.parallel} at once", flush=True)
    try:
        with sigterm_unwinds():
            cards = run_capacity_suite(suite, args.adapter, args.store, model_extra=extra,
                                       shape=shape, workers=workers,
                                       log=lambda m: print(m, flush=True),
                                       refuse_stale=args.refuse_stale, executor=executor,
                                       budgets=args.budget)
    except (KeyboardInterrupt, Terminated) as exc:
        line, status = stopped(exc, args.store)
        print(line, file=sys.stderr, flush=True)
        return status
    finally:
        if executor is not None:
            executor.close()
    rest = [b["name"] for b in suite.budgets if b["name"] not in cards]
    print("done: " + "; ".join(f"{k} {v['status']}" for k, v in cards.items())
          + f" (store {args.store}; "
          + (f"not run here: {', '.join(rest)} (`--budget NAME` searches it, or replays it "
             "when the store holds its card); `recallbench submit` needs every budget)"
             if rest else "`recallbench submit` writes the submission)"))
    return 0


def _import(args, suite, shape) -> None:
    """--from-submission: the file's runs appended to --store (``capacity.resume``)."""
    from recallbench.leaderboard.capacity.resume import checked, import_runs

    sub = checked(args.from_submission, suite)
    added, held = import_runs(sub, args.adapter, args.store, shape)
    print(f"from {args.from_submission}: {added} run(s) put into {args.store}"
          + (f", {held} already there" if held else "") + "; the search trains only what "
          "its cards still lack", flush=True)


def _validate(args) -> int:
    from recallbench import leaderboard as lb

    entries = lb.check_files(args.files, check_scores=not args.no_scores)
    for e in entries:
        if e.error:
            print(f"INVALID {e.error}")
            continue
        n = sum(len(b["points"]) for b in e.sub["budgets"])
        print(f"ok {e.path}: {e.sub['model']['name']} ({e.sub['model']['adapter']}) on "
              f"{e.sub['suite']}, {n} points" + "".join(f"; note: {x}" for x in e.notes))
    bad = [e for e in entries if e.error]
    bad_reseeds = leaderboard_reseed.validate_reseeds(args.files, entries,
                                                        check_scores=not args.no_scores)
    if bad:
        raise ConfigError(f"{len(bad)} of {len(entries)} submission(s) invalid; first: {bad[0].error}")
    if bad_reseeds:
        raise ConfigError(f"{len(bad_reseeds)} re-seeding(s) invalid; first: {bad_reseeds[0]}")
    return 0


def _render(args) -> int:
    from recallbench import leaderboard as lb

    stale = 0
    for s in args.suites:
        fresh, msgs = lb.render(s, check=args.check, plot=not args.no_plot)
        for m in msgs:
            print(m)
        stale += not fresh
        if args.check and fresh:
            print(f"{s}: README.md and index.html are up to date")
    return 1 if stale else 0


def _states(args) -> int:
    from recallbench.leaderboard.states import write_states

    cmd = f"recallbench leaderboard states {args.suite} --out {args.out} --view {args.view}"
    for m in write_states(args.suite, args.out, args.view, command=cmd):
        print(m)
    return 0


def command(args) -> int:
    return {"run": _run, "validate": _validate, "verify": leaderboard_reseed.verify_command,
            "render": _render, "states": _states}[args.action](args)
