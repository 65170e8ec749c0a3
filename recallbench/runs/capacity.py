"""``recallbench capacity`` method 1 (the retired board cpu-v3's): place MQAR cells over N_f until
they bracket one model's capacity.  Method 2 is :mod:`recallbench.runs.card_search`.

    result = measure(base_config, seeds=(0, 1), budget_s=1800, run_cell=..., done=...)
    result.card          # recallbench.law.card: "measured", "bound" or "no recall"

One model configuration (adapter, D, N, Λ) on MQAR with L = 4·N_f at one vocabulary V.  The
search starts from the law's prediction at S_eff = S; after each cell it refits S_eff with the
guess-aware law (``law.card``) and places the next N_f where the fit predicts the accuracy the
card lacks: p = 0.75 while no converged cell between the guess and 0.95 lies at or above 0.5,
p = 0.4 while none lies below, else the first of 0.6, 0.4, 0.8, 0.2 at least 0.1 from every such
cell (else the least covered).  A cell at the ceiling with no finite fit doubles the largest N_f,
one at the guess with nothing above halves the smallest; ``max_step`` R keeps each new N_f within
R times those measured; N_f stays in :data:`MIN_FACTS` to V/2 − 1.  It stops when the card is
measured (``law.card.criteria``), when the next N_f was measured or leaves that range, after
``max_cells``, when every run of a cell failed, or when the time left cannot hold the next cell
(from the highest time per token of L so far; with ``cut`` also mid-cell).  ``fit_budget`` turns
a next cell that does not fit into the largest N_f beyond those measured that does
(:func:`recallbench.runs.budget.fitting_facts`).  Records are stored as they finish: reruns resume.
"""
from __future__ import annotations

import bisect
import contextlib
import copy
import dataclasses
import math
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from recallbench.api.canonical import config_hash
from recallbench.api.config import resolve
from recallbench.law import card as cards
from recallbench.law import theory
from recallbench.runs.budget import BudgetSpent, cell_limit, fitting_facts

MIN_FACTS = 2  # at N_f = 1 the guess level is 1: nothing to measure
TARGETS = (0.6, 0.4, 0.8, 0.2)
SPACING = 0.1  # a new target at least this far from every cell already between the ends
MAX_CELLS = 12
FLAT, SCAN = 1e-12, 4096  # :func:`nearest_facts`: one flat stretch; the most N_f compared
#: the allowed ``max_step`` R (``capacity --max-step``, a suite's ``capacity.max_step``)
MAX_STEP_RANGE = (1.5, 100.0)
#: the protocol every card trains with (``capacity --set`` changes it; the card records it;
#: a capacity suite's ``train``, leaderboards/cpu-v3, is this)
TRAIN = {"lr": [0.003, 0.01, 0.03], "max_steps": 2000, "max_steps_limit": 8000,
         "patience": 10, "batch_size": 32, "val_every": 50, "early_stop": 0.999,
         "val_size": 512, "test_size": 1024}
#: how many cells a measured card usually takes (for ETAs: a plan, not a limit)
EXPECTED_CELLS = (3, 6)


def protocol_lr(adapter: str, lr):
    """The learning rate a card trains ``adapter`` with: ``lr``, or 0.01 for an adapter that
    trains nothing (``trainable = False``: no learning rate to search)."""
    from recallbench.api.registry import ADAPTERS

    return lr if getattr(ADAPTERS.require(adapter), "trainable", True) else 0.01


def cell_config(base: Mapping[str, Any], num_facts: int, seed: int) -> dict:
    """``base`` at N_f facts, L = 4·N_f, seed ``seed`` (canonical, as the store hashes it)."""
    cfg = copy.deepcopy(dict(base))
    cfg["task"] = {**dict(cfg.get("task") or {}), "name": "mqar", "num_facts": int(num_facts),
                   "seq_len": 4 * int(num_facts)}
    cfg["train"] = {**dict(cfg.get("train") or {}), "seed": int(seed)}
    return resolve(cfg).to_dict()


def predicted(num_facts, d_model: int, n_eff: float, vocab: int, share: float,
              family: str = "mqar"):
    """Accuracy the guess-aware law predicts at N_f: φ·g + (1 − φ·g)·p_ref, g = 1/N_f."""
    nf = np.asarray(num_facts, float)
    a = theory.coefficient_a("linear", family)
    p = np.asarray(theory.recall_probability(vocab, nf, d_model, n_eff, a), float)
    f = share / nf
    return f + (1.0 - f) * p


def next_facts(card: Mapping, d_model: int, n_eff0: float, vocab: int,
               max_step: float | None = None) -> tuple[int | None, str]:
    """The next N_f to measure and why, or (None, reason) when the search cannot go on;
    within ``max_step`` times the N_f measured (module doc) when given."""
    cells = card["cells"]
    done = {c["num_facts"] for c in cells}
    top = (vocab // 2) - 1
    n_eff = (card.get("n_eff") or {}).get("value", n_eff0)
    share = card.get("guess_share")
    share = 1.0 if share is None else share
    usable = [c for c in cells if c.get("accuracy") is not None]
    at_ceiling = bool(usable) and (
        (n_eff is not None and math.isinf(n_eff))
        or all(c["accuracy"] >= cards.CEILING for c in usable))
    if at_ceiling:
        nf, why = 2 * max(c["num_facts"] for c in usable), "every cell at the ceiling"
    elif usable and not any(c.get("recall") for c in usable):
        nf, why = min(c["num_facts"] for c in usable) // 2, "every cell at the guess level"
    else:
        mid = [c for c in cells if c.get("mid")]
        if not any(c["accuracy"] >= 0.5 for c in mid):
            target = 0.75
        elif not any(c["accuracy"] < 0.5 for c in mid):
            target = 0.4
        else:  # the first target clear of every mid cell: the higher, the smaller N_f and L
            accs = [c["accuracy"] for c in mid]
            target = next((t for t in TARGETS if min(abs(t - a) for a in accs) >= SPACING),
                          max(TARGETS, key=lambda t: min(abs(t - a) for a in accs)))
        nf = nearest_facts(d_model, n_eff if n_eff and n_eff > 0 else n_eff0, vocab, target,
                           share, done)
        why = f"aiming at p = {target}" if nf is not None else ""
    if max_step and nf is not None and done:
        hi, lo = math.floor(max_step * max(done)), math.ceil(min(done) / max_step)
        if nf > hi or nf < lo:
            nf, why = min(max(nf, lo), hi), f"{why}, a step of at most {max_step:g}x"
    if nf is None or nf < MIN_FACTS:
        return None, "no N_f left below: the smallest N_f is at the guess level"
    if nf > top:
        return None, (f"the capacity is beyond V/2 - 1 = {top} keys of V = {vocab}: "
                      "rerun with a larger --vocab-size")
    if nf in done:
        return None, f"N_f = {nf} measured already"
    return nf, why


@dataclasses.dataclass
class Result:
    card: dict
    stopped: str
    records: list[dict]
    failed: bool = False  # stopped because every run of a cell failed (``stopped`` says why)


def measure(base: Mapping[str, Any], *, seeds: Sequence[int] = (0, 1), budget_s: float = 3600.0,
            run_cell: Callable[[list[dict]], list[dict]] | None, done: Mapping[str, dict] | None = None,
            max_cells: int = MAX_CELLS, delta: float = 0.01,
            say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
            cpu: bool = False, max_step: float | None = None,
            fit_budget: bool = False, cut: bool = False) -> Result:
    """Run the search (module doc).  ``run_cell(configs) -> records`` trains one cell's
    seeds (the caller stores them); ``done``: records already in the store, by config hash,
    reused instead of trained.  ``run_cell=None`` replays the search over ``done`` alone
    (:func:`replay`).  ``cpu``: ``budget_s`` is CPU seconds of the card's runs (their
    ``cpu_s``, those reused from the store included), not wall time: the same card on a
    shared or a faster machine stops at the same cell.  ``fit_budget``: a next cell beyond
    those measured that would not fit in the budget left becomes the largest that does
    (:func:`fitting_facts`) instead of stopping the search.  ``cut`` (``capacity``; not a
    suite's, whose store must replay to its stop): ``run_cell(configs, limit)`` stops runs
    still training when the budget is spent (:func:`cell_limit`), unstored, and the search."""
    d = int(base["model"]["d_model"])
    vocab = int(base["task"]["vocab_size"])
    n_eff0 = n_eff_prior(base)
    done = dict(done or {})
    records: list[dict] = []
    start = clock()
    rate = 0.0  # the highest seconds per token of L of a trained cell
    unit = "CPU-min" if cpu else "min"

    def spent(recs) -> float:
        return sum(float(r.get("cpu_s") or 0.0) for r in recs)

    def elapsed() -> float:
        return spent(records) if cpu else clock() - start

    def stop(why: str, failed: bool = False) -> Result:  # the card of the records so far
        made = cards.build_card(records, delta=delta) if records else {"cells": []}
        return Result({**made, "stopped": why}, why, records, failed)

    def runs(nf: int) -> tuple[list, list[dict]]:
        """N_f's runs per seed from the store (None where missing), and the configs to train."""
        cfgs = [cell_config(base, nf, s) for s in seeds]
        have = [done.get(config_hash(c)) for c in cfgs]
        return have, [c for c, h in zip(cfgs, have) if h is None]

    card: dict = {"cells": []}
    nf = nearest_facts(d, n_eff0, vocab)
    for i in range(max_cells):
        if nf is None:
            break
        have, todo = runs(nf)
        need = rate * 4 * nf
        left = budget_s - elapsed()
        fit = (fitting_facts(nf, rate, left, [c["num_facts"] for c in card["cells"]])
               if todo and need > left and fit_budget else None)
        if fit is not None:
            say(f"capacity: N_f = {nf} would need about {need / 60:.1f} {unit}, "
                f"{max(left, 0) / 60:.1f} {unit} of the budget left: N_f = {fit} instead, "
                "the largest that fits")
            nf = fit
            have, todo = runs(nf)
            need = rate * 4 * nf
        if todo and need > left:
            say(f"capacity: stop: the next cell (N_f = {nf}) needs about {need / 60:.1f} {unit}, "
                f"{max(left, 0) / 60:.1f} {unit} of the budget left")
            return stop("CPU budget" if cpu else "time budget")
        if todo and run_cell is None:  # a replay of the store: the search stopped here
            return stop(f"the search stopped before N_f = {nf} (no run of it in the store: an "
                        "interrupted run, or a wall-time budget)")
        if todo:
            say(f"capacity: cell {i + 1}: N_f = {nf}, L = {4 * nf}: training {len(todo)} run(s)"
                + (f", about {need / 60:.1f} {unit} at the highest rate so far" if need
                   else " (the first trained cell: its time sets the rate for the next ones)")
                + f"; {max(left, 0) / 60:.1f} {unit} of the budget left")
        t0 = clock()
        try:
            got = (run_cell(todo, cell_limit(left, len(todo), cpu)) if cut else run_cell(todo)
                   ) if todo else []
        except BudgetSpent:
            say(f"capacity: stop: the budget ran out while N_f = {nf} trained: its runs were "
                "stopped and not stored (a rerun trains them again)")
            return stop("CPU budget" if cpu else "time budget")
        took = spent([h for h in have if h is not None] + got) if cpu else clock() - t0
        if todo or cpu:
            rate = max(rate, took / (4 * nf))
        records += [h for h in have if h is not None] + got
        card = cards.build_card(records, delta=delta)
        cell = next(c for c in card["cells"] if c["num_facts"] == nf)
        say(_progress(i + 1, cell, card, elapsed(), budget_s, bool(todo), cpu))
        if cell.get("accuracy") is None:  # every seed failed: the next cell would too
            why = "every run of N_f = {} failed: {}".format(
                nf, next((r.get("error") for r in got if r.get("error")), "see the store"))
            say(f"capacity: stop: {why}")
            return stop(why, failed=True)
        if card["status"] == "measured":
            return stop("measured")
        nf, why = next_facts(card, d, n_eff0, vocab, max_step)
        if nf is None:
            say(f"capacity: stop: {why}")
            return stop(why)
    return stop(f"{max_cells} cells")


def replay(base: Mapping[str, Any], records, *, seeds: Sequence[int],
           max_cells: int = MAX_CELLS, delta: float = 0.01,
           cpu_budget_s: float | None = None, max_step: float | None = None,
           fit_budget: bool = False) -> Result:
    """The search over ``records`` alone, training nothing: the cells it visits in order
    (the same as the run that made them: the search is a function of the records), the card
    they make, and where it stops.  What a submission is built from and checked against.
    ``cpu_budget_s``: the run's CPU budget, which the records' ``cpu_s`` replay exactly (a
    stop for the budget reads as one); ``max_step`` and ``fit_budget`` as the run used them."""
    done = {r["config_hash"]: r for r in records
            if r.get("status") == "ok" and r.get("config_hash")}
    return measure(base, seeds=seeds, budget_s=math.inf if cpu_budget_s is None else cpu_budget_s,
                   run_cell=None, done=done, max_cells=max_cells, delta=delta,
                   say=lambda _: None, cpu=cpu_budget_s is not None, max_step=max_step,
                   fit_budget=fit_budget)


def n_eff_prior(base: Mapping[str, Any]) -> float:
    """The law's prediction before any cell: the linear reference with the model's own state,
    N_eff = S/(2·D) (for a state that grows with L, N_eff = N)."""
    from recallbench.api.registry import ADAPTERS

    probe = resolve(cell_config(base, MIN_FACTS, 0))
    state = ADAPTERS.require(probe.model.adapter)(probe.model).state_size()
    return state / (2.0 * probe.model.d_model) if state else float(probe.model.d_state)


def run(base: Mapping[str, Any], *, seeds: Sequence[int], store, budget_s: float,
        max_cells: int = MAX_CELLS, workers: int = 1, delta: float = 0.01,
        say: Callable[[str], None] = print, cpu: bool = False, executor=None,
        max_step: float | None = None, fit_budget: bool = False, cut: bool = False) -> Result:
    """:func:`measure` with real training (:func:`trained`, on ``executor`` if given)."""
    with trained(store, workers, executor=executor) as (done, run_cell):
        return measure(base, seeds=seeds, budget_s=budget_s, run_cell=run_cell, done=done,
                       max_cells=max_cells, delta=delta, say=say, cpu=cpu,
                       max_step=max_step, fit_budget=fit_budget, cut=cut)


@contextlib.contextmanager
def trained(store, workers: int = 1, say: Callable[[str], None] | None = None, executor=None):
    """``(done, run_cell)`` for a search that trains for real: ``done`` the ok records of
    ``store`` by config hash (reused on a rerun), ``run_cell(configs, limit=None)`` trains
    them on ``executor`` (:mod:`recallbench.runs.executors`, closed by its caller; a run lost
    with its Ray node: ``ray_executor.run_keeping``), else on ``workers`` processes (here
    when 1), appending each record to ``store`` as it finishes (BudgetSpent once ``limit``
    is spent, its runs not stored).  ``say``: progress lines (:mod:`recallbench.runs.progress`)."""
    from recallbench.runs.budget import limited
    from recallbench.runs.executors import make_executor
    from recallbench.runs.progress import Watch
    from recallbench.runs.ray_executor import run_keeping
    from recallbench.runs.store import Store

    store = Store(store)
    done = {h: r for h, r in store.read().by_hash.items()
            if r.get("status") == "ok"} if store.path.is_dir() else {}
    owned, executor = executor is None, executor or make_executor(
        "processes" if workers > 1 else "inprocess", workers=workers,
        threads=1 if workers > 1 else None)
    watch = None
    try:
        watch = Watch(executor, say)
        with store.open() as sink:
            def run_cell(cfgs: list[dict], limit=None) -> list[dict]:
                got: list[dict] = []
                with watch.batch(cfgs) as batch, limited(executor, limit):
                    for i, result in run_keeping(executor, [[c] for c in cfgs], say):
                        if isinstance(result, BaseException):
                            raise result
                        batch.finished(i)
                        for rec in result:
                            sink.append(rec)
                            got.append(rec)
                return got

            yield done, run_cell
    finally:
        if owned:
            executor.close()
        if watch is not None:
            watch.close()


@dataclasses.dataclass
class Estimate:
    """What a search from ``base`` will cost (:func:`estimate`); seconds of CPU."""
    num_facts: int          # the first cell's N_f
    step_s: float           # one step of it, measured
    run_s: tuple            # (earliest, latest) of one of its runs
    runs: tuple             # (fewest, most) runs still expected
    cpu_s: tuple            # (low, high) of those runs, later ones at up to twice this L


def estimate(base: Mapping[str, Any], seeds: Sequence[int], cells_done: int = 0) -> Estimate:
    """The ``--dry-run`` estimate of a search from ``base``: the first cell, a step of it
    timed (:func:`recallbench.runs.eta.step_seconds`), and the :data:`EXPECTED_CELLS` less
    the ``cells_done`` (at least one more) of ``seeds`` runs each."""
    from recallbench.runs.eta import run_seconds, step_seconds

    nf = nearest_facts(int(base["model"]["d_model"]), n_eff_prior(base),
                      int(base["task"]["vocab_size"]))
    first = cell_config(base, nf, seeds[0])
    step = step_seconds(first)
    lo, hi = run_seconds(first, step)
    runs = tuple(max(n - cells_done, 1) * len(seeds) for n in EXPECTED_CELLS)
    return Estimate(nf, step, (lo, hi), runs, (runs[0] * lo, runs[1] * hi * 2))


def nearest_facts(d: int, n_eff: float, vocab: int, target: float = 0.75, share: float = 1.0,
                  done=()) -> int | None:
    """The N_f in [MIN_FACTS, V/2 − 1], not in ``done``, where the law is nearest ``target``
    (default: the first cell's), the smallest of equals, as a stable sort of every N_f by
    the distance has it; None when all are done.  The law falls with N_f: bisection to the
    crossing, the nearest free N_f each side, and from each the stretch within :data:`FLAT`
    of its distance (flat to rounding, the last bits decide) compared whole, up to
    :data:`SCAN` N_f: some 70 evaluations of the law at any V."""
    lo, hi = MIN_FACTS, max(vocab // 2 - 1, MIN_FACTS)
    law = lambda n: float(predicted(n, d, n_eff, vocab, share))  # noqa: E731
    # the first N_f in [a, b] where ``ok`` holds (False, then True), or b + 1: a bisection
    first = lambda ok, a, b: a + bisect.bisect_left(range(a, b + 1), True, key=ok)  # noqa: E731
    cross = first(lambda n: law(n) < target, lo, hi)
    above = next((n for n in range(cross - 1, lo - 1, -1) if n not in done), None)
    below = next((n for n in range(cross, hi + 1) if n not in done), None)
    spans = []  # nothing before the first stretch, or after the second, is nearer
    if above is not None:
        gap = abs(law(above) - target) + FLAT
        spans.append((first(lambda n: abs(law(n) - target) <= gap, lo, above), cross - 1))
    if below is not None:
        gap = abs(law(below) - target) + FLAT
        spans.append((cross, first(lambda n: abs(law(n) - target) > gap, below, hi) - 1))
    grid = np.concatenate([np.arange(a, min(b, a + SCAN - 1) + 1) for a, b in spans] or [[]])
    order = np.argsort(np.abs(predicted(grid, d, n_eff, vocab, share) - target), kind="stable")
    return next((int(grid[i]) for i in order if int(grid[i]) not in done), None)


def _progress(i: int, cell: Mapping, card: Mapping, elapsed: float, budget: float,
              trained: bool, cpu: bool = False) -> str:
    acc = cell.get("accuracy")
    text = (f"capacity: cell {i}: N_f = {cell['num_facts']}, L = {cell['seq_len']}: "
            + ("failed" if acc is None else
               f"{acc:.4f} [{cell['ci'][0]:.4f}, {cell['ci'][1]:.4f}] (guess {cell['guess']:.4f}"
               f"{', no recall' if not cell.get('recall') else ''}"
               f"{', cut by the cap' if not cell.get('converged') else ''})")
            + ("" if trained else " (from the store)"))
    s = card.get("s_eff") or {}
    if s.get("value") is not None and s.get("ci"):
        lo, hi = s["ci"]
        text += f"; S_eff {s['value']:.4g} [{lo:.4g}, {'∞' if hi is None else f'{hi:.4g}'}]"
    return text + f"; {elapsed / 60:.1f} of {budget / 60:.0f} {'CPU-min' if cpu else 'min'}"
