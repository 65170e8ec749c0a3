"""Coverage of the N50 card's interval on synthetic cards of known N50.

    python benchmarks/card_coverage.py --cards 500 --seed 0 [--jobs 2]
    python benchmarks/card_coverage.py --cards 500 --fit-only      # the fit alone
    python benchmarks/card_coverage.py --cards 200 --out cards.jsonl
    python benchmarks/card_coverage.py --cards 24 --truth 8.6,0.72,0.47,0.04 --max-batches 96
    python benchmarks/card_coverage.py --cards 60 --truth 8.6,0.72,0.47,0.04 --max-batches 96 \
        --work-budget 1000 --max-spread 1.4 --futility     # cpu-v4's settings, a futility stop

Draws ``--cards`` truths over the cpu-v3 cards' ranges (``synthetic_cards.sample_truth``:
slope 1.0-1.9, run-to-run scatter tau 0-0.7, failure rate 0-0.1, N50 5-60 at V = 512,
D = 32, N = 8) and makes each one's card with the card search
(``recallbench.runs.card_search.measure``, seeds 0 and 1, its default work budget) on runs
simulated from that truth instead of trained (``synthetic_cards.runner``).

``--truth N50,SLOPE,TAU,FAIL`` gives every card one truth (a layer's fitted card, to see how
many runs it takes and how often it ends measured), ``--max-batches N`` the search's limit,
``--max-spread F`` its interval target, ``--futility`` its futility stop
(``card_search.futile``).
``--seed-share F`` puts a share F of each truth's run-to-run variance in a seed effect
shared by the runs of one seed (``synthetic_cards``); every run has its own seed, as the
search gives them, or with ``--shared-seeds`` every cell's j-th batch reuses one (the
search's seeding before it put N_f in the seed), which the fit's independent runs do not
model.  ``--fit-only`` skips the search: each card is ``recallbench.law.runfit.fit_runs`` on a
fixed design, 4 cells at ln N_f = ln N50 ± 0.4 and ± 0.9 (rounded to whole facts), 2 runs
each, called "measured" by the N50 card's rule (``recallbench.law.run_card``: a cell's
median run on each side of q = 1/2, enough uncensored runs, the interval within
``MAX_SPREAD``), "no recall" when no run is above its guess, else "bound".  It checks the
fit apart from where the search places cells and when it stops.

Printed, overall and by thirds of each parameter's range: cards; coverage of the true N50
by the card's 95% interval over all cards and among the cards called "measured", each
± its binomial standard error (a miss counted below or above: the interval lies under or
over the truth); the share measured; the median interval spread (upper / lower; inf where
the upper bound is infinite); the median training work (millions of tokens: Σ steps ×
batch × seq_len) and runs.  Then the CPU time per card.  A card's draw depends only on
``--seed`` and its index, so ``--jobs`` does not change the table.  ``--out`` writes one
JSON line per card (its truth, interval, status, work, runs, fitted slope and tau).
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path

#: one card per process on small arrays: BLAS threads only contend (a pool's processes
#: are spawned with these, whatever the importing process set up)
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
for _k, _v in ONE_THREAD.items():
    os.environ.setdefault(_k, _v)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import synthetic_cards as synth  # noqa: E402

from recallbench.runs import capacity  # noqa: E402

#: the card's model and protocol: linear-mamba at D32-N8, V = 512, the capacity runs' training
BASE = {"task": {"name": "mqar", "vocab_size": 512},
        "model": {"adapter": "linear-mamba", "d_model": synth.D_MODEL, "d_state": synth.D_STATE},
        "train": dict(capacity.TRAIN)}
#: the fixed design of --fit-only: offsets from ln N50, runs per cell
OFFSETS, SEEDS = (-0.9, -0.4, 0.4, 0.9), (0, 1)
BINS = {"slope": (1.0, 1.3, 1.6, 1.9), "tau": (0.0, 0.233, 0.467, 0.7),
        "failure_rate": (0.0, 0.033, 0.067, 0.1), "n50": (5.0, 11.0, 25.0, 60.0)}


def design(n50: float) -> list[int]:
    """The --fit-only cells: N_f at ln N50 + OFFSETS, whole and distinct, at least 2."""
    cells = sorted({max(2, round(n50 * math.exp(d))) for d in OFFSETS})
    return cells


def config(nf: int, seed: int) -> dict:
    """The resolved config of a run at ``nf`` facts (L = 4·N_f), as the search makes it."""
    return capacity.cell_config(BASE, nf, seed)


def fit_records(records):
    """runfit.fit_runs on a card's records (every run one observation)."""
    from recallbench.law import runfit
    nf = np.array([r["config"]["task"]["num_facts"] for r in records], float)
    k = np.array([r["correct"] for r in records], float)
    n = np.array([r["total"] for r in records], float)
    capped = np.array([(not r["converged"]) and r["stop_reason"] == "max_steps"
                       for r in records])
    return runfit.fit_runs(nf, k, n, n // nf, 1.0 / nf, capped)


def measured_rule() -> tuple[float, int]:
    """(largest spread, fewest uncensored runs) of a measured N50 card: the card's own
    (``recallbench.law.run_card``), or its values where that module is absent."""
    try:
        from recallbench.law import run_card
    except ImportError:
        return 1.3, 8
    return run_card.MAX_SPREAD, run_card.MIN_OBSERVED


def fit_only_card(truth, rng, shared=False) -> dict:
    from recallbench.runs.card_search import run_seed
    run_cell = synth.runner(truth, rng, shared)
    records = run_cell([config(nf, run_seed(s, nf, 0)) for nf in design(truth.n50)
                        for s in SEEDS])
    f = fit_records(records)
    lo, hi = f.n50_ci
    max_spread, min_observed = measured_rule()
    if f.n_observed == 0 and not any(r["accuracy"] > 1.0 / r["config"]["task"]["num_facts"]
                                     for r in records):
        status = "no recall"
    elif (f.bracketed and lo > 0 and hi / lo <= max_spread
          and f.n_observed >= min_observed):
        status = "measured"
    else:
        status = "bound"
    return {"status": status, "n50": f.n50, "lo": lo, "hi": hi, "runs": run_cell.runs,
            "work_mtok": run_cell.work_mtok, "runner_mtok": run_cell.work_mtok,
            "stopped": "fixed design", "slope_hat": f.slope, "tau_hat": f.tau,
            "failure_hat": f.failure_rate, "observed": f.n_observed}


def search_card(truth, rng, work_budget=None, shared=False, max_batches=None,
                extra=None) -> dict:
    from recallbench.runs import card_search
    run_cell = synth.runner(truth, rng, shared)
    kw = dict(extra or {})
    if work_budget is not None:
        kw["work_budget"] = work_budget
    if max_batches is not None:
        kw["max_batches"] = max_batches
    res = card_search.measure(BASE, seeds=SEEDS, run_cell=run_cell, say=lambda s: None, **kw)
    card = res.card
    n50 = card.get("n50") or {}
    ci = n50.get("ci") or [None, None]
    lo = 0.0 if ci[0] is None else float(ci[0])
    hi = math.inf if ci[1] is None else float(ci[1])
    work, fit = card.get("work_mtok"), card.get("fit") or {}
    return {"status": card.get("status"), "n50": n50.get("value"), "lo": lo, "hi": hi,
            "runs": run_cell.runs, "work_mtok": run_cell.work_mtok if work is None else work,
            "runner_mtok": run_cell.work_mtok, "stopped": str(res.stopped),
            "slope_hat": fit.get("slope"), "tau_hat": fit.get("tau")}


def one_card(job) -> dict:
    index, seed, fit_only, work_budget, seed_share, shared, fixed, max_batches, *extra = job
    rng = np.random.default_rng([seed, index])
    truth = synth.sample_truth(rng, seed_share) if fixed is None else synth.Truth(*fixed)
    t0 = time.process_time()
    row = (fit_only_card(truth, rng, shared) if fit_only
           else search_card(truth, rng, work_budget, shared, max_batches, *extra))
    row.update(index=index, truth=truth.to_dict(), cpu_s=time.process_time() - t0)
    row["covered"] = bool(row["lo"] <= truth.n50 <= row["hi"])
    row["miss"] = None if row["covered"] else ("below" if row["hi"] < truth.n50 else "above")
    return row


def make_pool(jobs: int):
    """A pool of ``jobs`` spawned processes with one BLAS thread each (a forked child keeps
    its parent's BLAS threads, and L-BFGS-B under a multi-threaded OpenBLAS costs up to 20x
    the CPU on a busy machine)."""
    os.environ.update(ONE_THREAD)
    return multiprocessing.get_context("spawn").Pool(jobs)


def run_cards(cards: int, seed: int = 0, fit_only: bool = False, jobs: int = 1,
              work_budget=None, progress=None, pool=None, seed_share: float = 0.0,
              shared: bool = False, truth: tuple | None = None,
              max_batches: int | None = None, max_spread: float | None = None,
              futility: bool = False) -> list[dict]:
    """Every card's row, in index order; ``progress(done, cards)`` after each card.  The
    cards run in this process (``jobs`` 1), over ``jobs`` new processes, or in ``pool``.
    ``seed_share``: the share of the run-to-run variance that is the seed's; ``shared``:
    the seed's effect shared by the runs of every cell's j-th batch
    (``synthetic_cards.runner``); ``truth``: (n50, slope, tau, failure rate) for every card
    instead of one drawn per card; ``max_batches``, ``max_spread``, ``futility``: the
    search's (None, None, False: its defaults)."""
    extra = {"max_spread": max_spread, "futility": futility}
    work = [(i, seed, fit_only, work_budget, seed_share, shared, truth, max_batches, extra)
            for i in range(cards)]
    own = make_pool(jobs) if pool is None and jobs > 1 else None
    use = pool or own
    rows = []
    try:
        for row in (use.imap_unordered(one_card, work, chunksize=1) if use
                    else map(one_card, work)):
            rows.append(row)
            if progress:
                progress(len(rows), cards)
    finally:
        if own:
            own.terminate()
    return sorted(rows, key=lambda r: r["index"])


class Progress:
    """``progress(done, cards)``: a line on stderr at most every ``every`` seconds and at the
    end, with the wall time so far and an estimate of what is left at the rate so far."""

    def __init__(self, every: float = 30.0):
        self.t0, self.last, self.every = time.time(), time.time(), every

    def __call__(self, done: int, cards: int) -> None:
        now = time.time()
        if done < cards and now - self.last < self.every:
            return
        self.last, spent = now, now - self.t0
        left = spent / done * (cards - done) if done else math.nan
        print(f"{done}/{cards} cards, {spent:.0f} s" + (f", about {left:.0f} s left"
                                                         if done < cards else ""),
              file=sys.stderr, flush=True)


def coverage(rows) -> tuple[float, float, int]:
    """(share covered, its binomial standard error, cards)."""
    n = len(rows)
    if not n:
        return math.nan, math.nan, 0
    c = sum(r["covered"] for r in rows) / n
    return c, math.sqrt(c * (1 - c) / n), n


def summary(rows) -> dict:
    measured = [r for r in rows if r["status"] == "measured"]
    spread = [r["hi"] / r["lo"] if r["lo"] > 0 else math.inf for r in rows]
    return {"cards": len(rows), "all": coverage(rows), "measured": coverage(measured),
            "share_measured": len(measured) / len(rows) if rows else math.nan,
            "below": sum(r["miss"] == "below" for r in rows),
            "above": sum(r["miss"] == "above" for r in rows),
            "spread": float(np.median(spread)) if rows else math.nan,
            "work_mtok": float(np.median([r["work_mtok"] for r in rows])) if rows else math.nan,
            "runs": float(np.median([r["runs"] for r in rows])) if rows else math.nan}


def groups(rows):
    """("all", rows), then each third of each parameter's range."""
    yield "all", rows
    for key, edges in BINS.items():
        for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
            last = i == len(edges) - 2
            sel = [r for r in rows if a <= r["truth"][key] < b or (last and r["truth"][key] == b)]
            yield f"{key} [{a:g}, {b:g}{']' if last else ')'}", sel


def _cov(c) -> str:
    share, se, n = c
    return f"{'-':>14}" if not n else f"{share:6.3f} ± {se:.3f}"


def table(rows) -> str:
    head = (f"{'':<26} {'cards':>5}  {'coverage':>14} {'miss lo/hi':>10}  "
            f"{'cov. measured':>14} {'meas.':>5} {'spread':>6} {'Mtok':>6} {'runs':>4}")
    lines = [head, "-" * len(head)]
    for name, sel in groups(rows):
        s = summary(sel)
        if not s["cards"]:
            lines.append(f"{name:<26} {0:>5}")
            continue
        lines.append(f"{name:<26} {s['cards']:>5}  {_cov(s['all'])} "
                     f"{s['below']:>4}/{s['above']:<5}  {_cov(s['measured'])} "
                     f"{s['share_measured']:>5.2f} {s['spread']:>6.2f} {s['work_mtok']:>6.1f} "
                     f"{s['runs']:>4.0f}")
    return "\n".join(lines)


def parse_truth(parser: argparse.ArgumentParser, text: str | None) -> tuple | None:
    """--truth N50,SLOPE,TAU,FAIL as a tuple (None when not given); a bad one ends the
    command with one line naming the field and what is allowed."""
    if text is None:
        return None
    try:
        truth = tuple(float(x) for x in text.split(","))
    except ValueError:
        truth = ()
    if len(truth) != 4 or not (truth[0] > 1 and truth[1] > 0 and truth[2] >= 0
                               and 0 <= truth[3] < 1):
        parser.error(f"--truth {text} is not allowed: N50 > 1, slope > 0, tau >= 0 and a "
                     "failure rate in [0, 1), comma-separated")
    return truth


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cards", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--fit-only", action="store_true",
                   help="fit a fixed design of 4 cells x 2 runs, without the search")
    p.add_argument("--work-budget", type=float, default=None,
                   help="Mtok per card (default: the search's own)")
    p.add_argument("--out", default=None, help="one JSON line per card")
    p.add_argument("--seed-share", type=float, default=0.0,
                   help="share of the run-to-run variance that is the seed's, in [0, 1)")
    p.add_argument("--shared-seeds", action="store_true",
                   help="every cell's j-th batch reuses one seed (its effect shared)")
    p.add_argument("--truth", metavar="N50,SLOPE,TAU,FAIL",
                   help="one truth for every card (e.g. 8.6,0.72,0.47,0.04: Mamba-2's fit)")
    p.add_argument("--max-batches", type=int, default=None,
                   help="the search's batch limit (default: its own)")
    p.add_argument("--max-spread", type=float, default=None,
                   help="the card's N50 interval target (default: its own, 1.3)")
    p.add_argument("--futility", action="store_true",
                   help="the search's futility stop (card_search.futile)")
    args = p.parse_args(argv)
    truth = parse_truth(p, args.truth)
    if args.max_batches is not None and not 1 <= args.max_batches <= 99:
        p.error(f"--max-batches {args.max_batches} is not allowed: an integer in [1, 99]")
    if not 0.0 <= args.seed_share < 1.0:
        p.error(f"--seed-share {args.seed_share:g} is not allowed: a share in [0, 1)")
    t0 = time.time()
    rows = run_cards(args.cards, args.seed, args.fit_only, args.jobs, args.work_budget,
                     progress=Progress(), seed_share=args.seed_share, shared=args.shared_seeds,
                     truth=truth, max_batches=args.max_batches, max_spread=args.max_spread,
                     futility=args.futility)
    wall = time.time() - t0
    what = "fixed design (4 cells x 2 runs), runfit.fit_runs" if args.fit_only \
        else "card_search.measure, seeds 0,1"
    if truth is not None:
        what += (f"; every card N50 {truth[0]:g}, slope {truth[1]:g}, tau {truth[2]:g}, "
                 f"failure rate {truth[3]:g}")
    if args.max_batches is not None:
        what += f"; at most {args.max_batches} batches"
    if args.max_spread is not None:
        what += f"; target {args.max_spread:g}"
    if args.futility:
        what += "; futility stop"
    if args.seed_share:
        what += (f"; {args.seed_share:g} of the run variance a seed's, "
                 + ("shared by every cell's j-th batch" if args.shared_seeds
                    else "each run its own seed"))
    print(f"{args.cards} synthetic cards, seed {args.seed}: {what}")
    print(table(rows))
    cpu = np.array([r["cpu_s"] for r in rows])
    print(f"CPU per card: median {np.median(cpu):.2f} s, mean {cpu.mean():.2f} s, "
          f"max {cpu.max():.2f} s; {wall:.0f} s wall over {args.jobs} job(s)")
    off = [r for r in rows
           if abs(r["work_mtok"] - r["runner_mtok"]) > 0.01 * max(r["runner_mtok"], 1)]
    if off:
        print(f"{len(off)} cards' work_mtok differs from the simulated runs' by more than 1%")
    stopped = {}  # why each search stopped, without its numbers ("work budget: ...")
    for r in rows:
        why = r["stopped"].split(":")[0]
        stopped[why] = stopped.get(why, 0) + 1
    print("stopped: " + ", ".join(f"{k} {v}" for k, v in
                                  sorted(stopped.items(), key=lambda kv: -kv[1])))
    if args.out:
        with open(args.out, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
