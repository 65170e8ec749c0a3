"""Coverage of the N50 card under other stopping rules, from every look of synthetic cards.

    python benchmarks/card_looks.py --cards 120 --seed 1 --jobs 2 \\
        --truth 8.6,0.72,0.47,0.04 --max-batches 96 --out looks.jsonl
    python benchmarks/card_looks.py --from looks.jsonl       # the table again, nothing run

The card search stops at the first batch after which its card is measured (a cell's median
run on each side of q = 1/2, 8 uncensored runs, the card's 95% N50 interval within a
factor 1.3: ``recallbench.law.run_card``), so it may favour an interval that happens to be
narrow; the card therefore stretches the fit's interval ``run_card.WIDEN``-fold.  Here each
card of ``benchmarks/card_coverage.py`` (the same truth and the same draws for a ``--seed``
and index) is searched on past that batch, until the fit's interval spans at most
``--floor`` or the batch limit; the fit after every batch (a look) is kept.  Up to the
card's stop the search is the card search itself, so the card's rule ("widened 1.15, slope
at most 3" below) makes the card ``card_coverage.py`` makes.

Printed per rule (stop at the first look with a cell's median run on each side of 1/2, 8
uncensored runs and the fit's interval within a spread s, k looks in a row; report that
interval, or with "widened w" that interval stretched w-fold about N50 on the log scale
and s = 1.3^(1/w), so that the widened one spans at most 1.3; with "slope at most c", no
stop at a look whose fitted slope exceeds c): cards measured within the
batch limit, how many of them cover the true N50 (± its binomial standard error), and the
median runs at the stop.  A rule with s below ``--floor`` is not evaluated.  Then, at the
card's rule and at the last look, the SD of ln(N50 / truth) over the cards against the
interval's own (the mean half-width of ln N50 over 1.96), and the coverage there.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import card_coverage as cc  # noqa: E402
import synthetic_cards as synth  # noqa: E402

from recallbench.law import run_card  # noqa: E402

#: the card rule's largest spread of a measured card (1.3), fewest uncensored runs (8)
SPREAD, MIN_OBSERVED = cc.measured_rule()
#: the card's widening of the fit's interval
WIDEN = run_card.WIDEN
#: the card's cap on the fitted slope at a measured stop
MAX_SLOPE = run_card.MAX_SLOPE
#: looser targets for the widened interval than the card's 1.3, tabled at the card's rule
#: otherwise (what ``precision_cost.py`` replays on a board's trained cards)
LOOSER = (1.4, 1.5, 1.75, 2.0)
#: the rules tabled: (largest spread, looks in a row, widening, n_ref, slope cap); n_ref > 0:
#: the widening grows to w·sqrt(n_ref / n) while a look has n < n_ref uncensored runs; a
#: look whose fitted slope exceeds the cap does not stop
RULES = ((SPREAD, 1, 1.0, 0, math.inf), (SPREAD, 2, 1.0, 0, math.inf),
         (SPREAD, 3, 1.0, 0, math.inf), (1.28, 1, 1.0, 0, math.inf),
         (1.26, 1, 1.0, 0, math.inf), (1.25, 1, 1.0, 0, math.inf), (1.24, 1, 1.0, 0, math.inf),
         (1.22, 1, 1.0, 0, math.inf), (1.2, 1, 1.0, 0, math.inf),
         *((SPREAD ** (1 / w), 1, w, 0, math.inf) for w in (1.1, 1.15, 1.2)),
         (SPREAD ** (1 / WIDEN), 2, WIDEN, 0, math.inf),
         *((SPREAD ** (1 / WIDEN), 1, WIDEN, n, math.inf) for n in (16, 24, 32, 48, 64)),
         *((SPREAD ** (1 / WIDEN), 1, WIDEN, 0, c) for c in (1.6, 1.9, 2.2, 2.5, MAX_SLOPE)),
         *((t ** (1 / WIDEN), 1, WIDEN, 0, MAX_SLOPE) for t in LOOSER))
FIELDS = ("runs", "status", "n50", "lo", "hi", "spread", "bracketed", "observed", "tau", "slope",
          "test_sd")


@contextlib.contextmanager
def _looking(looks: list, floor: float, floor_runs: int = 0):
    """Within: the fit of the search's card after each batch appended to ``looks``; a
    measured card whose fit's interval spans more than ``floor``, or that has fewer than
    ``floor_runs`` uncensored runs, is handed back to the search as a bound."""
    from recallbench.runs import card_search

    build = run_card.build_run_card

    def spy(records, **kw):
        card = build(records, **kw)
        n50 = card.get("n50") or {}
        ci = n50.get("fit_ci", n50.get("ci")) or [None, None]
        crit = card.get("criteria") or {}
        spread = ci[1] / ci[0] if ci[0] and ci[1] else None
        fit = card.get("fit") or {}
        looks.append([len(card["runs"]), card.get("status"), n50.get("value"), ci[0], ci[1],
                      spread, crit.get("bracketed"), crit.get("observed_runs"), fit.get("tau"),
                      fit.get("slope"), fit.get("test_sd")])
        if card.get("status") == "measured" and (spread is None or spread > floor or (
                crit.get("observed_runs") or 0) < floor_runs):
            card = {**card, "status": "bound"}
        return card

    card_search.run_card.build_run_card = spy
    try:
        yield
    finally:
        card_search.run_card.build_run_card = build


def one_card(job) -> dict:
    index, seed, fixed, max_batches, work_budget, floor, floor_runs = job
    rng = np.random.default_rng([seed, index])
    truth = synth.sample_truth(rng) if fixed is None else synth.Truth(*fixed)
    looks: list = []
    t0 = time.process_time()
    with _looking(looks, floor, floor_runs):  # card_coverage's own search call, watched
        cc.search_card(truth, rng, work_budget, max_batches=max_batches)
    return {"index": index, "truth": truth.to_dict(), "cpu_s": time.process_time() - t0,
            "floor_runs": floor_runs, "looks": [dict(zip(FIELDS, look)) for look in looks]}


def growth(look: dict, n_ref: int) -> float:
    """How much more a rule of ``n_ref`` widens at this look: sqrt(n_ref / n) while its n
    uncensored runs are fewer than n_ref (the information fraction's square root), else 1."""
    n = look["observed"] or 0
    return math.sqrt(n_ref / n) if n_ref and 0 < n < n_ref else 1.0


def stop_at(looks: list[dict], spread: float, k: int, n_ref: int = 0,
            cap: float = math.inf) -> dict | None:
    """The first look ending k looks in a row that are bracketed, with enough uncensored
    runs, a fitted slope of at most ``cap``, and whose fit's interval spans at most
    ``spread`` (with ``n_ref``: at most spread^(1/growth), so that the interval widened the
    more spans as much)."""
    run = 0
    for look in looks:
        ok = bool(look["bracketed"]) and (look["observed"] or 0) >= MIN_OBSERVED \
            and look["spread"] is not None and (look.get("slope") or 0.0) <= cap \
            and look["spread"] <= spread ** (1 / growth(look, n_ref))
        run = run + 1 if ok else 0
        if run >= k:
            return look
    return None


def widened(look: dict, w: float) -> tuple[float, float]:
    """A look's interval stretched ``w``-fold about its N50 on the log scale, as the card
    stretches the fit's (``run_card.widened``)."""
    return run_card.widened(look["n50"], (look["lo"], look["hi"]), w)


def evaluate(rows: list[dict], spread: float, k: int, w: float = 1.0, n_ref: int = 0,
             cap: float = math.inf) -> dict:
    stops = [(r["truth"]["n50"], stop_at(r["looks"], spread, k, n_ref, cap)) for r in rows]
    stops = [(t, s) for t, s in stops if s is not None]
    covered = sum(lo <= t <= hi for t, (lo, hi) in
                  ((t, widened(s, w * growth(s, n_ref)) if w != 1.0 else (s["lo"], s["hi"]))
                   for t, s in stops))
    n = len(stops)
    p = covered / n if n else math.nan
    return {"rule": (spread, k, w, n_ref, cap), "cards": len(rows), "measured": n,
            "covered": covered,
            "coverage": p, "se": math.sqrt(p * (1 - p) / n) if n else math.nan,
            "runs": float(np.median([s["runs"] for _, s in stops])) if n else math.nan,
            "mean_runs": float(np.mean([s["runs"] for _, s in stops])) if n else math.nan}


def table(rows: list[dict], floor: float) -> str:
    """The rules' rows (one a rule the looks can decide: its spread not below ``floor``,
    its n_ref not above the runs every card was searched on to), then the error lines."""
    floor_runs = min((r.get("floor_runs") or 0 for r in rows), default=0)
    lines = [f"{'rule: spread, looks':<52} {'measured':>12} {'covered':>9} "
             f"{'coverage':>15} {'runs':>5} {'mean':>6}"]
    for spread, k, w, n_ref, cap in RULES:
        if spread < floor - 1e-9 or n_ref > floor_runs:
            continue
        e = evaluate(rows, spread, k, w, n_ref, cap)
        name = f"{spread:<6.4g} {k:<3d}" + (f" widened {w:g}" if w != 1.0 else "") \
            + (f", more below {n_ref} runs" if n_ref else "") \
            + (f", slope at most {cap:g}" if math.isfinite(cap) else "") \
            + (f", target {spread ** w:.3g}" if spread ** w > SPREAD + 1e-9 else "")
        lines.append(f"{name:<52} {e['measured']:>5} of {e['cards']:<4} "
                     f"{e['covered']:>9} {e['coverage']:>7.3f} ± {e['se']:.3f} {e['runs']:>5.0f}"
                     f" {e['mean_runs']:>6.1f}")
    card_rule = SPREAD ** (1 / WIDEN)
    ends_at = (("at the card's rule", lambda r: stop_at(r["looks"], card_rule, 1, cap=MAX_SLOPE),
                WIDEN), ("at the last look", lambda r: r["looks"][-1], 1.0))
    for what, pick, w in ends_at:
        got = [(r["truth"]["n50"], pick(r)) for r in rows]
        got = [(t, s) for t, s in got if s and s["n50"] and s["lo"] and s["hi"]]
        if not got:
            continue
        ends = [widened(s, w) for _, s in got]
        err = np.log([s["n50"] / t for t, s in got])
        own = np.mean([math.log(hi / lo) / 2 / 1.96 for lo, hi in ends])
        cover = np.mean([lo <= t <= hi for (t, _), (lo, hi) in zip(got, ends)])
        lines.append(f"{what} (widened {w:g}): {len(got)} cards, median "
                     f"{np.median([s['runs'] for _, s in got]):.0f} runs; SD of ln(N50/truth) "
                     f"{err.std(ddof=1):.3f} (mean {err.mean():+.3f}) against the interval's "
                     f"{own:.3f}; coverage {cover:.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cards", type=int, default=120)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--truth", metavar="N50,SLOPE,TAU,FAIL",
                   help="one truth for every card (default: drawn over card_coverage's ranges)")
    p.add_argument("--max-batches", type=int, default=96)
    p.add_argument("--work-budget", type=float, default=1e5, help="Mtok per card")
    p.add_argument("--floor", type=float, default=1.2,
                   help="search on until the interval spans at most this (default 1.2)")
    p.add_argument("--floor-runs", type=int, default=0,
                   help="and until it has at least this many uncensored runs (default 0), "
                        "so that rules widening more below that many can be decided")
    p.add_argument("--out", default=None, help="one JSON line per card, its looks")
    p.add_argument("--from", dest="source", default=None,
                   help="tabulate the cards of an earlier --out instead of running any")
    args = p.parse_args(argv)
    if args.source:
        with open(args.source) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        print(f"{len(rows)} cards from {args.source}")
        print(table(rows, args.floor))
        return 0
    truth = cc.parse_truth(p, args.truth)
    if not 1 <= args.max_batches <= 99:
        p.error(f"--max-batches {args.max_batches} is not allowed: an integer in [1, 99]")
    if not 1.0 < args.floor <= 1.3:
        p.error(f"--floor {args.floor:g} is not allowed: a spread in (1, 1.3]")
    if not 0 <= args.floor_runs <= 1000:
        p.error(f"--floor-runs {args.floor_runs} is not allowed: an integer in [0, 1000]")
    jobs = [(i, args.seed, truth, args.max_batches, args.work_budget, args.floor,
             args.floor_runs)
            for i in range(args.cards)]
    t0, rows, progress = time.time(), [], cc.Progress()
    pool = cc.make_pool(args.jobs) if args.jobs > 1 else None
    out = open(args.out, "w") if args.out else None
    try:
        for row in (pool.imap_unordered(one_card, jobs, chunksize=1) if pool
                    else map(one_card, jobs)):
            rows.append(row)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
            progress(len(rows), args.cards)
    finally:
        if pool:
            pool.terminate()
        if out:
            out.close()
    what = "drawn over card_coverage's ranges" if truth is None else \
        "N50 {:g}, slope {:g}, tau {:g}, failure rate {:g}".format(*truth)
    print(f"{args.cards} synthetic cards, seed {args.seed}, {what}; at most "
          f"{args.max_batches} batches, searched on to a spread of {args.floor:g}"
          + (f" and {args.floor_runs} uncensored runs" if args.floor_runs else ""))
    print(table(sorted(rows, key=lambda r: r["index"]), args.floor))
    cpu = [r["cpu_s"] for r in rows]
    print(f"CPU per card: median {np.median(cpu):.1f} s; {time.time() - t0:.0f} s wall over "
          f"{args.jobs} job(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
