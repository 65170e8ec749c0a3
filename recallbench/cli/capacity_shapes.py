"""``recallbench capacity --shapes TERM=V1,V2,...``: one layer at several shapes of the same
state S (:mod:`recallbench.runs.card_shapes`).

    recallbench capacity --adapter deltanet --d-model 32 --d-state 4 --set model.expand=2 \\
        --shapes key=4,8,16,32 --out cards/deltanet-S256

writes one method-2 card per shape to ``OUT/TERM-V/`` (card.json, card.md, card.png), every
run to one store (``--store``, default ``OUT/store``), and ``OUT/shapes.json`` and
``OUT/shapes.md``: which shape has the highest N50 per kbit and S_eff/S, or "not
separable" when their intervals overlap.  ``--dry-run`` lists the shapes and trains nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from recallbench.api.errors import ConfigError


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", metavar="TERM=V1,V2,...",
                   help="method 2, with --adapter: measure the layer at each value of one term "
                        "of its state shape at the same S (e.g. key=4,8,16,32), a card each "
                        "in OUT/TERM-V and the comparison in OUT/shapes.md")


def command(args, base: dict, seeds: list[int], workers: int, out: Path) -> int:
    """Plan (refused in one line), dry-run listing, or every shape's card and the summary."""
    from recallbench.runs import card_shapes

    if args.factory:
        raise ConfigError("--shapes is for --adapter only: a factory's layer states no shape")
    if getattr(args, "method", 2) != 2:
        raise ConfigError("--shapes is for --method 2 (a card per shape by the run-level fit)")
    term, values = card_shapes.parse(args.shapes)
    shapes = card_shapes.plan(base, term, values)
    model = base["model"]
    print(f"capacity shapes: {model['adapter']} D={model['d_model']} at "
          f"S = {base_state(shapes)}, {len(shapes)} shapes of {term}:")
    for s in shapes:
        m = s.base["model"]
        extra = {k: m[k] for k in ("d_model", "d_state", "n_heads", "expand") if m[k] != model[k]}
        opts = {k: v for k, v in (m.get("options") or {}).items()
                if (model.get("options") or {}).get(k) != v}
        print(f"  {s.name}: {card_shapes.describe(s.shape)} "
              f"({', '.join(f'{k} {v}' for k, v in {**extra, **opts}.items()) or 'the base config'}) "
              f"-> {out / s.name}")
    if args.dry_run:
        print("(dry run: nothing was trained)")
        return 0
    return _measure(args, shapes, seeds, workers, out)


def base_state(shapes) -> int:
    import math

    return math.prod(shapes[0].shape.values())


def _measure(args, shapes, seeds, workers, out: Path) -> int:
    from recallbench.cli.capacity import write_card
    from recallbench.cli.main import check_writable
    from recallbench.law.run_card_render import headline
    from recallbench.runs import card_search, card_shapes
    from recallbench.runs.stale import stale_policy

    store = Path(args.store) if args.store else out / "store"
    say = (lambda line: print(line, file=sys.stderr, flush=True))
    for s in shapes:
        stale_policy(s.base, card_search.card_seed_of(seeds), store,
                     refuse=getattr(args, "refuse_stale", False), say=say)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("shapes.json", "shapes.md"):
        check_writable(out / name)

    def search(shape):
        return card_search.run(shape.base, seeds=seeds, store=store, workers=workers,
                               work_budget=args.work_budget, max_batches=args.max_cells,
                               max_step=args.max_step or None,
                               max_spread=getattr(args, "max_spread", None),
                               time_limit_s=args.time_budget and args.time_budget * 60)

    done = card_shapes.measure(shapes, search)
    return write_results(done, out, write_card, headline)


def write_results(done, out: Path, write_card, headline) -> int:
    """Each shape's card in OUT/NAME and shapes.json, shapes.md; the exit status (3 when a
    search is unfinished or a shape is missing, 1 when every run of a batch failed)."""
    from recallbench.runs import card_shapes

    for s, res in done:
        if res.records:
            write_card(res.card, out / s.name)
            print(f"{headline(res.card)}\ncard written to {out / s.name / 'card.md'}")
    summ = card_shapes.summary(done)
    (out / "shapes.json").write_text(json.dumps(summ, indent=2) + "\n", encoding="utf-8")
    (out / "shapes.md").write_text(card_shapes.render_markdown(summ), encoding="utf-8")
    for k in card_shapes.METRICS:
        print(card_shapes.verdict_line(summ["best"][k], k))
    print(f"comparison written to {out / 'shapes.md'} (and shapes.json)")
    last = done[-1][1] if done else None
    if last is not None and getattr(last, "failed", False):
        print(f"capacity: {last.stopped}", file=sys.stderr)
        return 1
    if last is None or not getattr(last, "finished", True):
        print("capacity: unfinished: the same command continues from the store")
        return 3
    return 0
