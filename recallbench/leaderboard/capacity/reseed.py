"""``leaderboard verify --reseed``: re-run a method-2 capacity submission's cards with seeds
disjoint from its own, and say whether each pair of cards agrees on N50.

The run is the unit of a method-2 card, so its interval claims to cover what another set of
runs would find.  Re-seeding tests that claim: the same search (suite settings, protocol,
budget configs as submitted) from seeds that share no run with the submission's, into a
store the user names (an interrupted re-seeding resumes from it), then
:func:`recallbench.law.card_agreement.agreement` of each budget's two cards.

    rows = reseed(sub, suite, store, workers=1, log=print)   # budgets=["D32-N4"]: one card
    rows[0]["agreement"]["agree"]   # the N50 ranges overlap

Seeds: by default the smallest non-negative integers that are not the suite's, as many as
the suite has (seeds 0, 1 are re-seeded with 2, 3); every run seed s + 1000·j + 100000·N_f
of one set then differs from every run seed of the other.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from recallbench.api.errors import ConfigError
from recallbench.law.card_agreement import agreement, describe
from recallbench.leaderboard.capacity import method2 as v2
from recallbench.runs import card_search


def default_seeds(seeds: Sequence[int]) -> list[int]:
    """As many seeds as ``seeds``, the smallest non-negative integers not among them."""
    taken, out, s = set(seeds), [], 0
    while len(out) < len(seeds):
        if s not in taken:
            out.append(s)
        s += 1
    return out


def check_seeds(new: Sequence[int], suite, name: str = "--seeds") -> list[int]:
    """``new`` if usable: distinct, in [0, 1000), none of the suite's; else a ConfigError
    naming ``name``."""
    stride = card_search.SEED_STRIDE
    if not new or len(set(new)) != len(new):
        raise ConfigError(f"{name} {','.join(map(str, new))}: must be distinct seeds")
    bad = [s for s in new if not 0 <= s < stride]
    if bad:
        raise ConfigError(f"{name}: {bad[0]} is not allowed: seeds are in [0, {stride}) "
                          f"(the j-th batch of a seed s uses s + {stride}·j)")
    shared = sorted(set(new) & set(suite.seeds))
    if shared:
        raise ConfigError(f"{name}: {shared[0]} is one of the submission's seeds "
                          f"({', '.join(map(str, suite.seeds))}); re-seeding needs disjoint seeds")
    return list(new)


def check_budgets(names: Sequence[str] | None, sub: Mapping[str, Any]) -> list[str]:
    """The submission's budget names that ``names`` (``--budget``) picks, in its order (all
    when None); a ConfigError naming the one that is not a budget of the submission."""
    have = [b["name"] for b in sub["budgets"]]
    for n in names or ():
        if n not in have:
            raise ConfigError(f"--budget {n}: not a budget of the submission (it has "
                              f"{', '.join(have)})")
    return [n for n in have if names is None or n in names]


def check_reseedable(suite, seeds: Sequence[int] | None = None) -> list[int]:
    """The seeds a re-seeding of ``suite`` uses (``seeds``, checked, or the default); a
    ConfigError where the suite is not of card method 2 or the seeds are refused."""
    if not v2.is_v2(suite):
        raise ConfigError(f"--reseed: suite {suite.name} is not a method-2 capacity suite "
                          "(capacity.method 2); its cards pick the best of seeds per cell, "
                          "which another seed set does not re-measure")
    return check_seeds(seeds, suite) if seeds else default_seeds(suite.seeds)


def reseed(sub: Mapping[str, Any], suite, store: str | Path, *,
           seeds: Sequence[int] | None = None, budgets: Sequence[str] | None = None,
           workers: int = 1, log: Callable[[str], None] = print) -> list[dict]:
    """Each card of ``budgets`` (names; default all) re-run from ``seeds`` (default
    :func:`default_seeds`) into ``store``; one row per budget: budget, seeds, the submitted
    and the new card's status and N50, and their ``agreement``."""
    seeds = check_reseedable(suite, seeds)
    chosen = check_budgets(budgets, sub)
    adapter = sub["model"]["adapter"]
    settings = v2.settings(suite)
    rows = []
    for b in (b for b in sub["budgets"] if b["name"] in chosen):
        log(f"re-seeding {adapter} at {b['name']} with seeds {', '.join(map(str, seeds))} "
            f"(submitted: {', '.join(map(str, suite.seeds))}) into {store}")
        result = card_search.run(b["config"], seeds=seeds, store=store, workers=workers,
                                 say=log, **settings)
        if result.failed or not result.finished:
            raise ConfigError(f"budget {b['name']}: the re-seeded search "
                              + ("failed" if result.failed else "did not finish")
                              + f" ({result.stopped}); the store {store} keeps its runs")
        a = agreement(b["card"], result.card)
        rows.append({"budget": b["name"], "seeds": [list(suite.seeds), seeds],
                     "cards": [b["card"], result.card], "agreement": a,
                     "line": f"{adapter} {b['name']}: " + describe(a)})
        log(rows[-1]["line"])
    return rows
