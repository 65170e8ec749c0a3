"""Capacity suites of card method 2 (``capacity: {method: 2, work_budget_mtok: X, ...}``).

What differs from method 1, cpu-v3's (:mod:`recallbench.leaderboard.capacity.suite` holds
the rest and dispatches here): the search is :mod:`recallbench.runs.card_search`, in
batches of one run per suite seed at one N_f (the j-th batch at N_f with seeds
s + 1000·j + 100000·N_f: no two runs share a seed); it stops when the card is measured,
when the next batch would not fit the work budget (``work_budget_mtok``: millions of
tokens trained, every learning-rate candidate counted), or after ``max_batches``; each new
N_f lies within ``max_step`` times those measured.  The card is ``law.run_card``'s (schema
recallbench.card/2).

A submission's points are replayed with their learning-rate searches (the work the budget
counts), and its stored card carries ``machine``: the CPU model, CPUs and torch threads the
runs report.  No point holds those, so ``machine`` is checked for its form only: a claim,
as the submission's environment is.

    check_suite_keys(cap, data, where)           # suite.yaml's capacity mapping, method 2
    result = replay(suite, base, records)        # card_search.replay with the suite's settings
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

from recallbench.api.errors import ConfigError
from recallbench.leaderboard.checks import is_count, is_int, is_num, need, short
from recallbench.law import run_card
from recallbench.runs import card_eta, card_search
from recallbench.runs.capacity import MAX_STEP_RANGE

if TYPE_CHECKING:
    from recallbench.leaderboard.suite import Suite

#: a method-2 suite's capacity keys besides ``method`` (work_budget_mtok required); a
#: batch index j below 100 keeps s + 1000·j within a cell's seeds (``card_search.run_seed``)
KEYS = {"work_budget_mtok": card_search.WORK_RANGE, "max_batches": (1, 99),
        "max_step": MAX_STEP_RANGE, "max_spread": run_card.SPREAD_RANGE}
MACHINE_KEYS = ("model", "cpus", "threads")
MAX_MACHINES = 8
MAX_MODEL_TEXT = 200


def check_suite_keys(cap: Mapping, data: Mapping, where: str) -> None:
    """Method 2's keys: work_budget_mtok (required), max_batches, max_step, max_spread (the
    N50 interval's target, 1.3 when not set); seeds below the
    batch stride, so that a run's seed names its batch (s + 1000·j + 100000·N_f)."""
    allowed = ["method", *KEYS]
    unknown = sorted(k if isinstance(k, str) and len(k) <= 40 else short(k)
                     for k in set(cap) - set(allowed))
    need(not unknown, where, f"capacity.{unknown[0] if unknown else ''} is not a key of "
         f"method 2: a method-2 capacity suite sets {', '.join(allowed)}")
    lo, hi = KEYS["work_budget_mtok"]
    need(cap.get("work_budget_mtok") is not None, where, "capacity.work_budget_mtok is "
         f"required with method 2: millions of tokens trained, a number in [{lo:g}, {hi:g}]")
    for k, (lo, hi) in KEYS.items():
        v = cap.get(k)
        need(v is None or (is_num(v) and lo <= v <= hi and (k != "max_batches" or is_int(v))),
             where, f"capacity.{k} = {short(v)} is not allowed: "
             + ("an integer" if k == "max_batches" else "a number") + f" in [{lo:g}, {hi:g}]")
    seeds, stride = data.get("seeds"), card_search.SEED_STRIDE
    need(not isinstance(seeds, list) or all(not is_int(s) or s < stride for s in seeds), where,
         f"seeds must be below {stride} with capacity.method 2 (the j-th batch at N_f uses "
         f"seeds s + {stride}·j + {card_search.CELL_STRIDE}·N_f)")


def is_v2(suite: Suite) -> bool:
    return suite.is_capacity and suite.capacity_method == 2


def settings(suite: Suite) -> dict:
    """The search's keyword arguments: work_budget (Mtok), max_batches, max_step, and
    max_spread where the suite sets one."""
    cap = suite.capacity
    out = {"work_budget": float(cap["work_budget_mtok"]),
           "max_batches": int(cap["max_batches"]), "max_step": float(cap["max_step"])}
    if cap.get("max_spread") is not None:
        out["max_spread"] = float(cap["max_spread"])
    return out


def target(suite: Suite) -> float:
    """The suite's N50 interval target: a measured card's interval spans at most this."""
    return settings(suite).get("max_spread", run_card.MAX_SPREAD)


def seed_allowed(seed, nf: int, suite: Suite) -> bool:
    """Whether ``seed`` is a batch's at N_f = ``nf``: s + 1000·j + 100000·N_f with s a
    suite seed and j below max_batches."""
    return (is_int(seed) and seed >= 0 and card_search.card_seed_of(suite.seeds)(seed, nf)
            and card_search.seed_parts(seed)[1] < settings(suite)["max_batches"])


def run(suite: Suite, adapter: str, budget: Mapping, base: Mapping, store, workers: int,
        log: Callable[[str], None], executor=None):
    """One budget's search into ``store`` (resumed from it), on ``executor`` if given."""
    s = settings(suite)
    log(f"suite {suite.name}, adapter {adapter}, budget {budget['name']}: capacity search "
        f"(card method 2), at most {s['max_batches']} batches and {s['work_budget']:g} Mtok "
        "of training")
    return card_search.run(base, seeds=suite.seeds, store=store, workers=workers, say=log,
                           executor=executor, **s)


def replay(suite: Suite, base: Mapping, records: list[Mapping]):
    """The search over ``records`` alone (``card_search.replay``), training nothing."""
    return card_search.replay(base, records, seeds=suite.seeds, **settings(suite))


def with_protocol(records: list[Mapping], points: list[Mapping]) -> list[dict]:
    """Records rebuilt from points, each with its point's learning-rate search back: a
    run's training work counts every candidate (``run_card.work_tokens``)."""
    found = {p.get("config_hash"): p.get("lr_search") for p in points}
    return [{**r, "lr_search": found[r.get("config_hash")]}
            if found.get(r.get("config_hash")) is not None else dict(r) for r in records]


def machines(records: list[Mapping]) -> list[dict]:
    """The distinct machines the runs report (``cpu``: model, cpus, threads), in order."""
    out: list[dict] = []
    for r in records:
        cpu = r.get("cpu")
        if not isinstance(cpu, dict):
            continue
        model = cpu.get("model")
        m = {"model": model[:MAX_MODEL_TEXT] if isinstance(model, str) and model else None,
             **{k: cpu[k] if is_count(cpu.get(k), 1) else None for k in ("cpus", "threads")}}
        if m not in out:
            out.append(m)
    return out[:MAX_MACHINES]


def machine_text(card: Mapping) -> str:
    """The card's machines in words (``AMD EPYC, 2 CPUs, 1 thread``)."""
    def one(m):
        parts = [str(m.get("model") or "CPU model not recorded")]
        parts += [f"{m['cpus']} CPUs"] if m.get("cpus") else []
        parts += [f"{m['threads']} thread{'s' if m['threads'] != 1 else ''}"] \
            if m.get("threads") else []
        return ", ".join(parts)
    found = card.get("machine") or []
    return "; ".join(one(m) for m in found) if found else "not recorded"


def claimed(card: Mapping, bw: str) -> dict:
    """The stored card's ``machine`` once its form is checked (what the points cannot
    recompute): a list of at most 8 mappings of model (text or null), cpus and threads
    (positive integers or null)."""
    need("machine" in card, bw, "card lacks the field 'machine' (the CPU model, CPUs and "
         "threads its runs report)")
    found = card["machine"]
    need(isinstance(found, list) and len(found) <= MAX_MACHINES, bw,
         f"card.machine must be a list of at most {MAX_MACHINES} machines")
    for i, m in enumerate(found):
        mw = f"{bw}: card.machine[{i}]"
        need(isinstance(m, dict) and set(m) == set(MACHINE_KEYS), mw,
             f"must be a mapping with exactly {', '.join(MACHINE_KEYS)}")
        need(m["model"] is None or (isinstance(m["model"], str)
                                    and 0 < len(m["model"]) <= MAX_MODEL_TEXT), f"{mw}.model",
             f"must be null or text of 1 to {MAX_MODEL_TEXT} characters")
        for k in ("cpus", "threads"):
            need(m[k] is None or is_count(m[k], 1), f"{mw}.{k}",
                 f"must be null or a positive integer (got {short(m[k])})")
    return {"machine": found}


def check_point_seed(p: Mapping, suite: Suite, pw: str) -> None:
    """A point's seed is one of a batch's at its N_f: a suite seed + 1000·j + 100000·N_f,
    j below max_batches."""
    top = settings(suite)["max_batches"] - 1
    need(seed_allowed(p["seed"], p.get("num_facts"), suite), pw,
         f"seed = {short(p['seed'])} is not allowed: a batch's seeds at N_f = "
         f"{short(p.get('num_facts'))} are the suite's seeds {suite.seeds} + "
         f"{card_search.SEED_STRIDE}·j + {card_search.CELL_STRIDE}·N_f, j from 0 to {top}")


def check_batches_complete(b: Mapping, suite: Suite, bw: str) -> None:
    """Every batch of a budget (an N_f and a j) has a run of each of its seeds."""
    seen: dict[tuple[int, int], set] = {}
    for p in b["points"]:
        seen.setdefault((p["num_facts"], card_search.seed_parts(p["seed"])[1]),
                        set()).add(p["seed"])
    for (nf, j), got in sorted(seen.items()):
        missing = sorted(set(card_search.batch_seeds(suite.seeds, j, nf)) - got)
        if missing:
            raise ConfigError(f"{bw}: the batch N_f={nf}, j={j} lacks seed {missing[0]} (a "
                              "batch is one run per seed of the suite, seeds s + 1000·j + "
                              "100000·N_f)")
    need(bool(seen), bw, "no points")


def plan(suite: Suite, budget: Mapping, base: Mapping, done, over: bool, workers: int,
         log: Callable[[str], None]) -> float:
    """One budget's dry run: the store's batches and work against the work budget, a step
    timed at the first cell, and the CPU time the card still needs at that rate, a range
    (``card_eta.eta_seconds``).  ``done``: the store's replay (None: no record);
    ``over``: it ended.  Returns the upper ETA in CPU minutes."""
    from recallbench.runs.capacity import cell_config, n_eff_prior
    from recallbench.runs.eta import step_seconds

    work = settings(suite)["work_budget"]
    have = done is not None and bool(done.records)
    spent = float(done.card.get("work_mtok") or 0.0) if have else 0.0
    if have:
        cpu = sum(float(r.get("cpu_s") or 0.0) for r in done.records) / 60
        batches = len({(r["config"]["task"]["num_facts"],
                        card_search.seed_parts(r["config"]["train"]["seed"])[1])
                       for r in done.records})
        head = (f"{budget['name']}: the store holds {batches} batch(es) of the search, "
                f"{spent:.3g} of the {work:g} Mtok work budget ({cpu:.1f} CPU-min)")
    else:
        head = f"{budget['name']}: nothing in the store yet (work budget {work:g} Mtok)"
    if have and over:
        why = "" if done.stopped == done.card["status"] else f" ({done.stopped})"
        log(f"{head}; the search is over, {done.card['status']}{why}: nothing to run")
        return 0.0
    d, vocab = int(base["model"]["d_model"]), int(base["task"]["vocab_size"])
    nf = card_search.first_facts(d, n_eff_prior(base), vocab)
    step = step_seconds(cell_config(base, nf, suite.seeds[0]))
    per_step = int(base["train"]["batch_size"]) * 4 * nf
    lo, hi, cap = card_eta.eta_seconds(base, step, nf, len(done.records) if have else 0,
                                       work - spent)
    log(f"{head}; measured {step * 1000:.1f} ms a step at the first cell (N_f = {nf}, "
        f"L = {4 * nf}), {per_step / step / 1e3:.0f} k tokens/s (a longer L costs more a token)")
    log("  ETA: " + card_eta.eta_text(lo, hi, cap, workers))
    return hi / 60
