"""Capacity suites (``capacity`` in suite.yaml; leaderboards/cpu-v3): run, submit, check.

A capacity suite has no grid of N_f.  Per (adapter, budget), ``leaderboard run`` runs
``recallbench capacity``'s search (:mod:`recallbench.runs.capacity`) with the suite's
protocol into the store; ``submit`` **replays** that search over the store
(:func:`recallbench.runs.capacity.replay`: the search is a function of the records, so the
replay visits the cells the run visited, in order, and trains nothing) and writes, per
budget, every run of the visited cells as points and the capacity card they make
(``law.card``).  Validation replays the search over the submission's own points: the search
must have ended (a replay that stops before a cell the points lack is an interrupted run,
not a card), the cells must be the ones it visits (no cell chosen by hand, none left out),
and the stored card must be the one the points make, field by field (``checks.difference``:
every key, type and value, whatever the card's schema holds).  A suite of card method 2
(``capacity.method: 2``) runs, replays and checks :mod:`recallbench.runs.card_search`
instead, through :mod:`recallbench.leaderboard.capacity.method2`.

    base = budget_base(suite, "linear-mamba", suite.budget("D32-N8"))
    found = capacity_points(suite, records, "linear-mamba")   # build_submission: per budget
                                                              # (budget, [(point, record)], card)
    check_cards(sub, suite, where, records_of)                 # validate
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Mapping

from recallbench.api.canonical import plain, sha256_of
from recallbench.api.errors import ConfigError
from recallbench.leaderboard.capacity import method2 as v2
from recallbench.leaderboard.capacity.shape_entry import flag
from recallbench.leaderboard.checks import difference, need, short
from recallbench.leaderboard.suite import Suite

#: how a replay says the records end before the search did (``runs.capacity.measure``,
#: ``runs.card_search.measure``)
UNFINISHED = "the search stopped before"


def budget_base(suite: Suite, adapter: str, budget: Mapping,
                model_extra: Mapping | None = None, shape: Mapping | None = None) -> dict:
    """The resolved config the search starts from for one budget (its first cell's, N_f 2),
    at ``shape`` if given (``shape_entry``: another shape of the budget's S)."""
    from recallbench.api.config import resolve
    from recallbench.leaderboard.capacity.shape_entry import budget_config

    point = {"budget": budget["name"], "num_facts": 2, "seed": suite.seeds[0]}
    base = resolve(suite.point_config(adapter, point, model_extra)).to_dict()
    return budget_config(suite, budget, shape, base)


def chosen(suite: Suite, names: list[str] | None) -> list[dict]:
    """The suite's budgets named in ``names`` (all for None), in the suite's order; a
    ConfigError naming ``--budget`` and the allowed names for an unknown one."""
    allowed = [b["name"] for b in suite.budgets]
    for n in names or []:
        if n not in allowed:
            raise ConfigError(f"--budget {short(n)} is not allowed: one of "
                              f"{', '.join(allowed)} (suite {suite.name})")
    return [b for b in suite.budgets if names is None or b["name"] in names]


def cpu_budget_s(suite: Suite) -> float:
    """The CPU seconds a card's runs may take (``capacity.cpu_budget_min``)."""
    return float(suite.capacity["cpu_budget_min"]) * 60.0


def max_step(suite: Suite) -> float | None:
    """The search's ``capacity.max_step``: None (no limit) unless the suite sets it."""
    step = suite.capacity.get("max_step")
    return None if step is None else float(step)


def fit_budget(suite: Suite) -> bool:
    """The search's ``capacity.fit_budget``: False (a next cell that does not fit the budget
    left stops the search, as cpu-v3 searched) unless the suite sets it."""
    return bool(suite.capacity.get("fit_budget", False))


def run_capacity_suite(suite: Suite, adapter: str, store: str | Path, *,
                       model_extra: Mapping | None = None, shape: Mapping | None = None,
                       workers: int = 1,
                       log: Callable[[str], None] = print,
                       refuse_stale: bool = False, executor=None,
                       budgets: list[str] | None = None) -> dict[str, dict]:
    """Every budget's search (or those named in ``budgets``) for ``adapter`` into ``store``
    (resumes from it); the cards.
    ``shape``: every budget at that state shape (``shape_entry``).
    Each card's runs go to ``executor`` (one of :mod:`recallbench.runs.executors`, a Ray
    cluster's included; the caller closes it) if given, else to ``workers`` processes.
    First, every budget's stored runs made by other adapter source are warned about through
    ``log``, or with ``refuse_stale`` stop it before anything trains
    (:func:`recallbench.runs.stale.stale_policy`)."""
    from recallbench.api.registry import ADAPTERS
    from recallbench.runs import capacity
    from recallbench.runs.stale import stale_policy

    ADAPTERS.require(adapter, where=f"suite {suite.name}")
    bases = [(b, budget_base(suite, adapter, b, model_extra, shape))
             for b in chosen(suite, budgets)]
    seeds = ((lambda s, nf: v2.seed_allowed(s, nf, suite)) if v2.is_v2(suite)
             else suite.seeds)
    for b, base in bases:
        stale_policy(base, seeds, store, refuse=refuse_stale, say=log)
    cards = {}
    for b, base in bases:
        if v2.is_v2(suite):
            result = v2.run(suite, adapter, b, base, store, workers, log, executor)
            cards[b["name"]] = result.card
            why = "" if result.stopped == result.card["status"] else f" ({result.stopped})"
            log(f"  {b['name']}: {result.card['status']}{why}")
            continue
        log(f"suite {suite.name}, adapter {adapter}, budget {b['name']}: capacity search, "
            f"at most {suite.capacity['max_cells']} cells and "
            f"{suite.capacity['cpu_budget_min']:g} CPU-min")
        result = capacity.run(base, seeds=suite.seeds, store=store, budget_s=cpu_budget_s(suite),
                              max_cells=int(suite.capacity["max_cells"]), workers=workers,
                              delta=float(suite.scoring["delta"]), say=log, cpu=True,
                              max_step=max_step(suite),
                              fit_budget=fit_budget(suite), executor=executor)
        cards[b["name"]] = result.card
        log(f"  {b['name']}: {result.card['status']} ({result.stopped})")
    return cards


def plan_capacity_suite(suite: Suite, adapter: str, store: str | Path, *,
                        model_extra: Mapping | None = None, shape: Mapping | None = None,
                        workers: int = 1,
                        log: Callable[[str], None] = print,
                        budgets: list[str] | None = None) -> dict[str, float]:
    """``leaderboard run --dry-run`` of a capacity suite: per budget, what the store already
    holds (its cells and CPU minutes, replayed as ``run`` would reuse them), a measured step
    time at the first cell, and an ETA bounded by the card's CPU budget.  Trains nothing but
    the few steps that time a step.  Returns the upper ETA per budget, in CPU minutes.
    Method 2: the store's batches and training work against the work budget instead."""
    from recallbench.api.registry import ADAPTERS
    from recallbench.runs import capacity
    from recallbench.runs.eta import minutes
    from recallbench.runs.store import Store

    ADAPTERS.require(adapter, where=f"suite {suite.name}")
    records = ([r for r in Store(store).read(warn=lambda _: None).by_hash.values()
                if r.get("status") == "ok"
                and r["config"]["model"].get("adapter") == adapter]
               if Path(store).is_dir() else [])
    budget_s, left = (None if v2.is_v2(suite) else cpu_budget_s(suite)), {}
    for b in chosen(suite, budgets):
        base = budget_base(suite, adapter, b, model_extra, shape)
        mine = _of_budget(b, records, base["model"] if shape else None)
        done = _replay(suite, mine[0]["config"], mine) if mine else None
        if budget_s is None:
            over = done is not None and not unfinished(done)
            left[b["name"]] = v2.plan(suite, b, base, done, over, workers, log)
            continue
        spent = sum(float(r.get("cpu_s") or 0.0) for r in done.records) if done else 0.0
        cells = len(done.card.get("cells", [])) if done else 0
        head = (f"{b['name']}: the store holds {cells} cell(s) of the search, "
                f"{spent / 60:.1f} CPU-min" if done and done.records
                else f"{b['name']}: nothing in the store yet")
        if done and done.records and not unfinished(done):
            why = "" if done.stopped == done.card["status"] else f" ({done.stopped})"
            log(f"{head}; the search is over, {done.card['status']}{why}: nothing to run")
            left[b["name"]] = 0.0
            continue
        est = capacity.estimate(base, suite.seeds, cells_done=cells)
        rest = max(budget_s - spent, 0.0)
        eta = tuple(min(cpu, rest) for cpu in est.cpu_s)
        left[b["name"]] = eta[1] / 60
        more = est.runs
        runs = str(more[0]) if more[0] == more[1] else f"{more[0]} to {more[1]}"
        nf, (lo, hi) = est.num_facts, est.run_s
        log(f"{head}; measured {est.step_s * 1000:.1f} ms a step at the first cell (N_f = {nf}, "
            f"L = {4 * nf}), one of its runs {minutes(lo)} to {minutes(hi)} of CPU")
        log(f"  ETA: {eta[0] / 60:.1f} to {eta[1] / 60:.1f} CPU-min ({runs} "
            f"more runs, later ones at up to twice this L; at most {rest / 60:.1f} CPU-min, "
            f"the card's {budget_s / 60:g} less the store's), about {eta[0] / 60 / workers:.1f}"
            f" to {eta[1] / 60 / workers:.1f} min of wall time on {workers} worker(s)")
    total = sum(left.values())
    log("in all: nothing to run" if not total else
        f"in all: at most about {total:.1f} CPU-min, {total / workers:.1f} min of wall time "
        f"on {workers} worker(s)")
    log("(dry run: nothing was trained)")
    return left


#: replays already made, by a hash of their inputs (validate, render and states replay each
#: submission's points again; a replay is a function of its inputs)
_REPLAYS: dict[str, object] = {}
_MAX_REPLAYS = 64


def _replay(suite: Suite, base: Mapping, records: list[Mapping]):
    """The search over ``records`` from ``base`` (a config of the budget: a record's, so
    that model settings beyond the suite's, given to `leaderboard run` with --set, are in);
    a copy of the one made before from the same suite data, base and records."""
    try:
        key = sha256_of([suite.data, suite.seeds, base, records])
    except (TypeError, ValueError):  # a value JSON cannot hold: replayed without the memo
        return _replay_now(suite, base, records)
    if key not in _REPLAYS:
        if len(_REPLAYS) >= _MAX_REPLAYS:
            _REPLAYS.pop(next(iter(_REPLAYS)))
        _REPLAYS[key] = _replay_now(suite, base, records)
    return copy.deepcopy(_REPLAYS[key])


def _replay_now(suite: Suite, base: Mapping, records: list[Mapping]):
    from recallbench.runs import capacity

    if v2.is_v2(suite):
        return v2.replay(suite, base, records)
    return capacity.replay(base, records, seeds=suite.seeds,
                           max_cells=int(suite.capacity["max_cells"]),
                           delta=float(suite.scoring["delta"]), cpu_budget_s=cpu_budget_s(suite),
                           max_step=max_step(suite), fit_budget=fit_budget(suite))


def unfinished(result) -> bool:
    """Whether a replay ran out of records before the search ended (an interrupted run)."""
    return result.stopped.startswith(UNFINISHED)


def _finish(suite: Suite, adapter: str, shape: Mapping | None = None,
            reseeding: tuple[str, str] | None = None) -> str:
    """How to finish an unfinished search: the run that made it, or (``reseeding``: the
    model's name and the re-seeding's file) the verify that re-seeds it."""
    if reseeding:
        return (f"an unfinished search is not a card: rerun `recallbench leaderboard verify "
                f"{suite.dir}/submissions/{reseeding[0]}.yaml --reseed --store STORE "
                f"--from-reseeding {reseeding[1]} --write NEW_FILE` to finish it")
    return (f"an unfinished search is not a card: rerun `recallbench leaderboard run --suite "
            f"{suite.dir} --adapter {adapter}{flag(shape)} --store STORE` with the same store "
            "to finish it, then submit again")


def stored_card(card: Mapping) -> dict:
    """The card as a submission stores it (its provenance is the submission's)."""
    return plain({k: v for k, v in card.items() if k not in ("provenance", "model")})


def _of_budget(budget: Mapping, records: list[Mapping], model: Mapping | None = None
               ) -> list[Mapping]:
    """The records whose model has the budget's sizes, or is ``model`` (a shape's) if given."""
    if model is not None:
        return [r for r in records if r["config"]["model"] == model]
    return [r for r in records
            if all(r["config"]["model"].get(k) == v for k, v in budget["model"].items())]


def capacity_points(suite: Suite, records: list[Mapping], adapter: str,
                    shape: Mapping | None = None) -> list[tuple[dict, dict, dict]]:
    """Per budget: (budget, [(point, record)], card) of the cells the replayed search visits
    (of ``shape``'s runs where given)."""
    out = []
    for b in suite.budgets:
        mine = _of_budget(b, records, budget_base(suite, adapter, b, shape=shape)["model"]
                          if shape else None)
        result = _replay(suite, mine[0]["config"], mine) if mine else None
        need(result is not None and bool(result.records), "submit",
             f"the store holds no run of budget {b['name']} for adapter {adapter} that starts "
             f"the search (run `recallbench leaderboard run --suite {suite.dir} --adapter "
             f"{adapter}{flag(shape)} --store ...`)")
        need(not unfinished(result), f"submit: budget {b['name']}",
             f"{result.stopped}; {_finish(suite, adapter, shape)}")
        pairs = [({"budget": b["name"], "num_facts": r["config"]["task"]["num_facts"],
                   "seed": r["config"]["train"]["seed"]}, r) for r in result.records]
        card = {**stored_card(result.card), "stopped": result.stopped}
        out.append((b, pairs, {**card, "machine": v2.machines(result.records)}
                    if v2.is_v2(suite) else card))
    return out


def check_cards(sub: Mapping, suite: Suite, where: str, records_of: Callable) -> None:
    """Each budget's search ended, its cells are the replayed search's, and its card is the
    one they make: every field, of the recomputed card's type, none added or left out.

    ``records_of(budget_entry)``: the budget's points as result records."""
    for b in sub["budgets"]:
        bw = f"{where}: budget {b['name']}"
        card = b.get("card")
        need(isinstance(card, dict), bw, "card must be a mapping (a capacity suite's budget)")
        records = records_of(b)
        if v2.is_v2(suite):  # a run's work counts each lr candidate: the points hold them
            records = v2.with_protocol(records, b["points"])
        result = _replay(suite, b["config"], records)
        visited = {(r["config"]["task"]["num_facts"], r["config"]["train"]["seed"])
                   for r in result.records}
        given = {(p["num_facts"], p["seed"]) for p in b["points"]}
        extra = sorted(given - visited)
        need(not (extra and unfinished(result)), bw, f"a cell of the search is missing: "
             f"{result.stopped}, yet the points go on (N_f={extra[0][0] if extra else ''}): "
             "a cell left out of the middle of the search")
        need(not extra, bw, f"point N_f={extra[0][0] if extra else ''} seed="
             f"{extra[0][1] if extra else ''} is not a cell the capacity search visits "
             "(a cell chosen by hand, or one after the search stopped)")
        m = sub["model"]
        again = _finish(suite, m["adapter"], m.get("shape"),
                        (m.get("name") or m["adapter"], where) if "reseed_of" in sub else None)
        need(not unfinished(result), bw, f"{result.stopped}; {again}")
        fresh = {**stored_card(result.card), "stopped": result.stopped,
                 **(v2.claimed(card, bw) if v2.is_v2(suite) else {})}
        unknown = [k for k in card if k not in fresh]
        need(not unknown, bw, f"card holds the unknown field {short(unknown[0]) if unknown else ''}"
             f": a card holds the fields of the one its points make ({', '.join(fresh)})")
        for k, new in fresh.items():
            found = difference(card.get(k), new, f"card.{k}") if k in card else \
                f"card lacks the field {k!r}"
            need(found is None, bw, f"card.{k} does not match the card recomputed from the "
                 f"points: {found} (numbers agree within 2%, integers and texts exactly)")


def check_point_facts(p: Mapping, suite: Suite, pw: str) -> None:
    """A capacity suite's point: N_f in the search's range, a seed of the suite (method 2:
    of a batch, a suite seed + 1000·j + 100000·N_f)."""
    lo, hi = suite.facts_range()
    need(lo <= p["num_facts"] <= hi, pw, f"num_facts = {short(p['num_facts'])} is not allowed: "
         f"the search's range is [{lo}, {hi}] (V/2 - 1 keys)")
    if v2.is_v2(suite):
        return v2.check_point_seed(p, suite, pw)
    need(p["seed"] in suite.seeds, pw, f"seed = {short(p['seed'])} is not one of the suite's "
         f"seeds {suite.seeds}")


def check_cells_complete(b: Mapping, suite: Suite, bw: str) -> None:
    """Every N_f of a budget has a run of every seed (method 2: every batch)."""
    if v2.is_v2(suite):
        return v2.check_batches_complete(b, suite, bw)
    seen: dict[int, set] = {}
    for p in b["points"]:
        seen.setdefault(p["num_facts"], set()).add(p["seed"])
    for nf, seeds in sorted(seen.items()):
        missing = sorted(set(suite.seeds) - seeds)
        if missing:
            raise ConfigError(f"{bw}: the cell N_f={nf} lacks seed {missing[0]} (a cell is "
                              "every seed of the suite)")
    need(bool(seen), bw, "no points")
