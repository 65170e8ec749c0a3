"""Where a card's training work goes: the learning-rate candidates the halving drops, the
chosen run's first ``max_steps``, and its extensions past them.

    python benchmarks/work_split.py leaderboards/cpu-v4/submissions/*.yaml

For every card of the submissions (a budget's points: each run of the card), in tokens
trained (steps × batch × L, L = 4·N_f, as ``law.run_card.work_tokens`` counts a card's
work budget): the share spent on the
candidates that were not chosen, the share of the chosen run past the config's
``max_steps`` (its extensions), the runs' CPU minutes, and the lr chosen.  The last line
sums every card.  Nothing trains.  What an earlier rung (``train.lr_rung``) would save
of the first share is measured by ``rung_twins.py``, not read from it: candidates still at
the guess at a rung all train on to the next.
"""
from __future__ import annotations

import argparse
import collections
from pathlib import Path

import yaml

from recallbench.law import run_card


def split(points: list[dict], train: dict) -> dict:
    """Work of a card's ``points`` (its runs) under ``train``: total, dropped candidates,
    extensions past ``max_steps``, CPU minutes and the lr chosen."""
    total = dropped = extended = cpu = 0.0
    lrs: collections.Counter = collections.Counter()
    for r in points:
        per_step = int(train["batch_size"]) * 4 * int(r["num_facts"])
        total += run_card.work_tokens({**r, "config": {"train": train,
                                                       "task": {"seq_len": 4 * r["num_facts"]}}})
        for cand in r.get("lr_search") or []:
            if cand["lr"] != r.get("lr"):
                dropped += per_step * int(cand.get("steps") or 0)
        extended += per_step * max(0, int(r.get("steps") or 0) - int(train["max_steps"]))
        cpu += float(r.get("cpu_s") or r.get("train_s") or 0.0)
        lrs[r.get("lr")] += 1
    return {"runs": len(points), "mtok": total / 1e6, "dropped": dropped / 1e6,
            "extended": extended / 1e6, "cpu_min": cpu / 60, "lr": dict(sorted(lrs.items()))}


def cards(path: str) -> list[tuple[str, dict]]:
    """(model and budget, its split) for each budget of the submission at ``path``."""
    sub = yaml.safe_load(Path(path).read_text())
    return [(f"{sub['model']['name']} {b['name']}",
             split(b.get("points") or [], b["config"]["train"])) for b in sub["budgets"]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("submissions", nargs="+")
    args = p.parse_args()
    print(f"{'card':<40}{'runs':>5}{'Mtok':>8}{'dropped':>9}{'extended':>10}"
          f"{'CPU min':>9}  lr chosen")
    sums = collections.Counter()
    for path in args.submissions:
        for name, s in cards(path):
            for k in ("runs", "mtok", "dropped", "extended", "cpu_min"):
                sums[k] += s[k]
            mt = s["mtok"] or 1.0
            print(f"{name[:39]:<40}{s['runs']:>5}"
                  f"{s['mtok']:>8.1f}{s['dropped'] / mt:>9.2f}{s['extended'] / mt:>10.2f}"
                  f"{s['cpu_min']:>9.1f}  {s['lr']}")
    mt = sums["mtok"] or 1.0
    print(f"{'all':<40}{sums['runs']:>5.0f}{sums['mtok']:>8.1f}{sums['dropped'] / mt:>9.2f}"
          f"{sums['extended'] / mt:>10.2f}{sums['cpu_min']:>9.1f}")


if __name__ == "__main__":
    main()
