"""``recallbench capacity``: measure one model's recall capacity at one state budget and write
its capacity card (docs/capacity.md).

    recallbench capacity --adapter linear-mamba --d-model 32 --d-state 8 --out cards/lm-32-8
    recallbench capacity --factory mypkg.layers:make_mixer --state-size 512 --d-model 32 \\
        --out cards/mine
    recallbench capacity ... --dry-run      # the plan and an ETA from measured step times
    recallbench capacity ... --shapes key=4,8,16,32   # a card per state shape at the same S
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from recallbench.api.errors import ConfigError
from recallbench.cli import capacity_args, capacity_shapes
from recallbench.cli.capacity_args import factory as _factory
from recallbench.cli.capacity_args import state_size as _state_size

# TRAIN: every card's protocol
from recallbench.runs.capacity import EXPECTED_CELLS, MAX_STEP_RANGE, TRAIN


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ("exit status: 0 a card was written (measured, a bound or no recall: see its "
                "status); 1 every run of a cell failed (no card; one line says why); 2 a bad "
                "flag or config, or a work budget below the first batch (nothing trained); 3 the "
                "time budget ran out (method 2: unfinished) or, before any run finished, no card; "
                "130 interrupted (the store keeps every finished run: rerun the command to resume)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--adapter", help="a built-in or entry-point adapter (`recallbench list "
                                       "adapters`)")
    who.add_argument("--factory", metavar="MODULE:CALLABLE",
                     help="a callable returning the nn.Module mixer (B, L, D) -> (B, L, D) of "
                          "each layer, called with the config values its parameters name "
                          "(d_model, d_state, layer_idx, ...)")
    p.add_argument("--state-size", type=_state_size, metavar="S",
                   help="with --factory: the layer's state scalars S, an integer in "
                        "[1, 10^15] (omit for a state that grows with L)")
    p.add_argument("--name", metavar="NAME",
                   help="with --factory: the layer's name on its card, figure and records "
                        "(1 to 64 characters of A-Z a-z 0-9 . _ -; default: the "
                        "callable's name)")
    p.add_argument("--d-model", type=int, required=True, help="D")
    p.add_argument("--d-state", type=int, default=16, help="N (default 16)")
    p.add_argument("--n-layers", type=int, default=1, help="Λ (default 1)")
    p.add_argument("--vocab-size", type=int, default=512,
                   help="V of every cell (default 512: 255 keys, so N_f up to 255)")
    p.add_argument("--seeds", default="0,1", help="seeds per cell, comma-separated (default 0,1)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override the protocol (train.*, model.options.*); repeatable")
    p.add_argument("--method", type=int, choices=(1, 2), default=2,
                   help="2 (default): every run enters a free-slope fit of N50, a budget in "
                        "training work; 1: leaderboards/cpu-v3's best-of-seeds law fit, a "
                        "budget in minutes (docs/capacity.md)")
    p.add_argument("--work-budget", type=float, default=None, metavar="MTOK",
                   help="method 2: millions of tokens the card may train, the store's runs "
                        "included: the same verdict on any machine (default 300)")
    p.add_argument("--max-spread", type=float, default=None, metavar="F",
                   help="method 2: measured once the 95%% N50 interval spans at most F "
                        "(upper / lower), in [1.3, 2] (default 1.3): docs/capacity.md")
    p.add_argument("--time-budget", type=float, default=None, metavar="MINUTES",
                   help="method 2: a wall-time limit; a search it stops is unfinished (exit "
                        "3) and the same command continues it (default none).  Method 1: "
                        "stop when the next cell would not fit in this wall time, and report "
                        "a bound (default 60)")
    p.add_argument("--cpu-budget", type=float, default=None, metavar="MINUTES",
                   help="method 1, instead of --time-budget: CPU minutes of the card's runs, "
                        "those in the store included")
    p.add_argument("--max-cells", type=int, default=None,
                   help="at most this many batches (method 2, default 24) or N_f (method 1, "
                        "default 12)")
    p.add_argument("--max-step", type=float, default=0.0, metavar="R",
                   help="each new N_f within R times the largest (1/R the smallest) measured "
                        f"so far, R in [{MAX_STEP_RANGE[0]:g}, {MAX_STEP_RANGE[1]:g}] (default "
                        "0: no limit, as leaderboards/cpu-v3 searched)")
    p.add_argument("--fit-budget", action=argparse.BooleanOptionalAction, default=None,
                   help="when the next cell, beyond every N_f measured, would not fit in the "
                        "budget left, measure the largest N_f that does instead of stopping "
                        "(method 1; default on; --no-fit-budget stops there, as "
                        "leaderboards/cpu-v3 searched)")
    p.add_argument("--workers", type=int, default=None,
                   help="train a cell's seeds in this many processes, 1 to the CPUs "
                        "(default: the seeds, at most the CPUs; 1 with --factory)")
    p.add_argument("--refuse-stale", action="store_true",
                   help="stop (exit 2, nothing trained) when the store holds runs of this card "
                        "made by other adapter or --factory source than the one here; by "
                        "default they are reused, with one warning line per run")
    p.add_argument("--store", help="result store (default OUT/store); a rerun resumes from it")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="writes card.json, card.md and card.png there")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan and an ETA from measured step times; train nothing")
    capacity_shapes.add_argument(p)
    capacity_args.add_executor(p)


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ConfigError(f"--seeds {text[:40]!r} is not allowed: distinct integers >= 0, "
                          "comma-separated (for example 0,1)")
    return seeds


def _settle(args) -> None:
    """Each method's defaults for the flags left unset, and the flags of the other method
    refused in one line."""
    from recallbench.law import run_card
    from recallbench.runs import card_search

    method = getattr(args, "method", 1)
    if method == 2:
        for flag, value in (("--cpu-budget", args.cpu_budget),
                            ("--fit-budget", getattr(args, "fit_budget", None))):
            if value is not None:
                raise ConfigError(f"{flag} is for --method 1: method 2 counts a card's budget "
                                  "in training work (--work-budget MTOK)")
        if args.work_budget is None:
            args.work_budget = card_search.DEFAULT_WORK_MTOK
        lo, hi = card_search.WORK_RANGE
        if not lo <= args.work_budget <= hi:
            raise ConfigError(f"--work-budget {args.work_budget:g} is not allowed: millions of "
                              f"tokens in [{lo:g}, {hi:g}]")
        run_card.check_spread(getattr(args, "max_spread", None), "--max-spread")
        if args.max_cells is None:
            args.max_cells = card_search.MAX_BATCHES
        top = card_search.CELL_STRIDE // card_search.SEED_STRIDE - 1
        if not 1 <= args.max_cells <= top:
            raise ConfigError(f"--max-cells {args.max_cells} is not allowed: batches of a "
                              f"method-2 card, an integer in [1, {top}]")
        bad = [s for s in _seeds(getattr(args, "seeds", None) or "0")
               if s >= card_search.SEED_STRIDE]
        if bad:
            raise ConfigError(f"--seeds: {bad[0]} is not allowed with --method 2: seeds are in "
                              f"[0, {card_search.SEED_STRIDE}) (a run's seed is s + 1000·j + "
                              "100000·N_f)")
        return
    for flag in ("work_budget", "max_spread"):
        if getattr(args, flag, None) is not None:
            raise ConfigError(f"--{flag.replace('_', '-')} is for --method 2 (method 1 counts "
                              "minutes, --time-budget or --cpu-budget, under its own rule)")
    args.time_budget = 60.0 if args.time_budget is None else args.time_budget
    args.max_cells = 12 if args.max_cells is None else args.max_cells
    if getattr(args, "fit_budget", None) is None:
        args.fit_budget = True


def _protocol(args) -> dict:
    """The method's protocol: method 2 searches the learning rate by halving."""
    from recallbench.runs import card_search

    return card_search.TRAIN if getattr(args, "method", 1) == 2 else TRAIN


def base_config(args) -> dict:
    """The card's config (the protocol, the model, MQAR at V) after --set, validated."""
    from recallbench.api.config import apply_overrides, resolve

    _settle(args)
    for flag, value, low in (("--d-model", args.d_model, 1), ("--d-state", args.d_state, 1),
                             ("--n-layers", args.n_layers, 1), ("--vocab-size", args.vocab_size, 8),
                             ("--max-cells", args.max_cells, 1)):
        if value < low:
            raise ConfigError(f"{flag} {value} is not allowed: must be >= {low}")
    lo, hi = MAX_STEP_RANGE
    if args.max_step and not lo <= args.max_step <= hi:
        raise ConfigError(f"--max-step {args.max_step:g} is not allowed: 0 (no limit) or in "
                          f"[{lo:g}, {hi:g}]")
    for flag, value in (("--time-budget", args.time_budget), ("--cpu-budget", args.cpu_budget)):
        if value is not None and not 0 < value <= 7 * 24 * 60:
            raise ConfigError(f"{flag} {value:g} is not allowed: minutes in (0, 10080]")
    if args.state_size is not None and args.factory is None:
        raise ConfigError("--state-size is for --factory only (an adapter states its own)")
    if getattr(args, "name", None) is not None and args.factory is None:
        raise ConfigError("--name is for --factory only (an adapter's card bears its name)")
    if any(k.split("=", 1)[0].strip().startswith("task.") for s in args.set for k in s.split()):
        raise ConfigError("--set task.* is not allowed: the card chooses N_f and L; set V "
                          "with --vocab-size")
    _check_set_flags(args)
    model = {"d_model": args.d_model, "d_state": args.d_state, "n_layers": args.n_layers}
    if args.factory:
        model["adapter"], model["options"] = _factory(args.factory, args.state_size,
                                                      getattr(args, "name", None))
    else:
        model["adapter"] = args.adapter
    raw = {"task": {"name": "mqar", "vocab_size": args.vocab_size, "num_facts": 2,
                    "seq_len": 8},
           "model": model, "train": dict(_protocol(args))}
    raw = apply_overrides(raw, args.set)
    from recallbench.runs.capacity import protocol_lr

    raw["train"]["lr"] = protocol_lr(raw["model"]["adapter"], raw["train"]["lr"])
    cfg = resolve(raw)
    from recallbench.api.registry import ADAPTERS
    from recallbench.harness.prepare import checked_state_size

    checked_state_size(ADAPTERS.require(cfg.model.adapter)(cfg.model))  # S < 1: one line now
    return cfg.to_dict()


def _check_set_flags(args) -> None:
    """--set of what a flag gives (the model's sizes, its adapter or factory) is refused in
    one line naming the flag, as a capacity suite refuses what its budgets fix."""
    from recallbench.api.config import apply_overrides

    model = apply_overrides({}, args.set).get("model") or {}
    flags = {"adapter": "--factory" if args.factory else "--adapter", "d_model": "--d-model",
             "d_state": "--d-state", "n_layers": "--n-layers"}
    for key in model:
        if key in flags:
            raise ConfigError(f"--set model.{key} is not allowed: use {flags[key]}")
    if args.factory and "options" in model:
        options = model["options"]
        if not isinstance(options, dict):
            raise ConfigError("--set model.options is not allowed with --factory: set "
                              "model.options.KEY")
        own = {"factory": "--factory", "state_size": "--state-size", "name": "--name"}
        for key in options:
            if key in own:
                raise ConfigError(f"--set model.options.{key} is not allowed: use {own[key]}")


def _dry_run(args, base: dict, seeds: list[int]) -> int:
    if getattr(args, "method", 1) == 2:
        return _dry_run_v2(args, base, seeds)
    from recallbench.runs.capacity import estimate
    from recallbench.runs.eta import minutes

    d, vocab = base["model"]["d_model"], base["task"]["vocab_size"]
    est = estimate(base, seeds)
    nf, step = est.num_facts, est.step_s
    workers = _workers(args, seeds)
    lrs = base["train"]["lr"] if isinstance(base["train"]["lr"], list) else [base["train"]["lr"]]
    cap = base["train"].get("max_steps_limit") or base["train"]["max_steps"]
    lo, hi = (cpu / workers for cpu in est.cpu_s)
    print(f"capacity plan: {base['model']['adapter']} D={d} N={base['model']['d_state']} "
          f"at V={vocab}; first cell N_f = {nf}, L = {4 * nf} (the law at S_eff = S)")
    print(f"  per cell: {len(seeds)} seed(s) x {len(lrs)} learning rate(s), "
          f"{base['train']['max_steps']} steps (extended to at most {cap} while improving)")
    print(f"  measured: {step * 1000:.1f} ms a step at N_f = {nf}; {workers} worker(s)")
    print(f"  ETA: {minutes(lo)} to {minutes(min(hi, args.time_budget * 60))} "
          f"({EXPECTED_CELLS[0]} cells stopping on their first plateau to "
          f"{EXPECTED_CELLS[1]} at their cap, at up to twice this L; the time budget is "
          f"{args.time_budget:g} min)")
    print("(dry run: nothing was trained)")
    return 0


def _dry_run_v2(args, base: dict, seeds: list[int]) -> int:
    """Method 2's plan: the first cell, a measured step there, and the CPU time a card takes
    at that step's rate, a range (``card_eta.eta_seconds``)."""
    from recallbench.runs import card_eta, card_search
    from recallbench.runs.capacity import cell_config, n_eff_prior
    from recallbench.runs.eta import step_seconds

    d, vocab = base["model"]["d_model"], base["task"]["vocab_size"]
    nf = card_search.first_facts(d, n_eff_prior(base), vocab)
    step = step_seconds(cell_config(base, nf, seeds[0]))
    workers = _workers(args, seeds)
    train = base["train"]
    lrs = train["lr"] if isinstance(train["lr"], list) else [train["lr"]]
    per_step = train["batch_size"] * 4 * nf
    lo, hi, cap = card_eta.eta_seconds(base, step, nf, 0, args.work_budget)
    print(f"capacity plan (method 2): {base['model']['adapter']} D={d} "
          f"N={base['model']['d_state']} at V={vocab}; first batch N_f = {nf}, L = {4 * nf}, "
          f"{len(seeds)} run(s) of {len(lrs)} learning rate(s)")
    print(f"  measured: {step * 1000:.1f} ms a step ({per_step / step / 1e3:.0f} k tokens/s; "
          f"a longer L costs more per token); work budget {args.work_budget:g} Mtok")
    print("  ETA: " + card_eta.eta_text(lo, hi, cap, workers))
    print("(dry run: nothing was trained)")
    return 0


def _workers(args, seeds) -> int:
    cpus = os.cpu_count() or 1
    if args.workers is not None and not 1 <= args.workers <= cpus:
        raise ConfigError(f"--workers {args.workers} is not allowed: must be in [1, {cpus}]")
    if args.factory:
        return 1
    return args.workers or min(len(seeds), cpus)


def command(args) -> int:
    seeds = _seeds(args.seeds)
    workers = _workers(args, seeds)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {args.out[:160]} exists and is not a directory")
    base = base_config(args)
    ex = capacity_args.executor(args, workers)  # --executor ray: connected; else None
    if ex is not None:
        print(f"runs on {ex.name}, {ex.parallel} at once", flush=True)
    try:
        return _card(args, base, seeds, workers, out, ex)
    finally:
        if ex is not None:
            ex.close()


def _card(args, base, seeds, workers, out, ex) -> int:
    """The card (or --shapes' cards, or --dry-run's plan); its runs on ``ex`` if given."""
    from recallbench.cli.main import check_writable

    if getattr(args, "shapes", None):
        return capacity_shapes.command(args, base, seeds, workers, out)
    if args.dry_run:
        return _dry_run(args, base, seeds)
    store = Path(args.store) if args.store else out / "store"
    from recallbench.runs.card_search import card_seed_of
    from recallbench.runs.stale import stale_policy

    stale_policy(base, card_seed_of(seeds) if getattr(args, "method", 1) == 2 else seeds,
                 store, refuse=getattr(args, "refuse_stale", False),
                 say=lambda line: print(line, file=sys.stderr, flush=True))
    out.mkdir(parents=True, exist_ok=True)
    for name in ("card.json", "card.md", "card.png"):
        check_writable(out / name)
    if getattr(args, "method", 1) == 2:
        return _measure_v2(args, base, seeds, store, workers, out, ex)
    from recallbench.law.card_render import headline
    from recallbench.runs import capacity

    cpu = args.cpu_budget is not None  # a budget spent mid-cell stops it (cut)
    result = capacity.run(base, seeds=seeds, store=store,
                          budget_s=(args.cpu_budget if cpu else args.time_budget) * 60,
                          max_cells=args.max_cells, workers=workers, cpu=cpu, cut=True,
                          executor=ex,
                          max_step=args.max_step or None, fit_budget=args.fit_budget)
    return _ending(result, out, store, headline)


def _measure_v2(args, base, seeds, store, workers, out, ex=None) -> int:
    """Method 2's search (``runs.card_search``) and its card (:func:`_ending`)."""
    from recallbench.law.run_card_render import cite, headline
    from recallbench.runs import card_search

    result = card_search.run(base, seeds=seeds, store=store, workers=workers, executor=ex,
                             work_budget=args.work_budget, max_batches=args.max_cells,
                             max_step=args.max_step or None, widen=True,
                             max_spread=args.max_spread,
                             time_limit_s=args.time_budget and args.time_budget * 60)
    return _ending(result, out, store, lambda card: "\n".join(
        [headline(card), cite(card, _version()), *_placed(card, base["train"])]
        + ([] if card["status"] == "measured" else [f"the search stopped: {card['stopped']}"])))


def _placed(card, train) -> list[str]:
    """Where the card stands on the boards of this checkout (``leaderboards/``), if any."""
    from recallbench.leaderboard.capacity.place import placement

    return placement(card, train, BOARDS)


def _ending(result, out, store, lines) -> int:
    """The card written and ``lines(card)`` printed, or no card (``runs.budget.card_ending``:
    every run of a cell failed, exit 1; no run finished in the budget, exit 3); the status."""
    from recallbench.runs.budget import card_ending

    status, last, card = card_ending(result, store)
    if card:
        written = write_card(result.card, out)["markdown"]
        print(f"{lines(result.card)}\ncard written to {written} (and card.json, card.png)")
    if last:
        print(last, file=sys.stderr if status == 1 else sys.stdout)
    return status


#: the boards a new card is placed among: this checkout's (absent from an installed wheel)
BOARDS = Path(__file__).resolve().parents[2] / "leaderboards"


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("recallbench")
    except metadata.PackageNotFoundError:
        return "unknown"


def write_card(card: dict, out: Path) -> dict:
    """card.json, card.png and card.md in ``out`` (each method's card by its renderer)."""
    from recallbench.law import card_render, run_card, run_card_render

    render = run_card_render if card.get("schema") == run_card.CARD_SCHEMA else card_render
    out.mkdir(parents=True, exist_ok=True)
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    render.draw(card, out / "card.png")
    md = out / "card.md"
    md.write_text(render.render_markdown(card, "card.png"), encoding="utf-8")
    return {"json": str(out / "card.json"), "markdown": str(md), "figure": str(out / "card.png")}
