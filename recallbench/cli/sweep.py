"""``recallbench sweep``: run a grid of configs into a resumable result store.

    recallbench sweep SWEEP.yaml --store DIR [--shard I/N] [--executor inprocess|processes|ray]
                      [--workers K] [--address ADDR] [--threads-per-worker T] [--ensemble K]
                      [--gpus-per-worker G] [--workers-per-gpu M] [--compile [MODE]]
                      [--point-timeout SECONDS]
                      [--dry-run [--step-ms MS [--speedup X]]] [--limit N]
                      [--time-budget SECONDS] [--no-retry-failed] [--max-points N]
    recallbench sweep SWEEP.yaml --store DIR --adaptive [--tol 0.1] [--max-runs 40]
                      [--stop interval|stable|either]
    recallbench sweep --merge SRC [SRC ...] --store DST [--on-conflict refuse|first]

``--adaptive`` runs a theory-guided search over the sweep's D × N cells instead of all of
them (:mod:`recallbench.runs.adaptive_sweep`); its runs go through the store the same way.

A rerun skips the points the store already holds as ok (failed ones are retried unless
``--no-retry-failed``).  ``--time-budget SECONDS`` starts a point on each free worker only
while the time left holds the longest a point has taken so far (:mod:`recallbench.runs.budget`), so a long grid runs as repeated calls
of the same command; the last line says ``all done`` or how many points are left.
``--dry-run --step-ms MS`` also prints how many such calls the points left need (an
estimate from their step caps).  Exit status: 0 when every point ran ok (or was done
before, or --limit left the rest), 1 when some point failed (it is recorded with its
reason; it takes precedence), 3 when the time budget stopped the sweep with points left,
2 for a user error (nothing run), 130 after Ctrl-C and 143 after SIGTERM (the workers are
stopped; finished points are kept).  A record the store cannot take (a full disk) stops the
sweep with status 1 and one line naming the file it was saved to and the --merge command.

This module parses and checks the command line and prints; what the sweep decides about
its points before it runs them (stale results, unavailable adapters, the shared GPU, the
points left) is :mod:`recallbench.runs.sweep_policy`.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter

from recallbench.api.errors import ConfigError
from recallbench.runs.budget import DEFAULT_CHUNK_S, check_budget, ending
from recallbench.runs import watchdog
from recallbench.runs.interrupt import Terminated, sigterm_unwinds, stopped
from recallbench.runs.sweep import MAX_POINTS
from recallbench.runs.sweep_policy import (MAX_STALE_LINES, check_available, check_stale,
                                           shared_gpu, store_state)

#: a --dry-run of a larger grid counts it instead of resolving every point
DRY_RUN_LIST = 2_000
#: the points such a --dry-run shows
DRY_RUN_SHOW = 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ("examples:\n"
                "  recallbench sweep sweeps/dn_mqar_linear.yaml --store stores/dn_mqar --dry-run\n"
                "  recallbench sweep sweeps/dn_mqar_linear.yaml --store stores/dn_mqar "
                "--executor processes --workers 2\n"
                "  recallbench sweep SWEEP.yaml --store shared/st --shard 3/8   "
                "# one job of an array of 8\n"
                "  recallbench sweep sweeps/layers_mqar.yaml --store stores/layers "
                "--time-budget 540   # ten-minute calls; exit 3: run it again\n"
                "  recallbench sweep sweeps/layers_mqar.yaml --store stores/layers --dry-run "
                "--step-ms 9   # how many such calls\n"
                "  recallbench sweep sweeps/cpu/dn_mqar.yaml --store stores/dn_adaptive --adaptive\n"
                "  recallbench sweep --merge other_store more.jsonl --store stores/dn_mqar")
    p.add_argument("sweep", nargs="?", help="sweep YAML: base (a run config), axes, zip, skip, where")
    p.add_argument("--store", help="result store directory (created if missing)")
    p.add_argument("--shard", metavar="I/N", help="run only shard I of N (0-based); each shard "
                   "writes its own file in the store, so shards may run concurrently")
    p.add_argument("--executor", choices=["inprocess", "processes", "ray"], default="inprocess",
                   help="where points run (default: inprocess)")
    p.add_argument("--workers", type=int, metavar="K",
                   help="worker processes (processes; default: CPU count) or local Ray CPUs / T")
    p.add_argument("--address", help="Ray cluster: host:port of its head (ray start --head "
                   "--port), or auto for the one on this machine (default: RAY_ADDRESS if set, "
                   "else a local instance of our own)")
    p.add_argument("--gpus-per-worker", type=float, metavar="G",
                   help="ray: GPUs per task; fractions share one GPU (0.25: four points on it)")
    p.add_argument("--threads-per-worker", type=int, metavar="T",
                   help="torch threads per worker (default 1 for processes and ray; "
                        "inprocess: the run's own choice)")
    p.add_argument("--ensemble", type=int, metavar="K",
                   help="train up to K points of the same shape as one batched model "
                        "(needs recallbench.harness.ensemble)")
    p.add_argument("--compile", nargs="?", const="default", metavar="MODE",
                   help="--ensemble: torch.compile the batched step (MODE: default, "
                        "reduce-overhead, max-autotune or aot_eager; default: default); it "
                        "trains uncompiled, after one warning line, where compiling fails")
    p.add_argument("--workers-per-gpu", type=int, metavar="M",
                   help="processes, runs on a GPU: the workers sharing it are bounded by M "
                        "(default 16, at most 64) and by its free memory, not by the CPUs")
    p.add_argument("--point-timeout", type=float, metavar="SECONDS", help=watchdog.HELP)
    p.add_argument("--limit", type=int, metavar="N", help="run at most N of the pending points")
    p.add_argument("--dry-run", action="store_true",
                   help="list the points and skip counts (and their state in --store); run nothing")
    p.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="start a point on a free worker only while the time left of this many "
                        "seconds holds the longest a point has taken so far (the first always "
                        "runs); exit 3 with points left: the same command continues from the "
                        "store")
    p.add_argument("--step-ms", type=float, metavar="MS",
                   help="--dry-run: estimate the calls of --time-budget seconds (default "
                        f"{DEFAULT_CHUNK_S:g}) the points left need, at MS milliseconds per "
                        "training step of one layer (measured on the target machine)")
    p.add_argument("--speedup", type=float, default=1.0, metavar="X",
                   help="--step-ms: the points run X times faster than one after another "
                        "(a batched ensemble's or shared GPU's measured ratio; default 1)")
    p.add_argument("--no-retry-failed", dest="retry_failed", action="store_false",
                   help="do not rerun points recorded as failed")
    p.add_argument("--refuse-stale", action="store_true",
                   help="stop (exit 2, nothing run) when the store holds results of this sweep's "
                        "configs made by other adapter source than the installed one; by "
                        "default they are kept, not rerun, with one warning line per config")
    p.add_argument("--adaptive", action="store_true",
                   help="theory-guided search over the sweep's D x N cells: place runs near the "
                        "predicted phase boundary until a is pinned down (see --tol, --stop)")
    p.add_argument("--tol", type=float, default=0.10,
                   help="--adaptive: relative precision of a to stop at (default 0.10)")
    p.add_argument("--max-runs", type=int, default=40, metavar="N",
                   help="--adaptive: run at most N cells, each with all its seeds (default 40)")
    p.add_argument("--stop", choices=["interval", "stable", "either"], default="either",
                   help="--adaptive: stop when a's 95%% CI is within ±tol (interval), when three "
                        "consecutive fits agree within tol/2 (stable), or at the first of the two "
                        "(either, the default)")
    p.add_argument("--merge", nargs="+", metavar="SRC",
                   help="merge these stores (directories or .jsonl files) into --store and exit")
    p.add_argument("--on-conflict", choices=["refuse", "first"], default="refuse",
                   help="--merge: when two stores hold ok records of one config with different "
                        "results, refuse and list them (default), or keep the first listed "
                        "(--store's own, then the sources in order)")
    p.add_argument("--max-points", type=int, metavar="N", default=MAX_POINTS,
                   help=f"refuse a grid of more than N cells, counted before anything is built "
                        f"(default {MAX_POINTS:,})")


def _skips(skipped: Counter) -> str:
    if not skipped:
        return "none"
    return ", ".join(f"{n} by {rule}" for rule, n in skipped.items())


def command(args) -> int:
    from recallbench.runs.sweep import load_sweep, parse_shard, shard_points

    if args.merge:
        return _merge(args)
    _check_arguments(args)
    shard = parse_shard(args.shard)
    sweep = load_sweep(args.sweep)
    size = sweep.check_size(args.max_points)  # counted, not built: a huge grid stops here
    if args.dry_run and size > DRY_RUN_LIST:
        return _dry_run_counts(args, sweep, size)
    if size > DRY_RUN_LIST:
        print(f"sweep {sweep.name}: resolving {size:,} cells...", flush=True)
    exp = sweep.expand(None)  # every point resolved: a bad value stops here, before any work
    points = shard_points(exp.points, shard)
    dup = f", {exp.duplicates} duplicate cells" if exp.duplicates else ""
    where = f"; shard {shard[0]}/{shard[1]}: {len(points)} points" if shard else ""
    header = (f"sweep {sweep.name}: grid {exp.grid_size} cells, {len(exp.points)} points "
              f"(skipped: {_skips(exp.skipped)}{dup}){where}; ")
    if args.dry_run:
        return _dry_run(args, points, header)
    if not args.store:
        raise ConfigError("sweep needs --store DIR (where results go), or --dry-run")
    if args.ensemble:
        from recallbench.runs.grid_sweep import load_ensemble

        load_ensemble()  # a clear error now, not after the store is opened
    check_available(points, args.executor)
    if args.adaptive:
        from recallbench.runs.adaptive_sweep import candidates

        candidates(points)  # a sweep the search cannot use stops here, before any work
    from recallbench.runs.executors import make_executor

    executor = make_executor(args.executor, workers=args.workers, address=args.address,
                             threads=args.threads_per_worker, ensemble=bool(args.ensemble),
                             gpus=args.gpus_per_worker, notify=_notify, compile=args.compile,
                             gpu=shared_gpu(args.executor, points, args.ensemble,
                                            args.workers_per_gpu),
                             point_timeout=args.point_timeout)
    try:
        return _run(args, points, executor, shard, header)
    finally:
        executor.close()


def _merge(args) -> int:
    from recallbench.runs.merge import MergeConflicts, merge_stores
    from recallbench.runs.store import read_store

    if args.sweep:
        raise ConfigError("--merge takes stores, not a sweep file; "
                          "use: recallbench sweep --merge SRC... --store DST")
    if not args.store:
        raise ConfigError("--merge needs --store DST (the store to merge into)")
    try:
        c = merge_stores(args.merge, args.store, on_conflict=args.on_conflict)
    except MergeConflicts as exc:
        for line in exc.lines():
            print(f"recallbench: {line}", file=sys.stderr)
        raise
    total = read_store(args.store)
    kept = (f"; {len(c['conflicts'])} conflicting config hashes: the first listed kept "
            f"(--on-conflict first)" if c["conflicts"] else "")
    print(f"merged {c['sources']} sources ({c['read']} records, {c['duplicates']} duplicates "
          f"within them) into {args.store}: {c['added']} added, {c['already']} already there"
          f"{kept}; the store now holds {len(total.records)} points "
          f"({len(total.hashes('ok'))} ok, {len(total.hashes('failed'))} failed)")
    return 0


def _check_arguments(args) -> None:
    """Flags that are wrong whatever the sweep: ConfigError before anything is read."""
    if not args.sweep:
        raise ConfigError("sweep needs a SWEEP.yaml (or --merge SRC... --store DST)")
    for flag, value in (("--limit", args.limit), ("--ensemble", args.ensemble),
                        ("--max-points", args.max_points),
                        ("--workers", args.workers), ("--threads-per-worker", args.threads_per_worker)):
        if value is not None and value < (0 if flag == "--limit" else 1):
            raise ConfigError(f"{flag} {value} is not allowed: must be >= "
                              f"{0 if flag == '--limit' else 1}")
    for flag, value in (("--address", args.address), ("--gpus-per-worker", args.gpus_per_worker)):
        if value is not None and args.executor != "ray":
            raise ConfigError(f"{flag} is for --executor ray")
    _check_budget_flags(args)
    watchdog.check_point_timeout(args.point_timeout, args.executor)
    if args.workers_per_gpu is not None and args.executor != "processes":
        raise ConfigError("--workers-per-gpu is for --executor processes")
    if args.compile is not None:
        from recallbench.harness.ensemble.compile import check_mode

        check_mode(args.compile)
        if not args.ensemble or args.executor == "ray":
            raise ConfigError("--compile is for --ensemble K with --executor inprocess or "
                              "processes")
    if args.adaptive:
        if args.shard or args.limit is not None:
            raise ConfigError("--adaptive chooses its own runs: it does not combine with "
                              "--shard or --limit")
        if not 0.0 < args.tol < 1.0:
            raise ConfigError(f"--tol {args.tol} is not allowed: must be in (0, 1)")
        if args.max_runs < 2:
            raise ConfigError(f"--max-runs {args.max_runs} is not allowed: must be >= 2")


def _check_budget_flags(args) -> None:
    """--time-budget, --step-ms and --speedup: ranges, and the modes they belong to."""
    check_budget(args.time_budget)
    if args.time_budget is not None and args.adaptive:
        raise ConfigError("--time-budget is not for --adaptive (it chooses its own runs)")
    if args.step_ms is not None:
        if not args.dry_run:
            raise ConfigError("--step-ms is for --dry-run (it estimates, runs nothing)")
        if not 0 < args.step_ms <= 1e6:
            raise ConfigError(f"--step-ms {args.step_ms:g}: must be in (0, 1e6] milliseconds")
    if args.speedup != 1.0:
        if args.step_ms is None:
            raise ConfigError("--speedup is for --dry-run --step-ms MS")
        if not 0 < args.speedup <= 1e4:
            raise ConfigError(f"--speedup {args.speedup:g}: must be in (0, 1e4]")


def _run(args, points, executor, shard, header: str) -> int:
    """Run the sweep (or the adaptive search) into the store; the exit status."""
    from recallbench.runs.store import Store, StoreWriteError

    echo = lambda line: print(line, flush=True)  # noqa: E731
    st = Store(args.store, shard)
    st.open()  # takes the writer lock: a second driver on the same file stops here
    try:
        # the bound is this module's MAX_STALE_LINES, looked up at each call
        check_stale(points, st.read(), args.refuse_stale, _say, MAX_STALE_LINES)
    except ConfigError:
        st.close()
        raise
    try:
        with sigterm_unwinds():  # SIGTERM unwinds like Ctrl-C: the workers stop, records stay
            counts = _drive(args, points, st, executor, echo, header)
    except (KeyboardInterrupt, Terminated) as exc:
        line, status = stopped(exc, args.store)
        print(line, file=sys.stderr, flush=True)
        return status
    except StoreWriteError as exc:  # the disk filled up: the record is saved aside
        print(f"recallbench: error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        st.close()
    if args.adaptive:
        return 1 if counts["failed"] else 0
    line, status = ending(counts, args.store, args.time_budget)
    print(line, flush=True)
    return status


def _drive(args, points, st, executor, echo, header: str) -> dict:
    """The sweep's or the adaptive search's run counts."""
    if args.adaptive:
        from recallbench.runs.adaptive_sweep import run_adaptive

        return run_adaptive(points, st, executor, tol=args.tol, max_runs=args.max_runs,
                            stop=args.stop, echo=echo, header=header)["counts"]
    from recallbench.runs.grid_sweep import run_sweep

    return run_sweep(points, st, executor, retry_failed=args.retry_failed, limit=args.limit,
                     ensemble=args.ensemble, echo=echo, header=header,
                     time_budget=args.time_budget)


def _notify(message: str) -> None:
    """What an executor says at once when it stops its workers early."""
    print(f"recallbench: {message}", file=sys.stderr, flush=True)


def _say(line: str) -> None:
    """A warning line on standard error."""
    print(line, file=sys.stderr)


def _dry_run(args, points, header: str) -> int:
    from recallbench.runs.store import read_store

    contents = read_store(args.store) if args.store else None
    state, counts, left = store_state(points, contents, args.retry_failed)
    print(header.rstrip("; ")
          + (f"; store {args.store}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
             if args.store else ""))
    for p in points:
        status = state.get(p.hash, "pending") if args.store else ""
        print(f"  {p.hash[:12]}  {status:<8} {p.label()}" if args.store
              else f"  {p.hash[:12]}  {p.label()}")
    print(f"{len(left)} points left to run")
    if args.step_ms is not None:
        from recallbench.runs.budget import estimate

        est = estimate([p.cfg for p in left], args.step_ms, args.speedup,
                       args.time_budget or DEFAULT_CHUNK_S)
        print(est.line(args.step_ms, args.speedup))
    return 0


def _dry_run_counts(args, sweep, size: int) -> int:
    """--dry-run of a grid too large to list: its counts, and the first points only."""
    from recallbench.runs.store import read_store

    dims = " x ".join(f"{len(sweep.axes[g[0]])} ({', '.join(g)})" for g in sweep.groups())
    print(f"sweep {sweep.name}: grid {size:,} cells = {dims}; more than {DRY_RUN_LIST:,}, so "
          f"the points are not resolved here (skip rules and filters not counted)")
    if args.store:
        contents = read_store(args.store)
        print(f"store {args.store}: {len(contents.hashes('ok'))} ok, "
              f"{len(contents.hashes('failed'))} failed")
    shown = 0
    for p in itertools.islice(sweep.iter_points(), DRY_RUN_SHOW):
        print(f"  {p.hash[:12]}  {p.label()}")
        shown += 1
    print(f"  ... the first {shown} points; {size - shown:,} more cells")
    if args.step_ms is not None:
        print("no estimate: the points of a grid this large are not resolved here")
    return 0
