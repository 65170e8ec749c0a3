"""The capacity search, method 2: batches of runs placed where they narrow N50 per token.

    res = measure(base, seeds=(0, 1), work_budget=300, run_cell=..., done=store_records)
    res.card             # recallbench.law.run_card: "measured", "bound" or "no recall"

One model configuration on MQAR, L = 4·N_f, at one V.  Every batch trains one run per seed
s at one N_f; the j-th batch at N_f uses seeds s + 1000·j + 100000·N_f (:func:`run_seed`),
so no two runs of a card share a seed: a seed fixes the initial weights and the data
stream, and runs sharing one across cells are correlated (the fit takes runs as
independent; docs/results/capacity/README.md measured the correlation).  The first cell
is where the law at S_eff = S predicts 70% above the guess (``theory.capacity``); then it
brackets q = 1/2 along a probit line of slope :data:`PRIOR_SLOPE` (``max_step`` keeps each
step within R×); then it places each batch where its runs most shrink the asymptotic
variance of ln N50 per token trained (runs predicted beyond q ∈ [0.1, 0.9] are censored and
not candidates): bracket, then replicate near N50.

It stops when the card is measured, when the next batch's predicted work exceeds the work
budget left (the first batch: refused), after ``max_batches``, when every run of a batch
failed, when N50 lies below N_f = 2 (its median run under q = 1/2 after
:data:`FLOOR_BATCHES` batches there), with ``futility`` when the interval target is out of
the budget's reach (:func:`futile`), or at the wall ``time_limit_s`` (the batch in training
not stored; the same command resumes from the store).  The budget counts tokens trained,
so a verdict does not depend on the machine, and a rerun replays the same cells.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import special, stats

from recallbench.api.canonical import config_hash
from recallbench.api.errors import ConfigError
from recallbench.law import run_card, runfit, theory
from recallbench.runs.budget import BudgetSpent, Limit
from recallbench.runs.card_lr import lr_edge, wider_grid
from recallbench.runs.capacity import MIN_FACTS, TRAIN as METHOD_1_TRAIN, cell_config, n_eff_prior

#: a run's seed: s + SEED_STRIDE·j + CELL_STRIDE·N_f (s a card seed below SEED_STRIDE, j
#: the batch at that N_f, below CELL_STRIDE / SEED_STRIDE)
SEED_STRIDE, CELL_STRIDE = 1000, 100_000
#: where a card's learning-rate candidates are compared: a quarter of max_steps
LR_RUNG = 0.25
#: the protocol of a method-2 card: method 1's (``capacity.TRAIN``) with the learning rate
#: searched by successive halving (``train.lr_rung``, :mod:`recallbench.harness.lr_halving`;
#: its cost against the full search: ``benchmarks/bench_capacity.py``)
TRAIN = {**METHOD_1_TRAIN, "lr_rung": LR_RUNG}
PRIOR_SLOPE = 1.3
DEFAULT_STEP = 4.0
MAX_BATCHES = 24
#: the default work budget of a card, millions of tokens trained
DEFAULT_WORK_MTOK = 300.0
#: the allowed work budget (Mtok)
WORK_RANGE = (1.0, 1e6)
FIRST_Q, ABOVE_Q, BELOW_Q = 0.7, 0.35, 0.65
#: batches at N_f = 2 whose median run must stay under q = 1/2 before N50 is said to lie below
FLOOR_BATCHES = 3
Q_RANGE = (0.1, 0.9)
#: with ``futility``, the share of the work budget spent before a card may stop as futile
FUTILITY_AFTER = 0.25


@dataclasses.dataclass
class Result:
    card: dict
    stopped: str
    records: list[dict]
    finished: bool = True  # False: stopped by the wall-time limit, the same command resumes
    failed: bool = False  # stopped because every run of a batch failed (``stopped`` says why)


def run_seed(seed: int, nf: int, j: int) -> int:
    """The seed of card seed ``seed``'s run in the ``j``-th batch at N_f = ``nf``."""
    return int(seed) + SEED_STRIDE * int(j) + CELL_STRIDE * int(nf)


def batch_seeds(seeds: Sequence[int], j: int, nf: int) -> list[int]:
    """The seeds of the ``j``-th batch at N_f = ``nf``."""
    return [run_seed(s, nf, j) for s in seeds]


def card_seed_of(seeds: Sequence[int]) -> Callable[[int, int], bool]:
    """Whether a run's seed at N_f is a batch's of a card over ``seeds``."""
    wanted = {int(s) for s in seeds}

    def ours(seed: int, nf: int) -> bool:
        s, _, at = seed_parts(seed)
        return s in wanted and at == nf
    return ours


def seed_parts(seed: int) -> tuple[int, int, int]:
    """(card seed, batch j, N_f) of a run's seed (:func:`run_seed` inverted)."""
    seed = int(seed)
    return seed % SEED_STRIDE, (seed % CELL_STRIDE) // SEED_STRIDE, seed // CELL_STRIDE


def first_facts(d: int, n_eff0: float, vocab: int) -> int:
    """N_f where the linear reference at N_eff0 recalls :data:`FIRST_Q` above the guess."""
    top = vocab // 2 - 1
    a = theory.coefficient_a("linear", "mqar")
    nf = float(theory.capacity(d, n_eff0, vocab, a, 1.0 - FIRST_Q))
    return int(min(max(round(nf), MIN_FACTS), max(top, MIN_FACTS)))


def _medians(ok: list[dict]) -> dict[int, float]:
    """Per N_f, the median run's probit z (censored runs at their censoring points)."""
    by: dict[int, list] = {}
    for r in ok:
        _, z, _ = runfit.classify(r["correct"], r["total"], r["units"], r["guess"],
                                  not r["converged"])
        by.setdefault(r["num_facts"], []).append(float(z))
    return {nf: float(np.median(v)) for nf, v in by.items()}


def _bracket(med: dict[int, float], step: float) -> tuple[int | None, str]:
    """The next N_f while no cell's median lies on each side of q = 1/2."""
    ceiling, floor = special.ndtri(runfit.Q_HIGH) - 1e-9, -1.5
    if min(med.values()) >= 0:  # everything above half: go up from the largest
        n = max(med)
        if med[n] >= ceiling:
            return int(math.ceil(n * min(2.0, step))), "every cell above q = 1/2, the largest at the ceiling"
        nxt = n * math.exp((med[n] - special.ndtri(ABOVE_Q)) / PRIOR_SLOPE)
        return int(min(max(round(nxt), n + 1), math.floor(n * step))), f"aiming at q = {ABOVE_Q}"
    n = min(med)
    if med[n] <= floor:
        return int(n // min(2.0, step)), "every cell below q = 1/2, the smallest near the guess"
    nxt = n * math.exp(-(special.ndtri(BELOW_Q) - med[n]) / PRIOR_SLOPE)
    return int(max(min(round(nxt), n - 1), math.ceil(n / step))), f"aiming at q = {BELOW_Q}"


def _narrow(ok: list[dict], fit: runfit.RunFit, lo: int, hi: int, cost: Callable,
            runs: int, left: float) -> tuple[int | None, str]:
    """The N_f in [lo, hi] whose batch cuts the variance of ln N50 most per token."""
    ell, beta, tau2 = math.log(fit.n50), fit.slope, fit.tau ** 2
    kind, z, v = runfit.classify([r["correct"] for r in ok], [r["total"] for r in ok],
                                 [r["units"] for r in ok], [r["guess"] for r in ok],
                                 [not r["converged"] for r in ok])
    x = np.log([r["num_facts"] for r in ok])
    w = np.where(kind == 0, 1.0 / (tau2 + v), 0.0)

    def var(wt, xs):
        big_w = wt.sum()
        if big_w <= 0:
            return math.inf
        xbar = float((wt * xs).sum() / big_w)
        sxx = float((wt * (xs - xbar) ** 2).sum())
        return (1.0 / big_w + ((ell - xbar) ** 2 / sxx if sxx > 0 else math.inf)) / beta ** 2

    now = var(w, x)
    units = ok[0]["units"]
    best, best_gain = None, (0.0 if math.isfinite(now) else -math.inf)
    grid = np.unique(np.round(np.geomspace(max(lo, MIN_FACTS), max(hi, MIN_FACTS), 48)))
    for nf in grid.astype(int):
        mu = beta * (ell - math.log(nf))
        q = float(special.ndtr(mu))
        if not Q_RANGE[0] <= q <= Q_RANGE[1] or cost(nf) > left:
            continue
        g = 1.0 / nf
        acc = g + (1 - g) * q
        vn = acc * (1 - acc) / units / (1 - g) ** 2 / stats.norm.pdf(mu) ** 2
        xs = np.concatenate([x, np.full(runs, math.log(nf))])
        ws = np.concatenate([w, np.full(runs, 1.0 / (tau2 + vn))])
        new = var(ws, xs)
        # the variance cut per token; while it is infinite (every uncensored run at one N_f),
        # the smallest variance the batch buys per token
        gain = ((now - new) / cost(nf) if math.isfinite(now)
                else -new * cost(nf) if math.isfinite(new) else -math.inf)
        if gain > best_gain:
            best, best_gain = int(nf), gain
    if best is None:
        return None, "no N_f with q in [0.1, 0.9] fits the work budget left"
    return best, f"narrowing N50 (predicted q = {float(special.ndtr(beta * (ell - math.log(best)))):.2f})"


def measure(base: Mapping[str, Any], *, seeds: Sequence[int] = (0, 1),
            work_budget: float = DEFAULT_WORK_MTOK,
            run_cell: Callable[[list[dict]], list[dict]] | None, done: Mapping[str, dict] | None = None,
            max_batches: int = MAX_BATCHES, say: Callable[[str], None] = print,
            time_limit_s: float | None = None, clock: Callable[[], float] = time.monotonic,
            max_step: float | None = None, cut: bool = False, widen: bool = False,
            max_spread: float | None = None, futility: bool = False) -> Result:
    """Run the search (module doc); ``work_budget`` in millions of tokens.  ``run_cell(configs)
    -> records`` trains one batch (the caller stores them); ``done``: records by config hash,
    reused; ``run_cell=None`` replays over ``done`` alone.  ``cut``: ``run_cell(configs,
    limit)`` stops the runs still training at ``time_limit_s`` (``runs.budget.deadline``),
    unstored, and the search, unfinished.  A first batch whose nominal work alone exceeds
    the budget is refused (ConfigError) before anything trains.  Every run of a batch
    failed: ``failed``.  When most runs choose the grid's largest (or smallest) learning
    rate (``card_lr.lr_edge``) it says so, and with ``widen`` the later batches search one
    more rate beyond that edge (``card_lr.wider_grid``), once per side.  ``max_spread``: the
    card's N50 interval target (``run_card.build_run_card``; None: 1.3); ``futility``: stop
    early as a bound when the target is out of the budget's reach (:func:`futile`)."""
    run_card.check_spread(max_spread)  # before anything trains
    d, vocab = int(base["model"]["d_model"]), int(base["task"]["vocab_size"])
    top = vocab // 2 - 1
    budget = float(work_budget) * 1e6
    train = base.get("train") or {}
    n_lr = len(train["lr"]) if isinstance(train.get("lr"), list) else 1
    nominal = n_lr * int(train.get("max_steps") or 0) * int(train.get("batch_size") or 0)
    step = max_step or DEFAULT_STEP
    done = dict(done or {})
    start = clock()
    records: list[dict] = []
    batches: dict[int, int] = {}
    rate = 0.0  # the highest tokens trained per token of L of any run
    first_lrs = list(train["lr"]) if isinstance(train.get("lr"), list) else []
    said = None  # the grid's edge last reported

    def cost(nf: int) -> float:
        return len(seeds) * 4 * nf * (rate or nominal)

    def stop(why: str, finished: bool = True, failed: bool = False) -> Result:
        card = (run_card.build_run_card(records, max_spread=max_spread) if records
                else {"status": "bound", "runs": []})
        card = {**card, "stopped": why, "work_budget_mtok": float(work_budget)}
        return Result(card, why, records, finished, failed)

    late = (f"time limit of {(time_limit_s or 0) / 60:g} min: unfinished, the same command "
            "continues from the store")

    nf, why = first_facts(d, n_eff_prior(base), vocab), "the law at S_eff = S"
    for i in range(max_batches):
        j = batches.get(nf, 0)
        cfgs = [cell_config(base, nf, s) for s in batch_seeds(seeds, j, nf)]
        have = [done.get(config_hash(c)) for c in cfgs]
        todo = [c for c, h in zip(cfgs, have) if h is None]
        spent = sum(run_card.work_tokens(r) for r in records if r.get("status") == "ok")
        left = budget - spent
        if todo and cost(nf) > left:
            if i == 0 and run_cell is not None:  # nothing would train: not a card
                raise ConfigError(
                    f"a work budget of {work_budget:g} Mtok (--work-budget) is not allowed: the "
                    f"first batch (N_f = {nf}, "
                    f"{len(seeds)} run(s) of {n_lr} learning rate(s) x {train.get('max_steps')} "
                    f"steps x {train.get('batch_size')} sequences of L = {4 * nf}) needs about "
                    f"{cost(nf) / 1e6:.3g} Mtok: give at least {math.ceil(cost(nf) / 1e6)}, or "
                    "fewer train.max_steps")
            return stop(f"work budget: the next batch (N_f = {nf}) needs about "
                        f"{cost(nf) / 1e6:.0f} Mtok, {max(left, 0) / 1e6:.0f} of "
                        f"{work_budget:g} left")
        if todo and run_cell is None:
            return stop(f"the search stopped before N_f = {nf} (batch {j + 1}): no run of it "
                        "in the store", finished=False)
        if todo and time_limit_s is not None and clock() - start > time_limit_s:
            return stop(late, finished=False)
        if todo:
            say(f"capacity: batch {i + 1}: N_f = {nf}, L = {4 * nf}, seeds "
                f"{','.join(str(seed_parts(c['train']['seed'])[0]) for c in todo)}"
                f"{f', batch {j + 1} at this N_f' if j else ''} ({why}); about "
                f"{cost(nf) / 1e6:.0f} Mtok of {max(left, 0) / 1e6:.0f} left")
        try:
            got = (run_cell(todo, Limit(wall_until=time.time() + time_limit_s - (clock() - start)))
                   if cut and time_limit_s is not None else run_cell(todo)) if todo else []
        except BudgetSpent:
            say(f"capacity: the time limit ran out while N_f = {nf} trained: its runs were "
                "stopped and not stored (the same command trains them again)")
            return stop(late, finished=False)
        new = [h for h in have if h is not None] + list(got)
        records += new
        batches[nf] = j + 1
        for r in new:
            if r.get("status") == "ok":
                rate = max(rate, run_card.work_tokens(r) / (4 * nf))
        card = run_card.build_run_card(records, max_spread=max_spread)
        say(_progress(card, nf, bool(todo), spent, work_budget))
        edge = lr_edge(card["runs"], train.get("lr"))
        if edge is not None and edge[0] != said:
            said = edge[0]
            wider = wider_grid(train["lr"], edge[0], first_lrs) if widen else None
            say(f"capacity: the chosen learning rate sits at the edge of the grid ({edge[0]:g} "
                f"in {edge[1]} of {edge[2]} runs that learned)" + (
                    f": the batches that follow search {', '.join(f'{x:g}' for x in wider)}"
                    if wider else "; a wider grid (--set train.lr=[...]) may recall more"))
            if wider:
                train = {**train, "lr": wider}
                base = {**base, "train": train}
        if card["status"] == "measured":
            return stop("measured")
        spent_now = spent + sum(run_card.work_tokens(r) for r in new if r.get("status") == "ok")
        futile_why = futile(card, spent_now, budget) if futility else None
        if futile_why:
            return stop(futile_why)
        if not any(r.get("status") == "ok" for r in new):
            return stop("every run of N_f = {} failed: {}".format(
                nf, next((str(r.get("error")) for r in new if r.get("error")), "see the store")),
                failed=True)
        nf, why = _next(card, step, top, cost, len(seeds), budget - spent_now)
        if nf is None:
            return stop(why)
    return stop(f"{max_batches} batches")


def futile(card: Mapping, spent: float, budget: float) -> str | None:
    """Why a bracketed, unmeasured card cannot reach its interval target within the work
    budget, or None: once :data:`FUTILITY_AFTER` of it is spent (tokens), the target is out of
    reach when spent·(ln spread / ln target)² exceeds the budget, the log-width of the interval
    shrinking as 1/√work (a fixed design's rate; trained cards narrowed faster, so it errs
    towards stopping).  Studied in simulation and not used by the commands or suites: it
    drops the cards that narrow late (docs/results/capacity)."""
    crit = card.get("criteria") or {}
    sp, target = crit.get("spread"), crit.get("max_spread")
    if (card.get("status") == "measured" or not crit.get("bracketed") or not sp or not target
            or spent < FUTILITY_AFTER * budget):
        return None
    need = spent * (math.log(sp) / math.log(target)) ** 2
    return None if need <= budget else (
        f"futility: its N50 interval spans a factor {sp:.3g}; narrowing as 1/√work it would "
        f"reach {target:g} after about {need / 1e6:.0f} Mtok, past the work budget of "
        f"{budget / 1e6:g} ({spent / 1e6:.0f} spent)")


def _next(card, step, top, cost, runs, left) -> tuple[int | None, str]:
    ok = [r for r in card["runs"] if r.get("accuracy") is not None]
    med = _medians(ok)
    if card["status"] == "no recall" or not (max(med.values()) > 0 > min(med.values())):
        nf, why = _bracket(med, step)
    else:
        f = runfit.fit_runs([r["num_facts"] for r in ok], [r["correct"] for r in ok],
                            [r["total"] for r in ok], [r["units"] for r in ok],
                            [r["guess"] for r in ok], [not r["converged"] for r in ok])
        lo, hi = min(med), max(med)
        nf, why = _narrow(ok, f, max(MIN_FACTS, int(lo / step)), min(top, int(hi * step)),
                          cost, runs, left)
    if nf is not None and nf < MIN_FACTS:
        if card["status"] == "no recall":
            return None, "no N_f left below: the smallest N_f is at the guess level"
        at = [r for r in ok if r["num_facts"] == MIN_FACTS]
        if len(at) < FLOOR_BATCHES * runs:  # a failure can sink the median of a few runs
            return MIN_FACTS, (f"N_f = {MIN_FACTS}, the smallest, again: {len(at)} run(s) "
                               f"there, {FLOOR_BATCHES * runs} before N50 is said to lie below")
        return None, (f"N50 lies below N_f = {MIN_FACTS}, the smallest N_f whose guess level "
                      f"is under 1: its median run of {len(at)} is under q = 1/2")
    if nf is not None and nf > top:
        return None, (f"the capacity is beyond V/2 - 1 = {top} keys: rerun with a larger "
                      "--vocab-size")
    return nf, why


def _progress(card: Mapping, nf: int, trained: bool, spent: float, budget: float) -> str:
    rows = [r for r in card["runs"] if r["num_facts"] == nf]
    accs = ", ".join("failed" if r["accuracy"] is None else f"{r['accuracy']:.3f}" for r in rows)
    text = f"capacity: N_f = {nf}: runs {accs}" + ("" if trained else " (from the store)")
    n50 = card.get("n50") or {}
    lo, hi = n50.get("ci") or (None, None)
    if n50.get("bound") in ("lower", "upper"):
        edge = (f"≥ {lo:.3g}" if n50["bound"] == "lower" and lo else
                f"≤ {hi:.3g}" if n50["bound"] == "upper" and hi is not None else "")
        text += f"; N50 {edge} (not bracketed yet)".replace("N50  ", "N50 ")
    elif n50.get("value") is not None:
        ci = f"[{lo:.3g}, {'∞' if hi is None else f'{hi:.3g}'}]"
        text += (f"; N50 {n50['value']:.3g} {ci} (measured)" if card["status"] == "measured"
                 else f"; N50 unresolved in {ci}: {card.get('why')}")
    return text + f"; {card['work_mtok']:.0f} of {budget:g} Mtok"


def replay(base: Mapping[str, Any], records, *, seeds: Sequence[int],
           work_budget: float = DEFAULT_WORK_MTOK, max_batches: int = MAX_BATCHES,
           max_step: float | None = None, max_spread: float | None = None,
           futility: bool = False) -> Result:
    """The search over ``records`` alone, training nothing (the same cells as the run that
    made them, the search being a function of its records)."""
    done = {r["config_hash"]: r for r in records
            if r.get("status") == "ok" and r.get("config_hash")}
    return measure(base, seeds=seeds, work_budget=work_budget, run_cell=None, done=done,
                   max_batches=max_batches, say=lambda _: None, max_step=max_step,
                   max_spread=max_spread, futility=futility)


def run(base: Mapping[str, Any], *, seeds: Sequence[int], store, workers: int = 1,
        say: Callable[[str], None] = print, executor=None, **kwargs) -> Result:
    """:func:`measure` with real training into ``store`` (``capacity.trained``, on
    ``executor`` if given)."""
    from recallbench.runs.capacity import trained

    with trained(store, workers, say=say, executor=executor) as (done, run_cell):
        return measure(base, seeds=seeds, run_cell=run_cell, done=done, say=say, cut=True,
                       **kwargs)
