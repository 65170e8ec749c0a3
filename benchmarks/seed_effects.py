"""Do a card's runs that share a seed agree more than runs that do not?  A one-way analysis
of variance of method-2 cards' runs by seed, the cells' means removed.

    python benchmarks/seed_effects.py --suite leaderboards/cpu-v4 --budget D32-N4 \
        --store gla=STORE1 --store hgrn2=STORE2 [...]

A seed fixes a run's initial weights and its data stream.  Each card is made from its
store's runs of the budget's config (``law.run_card.build_run_card``, nothing trains; any
seeding); its uncensored runs' probit
shares above the guess (``law.runfit.classify``) less their cell's mean are grouped by the
run's seed, keeping seeds with runs at two cells or more.  Printed per card and pooled over
the cards (sums of squares added): F = (between-seed mean square) / (within-seed mean
square), its degrees of freedom and p (scipy.stats.f), and the seed's share of the run
variance by the method of moments, (F − 1)/(F − 1 + n₀), n₀ the mean runs per seed.  A
search whose runs never share a seed (card_search since it put N_f in the seed) has no
groups to test: the seed's effect is then part of each run's own scatter, as the fit takes it.
"""
from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from recallbench.api.canonical import config_hash
from recallbench.law import run_card, runfit
from recallbench.leaderboard import load_suite
from recallbench.leaderboard.capacity.suite import budget_base
from recallbench.runs.capacity import cell_config
from recallbench.runs.store import Store


def card_runs(base: dict, records: list[dict]) -> list[dict]:
    """The store's ok runs that are ``base``'s cells (at their N_f and seed)."""
    return [r for r in records if r.get("status") == "ok" and r.get("config_hash") == config_hash(
        cell_config(base, r["config"]["task"]["num_facts"], r["config"]["train"]["seed"]))]


def card_of(base: dict, records: list[dict]) -> dict:
    """The card of the store's ok runs that are ``base``'s cells (at their N_f and seed)."""
    return run_card.build_run_card(card_runs(base, records))


def groups(card: dict) -> list[np.ndarray]:
    """The card's uncensored runs' probit shares less their cell's mean, by seed (seeds with
    runs at two cells or more)."""
    ok = [r for r in card["runs"] if r.get("accuracy") is not None]
    kind, z, _ = runfit.classify([r["correct"] for r in ok], [r["total"] for r in ok],
                                 [r["units"] for r in ok], [r["guess"] for r in ok],
                                 [not r["converged"] for r in ok])
    keep = [(r, zz) for r, k, zz in zip(ok, kind, z) if k == 0]
    cells: dict[int, list[float]] = {}
    for r, zz in keep:
        cells.setdefault(r["num_facts"], []).append(float(zz))
    by: dict[int, list[float]] = {}
    for r, zz in keep:
        by.setdefault(int(r["seed"]), []).append(zz - float(np.mean(cells[r["num_facts"]])))
    return [np.asarray(v) for v in by.values() if len(v) >= 2]


def anova(gs: list[np.ndarray]) -> tuple[float, float, int, int]:
    """(between-seed sum of squares, within, their degrees of freedom)."""
    if len(gs) < 2:
        return 0.0, 0.0, 0, 0
    mu = np.concatenate(gs).mean()
    ssb = sum(len(g) * (g.mean() - mu) ** 2 for g in gs)
    ssw = sum(((g - g.mean()) ** 2).sum() for g in gs)
    return float(ssb), float(ssw), len(gs) - 1, sum(map(len, gs)) - len(gs)


def line(name: str, ssb, ssw, dfb, dfw, runs, seeds) -> str:
    if dfb < 1 or dfw < 1:
        return f"{name}: no seed has runs at two cells (nothing to test)"
    f = (ssb / dfb) / (ssw / dfw)
    n0 = runs / seeds
    share = max(f - 1, 0.0) / (max(f - 1, 0.0) + n0)
    return (f"{name}: {seeds} seeds, {runs} runs: F = {f:.2f} on ({dfb}, {dfw}), "
            f"p = {stats.f.sf(f, dfb, dfw):.2g}, seed share of the run variance {share:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", required=True)
    p.add_argument("--budget", required=True)
    p.add_argument("--store", action="append", required=True, metavar="ADAPTER=DIR")
    args = p.parse_args()
    suite = load_suite(args.suite)
    b = next(x for x in suite.budgets if x["name"] == args.budget)
    total = [0.0, 0.0, 0, 0, 0, 0]
    for entry in args.store:
        adapter, store = entry.split("=", 1)
        card = card_of(budget_base(suite, adapter, b),
                       Store(store).read(warn=lambda _: None).records)
        gs = groups(card)
        ssb, ssw, dfb, dfw = anova(gs)
        row = (ssb, ssw, dfb, dfw, sum(map(len, gs)), len(gs))
        print(line(f"{adapter} ({store})", *row))
        if dfb >= 1 and dfw >= 1:
            total = [t + v for t, v in zip(total, row)]
    print(line("pooled", *total))


if __name__ == "__main__":
    main()
