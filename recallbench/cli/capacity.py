"""``recallbench capacity``: measure one model's recall capacity at one state budget and write
its capacity card (docs/capacity.md).

    recallbench capacity --adapter linear-mamba --d-model 32 --d-state 8 --out cards/lm-32-8
    recallbench capacity --factory mypkg.layers:make_mixer --state-size 512 --d-model 32 \\
        --out cards/mine
    recallbench capacity ... --dry-run      # the plan and an ETA from measured step times
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
from pathlib import Path

from recallbench.api.errors import ConfigError

# TRAIN: every card's protocol
from recallbench.runs.capacity import EXPECTED_CELLS, MAX_STEP_RANGE, TRAIN


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ("exit status: 0 a card was written (measured, a bound or no recall: see its "
                "status); 2 a bad flag or config (nothing was trained); 130 interrupted (the "
                "store keeps every finished run: rerun the same command to resume)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--adapter", help="a built-in or entry-point adapter (`recallbench list "
                                       "adapters`)")
    who.add_argument("--factory", metavar="MODULE:CALLABLE",
                     help="a callable returning the nn.Module mixer (B, L, D) -> (B, L, D) of "
                          "each layer, called with the config values its parameters name "
                          "(d_model, d_state, layer_idx, ...)")
    p.add_argument("--state-size", type=int, help="with --factory: the layer's state scalars S "
                   "(omit for a state that grows with L)")
    p.add_argument("--d-model", type=int, required=True, help="D")
    p.add_argument("--d-state", type=int, default=16, help="N (default 16)")
    p.add_argument("--n-layers", type=int, default=1, help="Λ (default 1)")
    p.add_argument("--vocab-size", type=int, default=512,
                   help="V of every cell (default 512: 255 keys, so N_f up to 255)")
    p.add_argument("--seeds", default="0,1", help="seeds per cell, comma-separated (default 0,1)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override the protocol (train.*, model.options.*); repeatable")
    p.add_argument("--time-budget", type=float, default=60.0, metavar="MINUTES",
                   help="stop when the next cell would not fit in this wall time, and report "
                        "a bound (default 60)")
    p.add_argument("--cpu-budget", type=float, default=None, metavar="MINUTES",
                   help="instead of --time-budget: CPU minutes of the card's runs, those in "
                        "the store included (what a capacity suite uses: the same cell on a "
                        "shared or an idle machine)")
    p.add_argument("--max-cells", type=int, default=12, help="at most this many N_f (default 12)")
    p.add_argument("--max-step", type=float, default=0.0, metavar="R",
                   help="each new N_f within R times the largest (1/R the smallest) measured "
                        f"so far, R in [{MAX_STEP_RANGE[0]:g}, {MAX_STEP_RANGE[1]:g}] (default "
                        "0: no limit, as leaderboards/cpu-v3 searched)")
    p.add_argument("--fit-budget", action=argparse.BooleanOptionalAction, default=True,
                   help="when the next cell, beyond every N_f measured, would not fit in the "
                        "budget left, measure the largest N_f that does instead of stopping "
                        "(default on; --no-fit-budget stops there, as leaderboards/cpu-v3 "
                        "searched)")
    p.add_argument("--workers", type=int, default=None,
                   help="train a cell's seeds in this many processes (default: the seeds, at "
                        "most the CPUs; 1 with --factory)")
    p.add_argument("--store", help="result store (default OUT/store); a rerun resumes from it")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="writes card.json, card.md and card.png there")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan and an ETA from measured step times; train nothing")


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ConfigError(f"--seeds {text[:40]!r} is not allowed: distinct integers >= 0, "
                          "comma-separated (for example 0,1)")
    return seeds


def _factory(spec: str, state_size: int | None):
    """Import MODULE:CALLABLE and register it as the run's mixer factory."""
    from recallbench.pytest_plugin.factory import FACTORY_ADAPTER, register_factory

    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(f"--factory {spec[:80]!r} is not allowed: MODULE:CALLABLE")
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--factory {spec[:80]!r}: cannot import it ({exc})") from None
    if not callable(obj):
        raise ConfigError(f"--factory {spec[:80]!r} is not callable")
    return FACTORY_ADAPTER, {"factory": register_factory(obj), "state_size": state_size}


def base_config(args) -> dict:
    """The card's config (the protocol, the model, MQAR at V) after --set, validated."""
    from recallbench.api.config import apply_overrides, resolve

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
    model = {"d_model": args.d_model, "d_state": args.d_state, "n_layers": args.n_layers}
    if args.factory:
        model["adapter"], model["options"] = _factory(args.factory, args.state_size)
    else:
        model["adapter"] = args.adapter
    raw = {"task": {"name": "mqar", "vocab_size": args.vocab_size, "num_facts": 2,
                    "seq_len": 8},
           "model": model, "train": dict(TRAIN)}
    if any(k.split("=", 1)[0].strip().startswith("task.") for s in args.set for k in s.split()):
        raise ConfigError("--set task.* is not allowed: the card chooses N_f and L; set V "
                          "with --vocab-size")
    raw = apply_overrides(raw, args.set)
    from recallbench.runs.capacity import protocol_lr

    raw["train"]["lr"] = protocol_lr(raw["model"]["adapter"], raw["train"]["lr"])
    return resolve(raw).to_dict()


def _dry_run(args, base: dict, seeds: list[int]) -> int:
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


def _workers(args, seeds) -> int:
    if args.factory:
        return 1
    cpus = os.cpu_count() or 1
    w = args.workers or min(len(seeds), cpus)
    if not 1 <= w <= cpus:
        raise ConfigError(f"--workers {w} is not allowed: must be in [1, {cpus}]")
    return w


def command(args) -> int:
    from recallbench.cli.main import check_writable

    seeds = _seeds(args.seeds)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {args.out[:160]} exists and is not a directory")
    base = base_config(args)
    if args.dry_run:
        return _dry_run(args, base, seeds)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("card.json", "card.md", "card.png"):
        check_writable(out / name)
    from recallbench.runs import capacity

    workers = _workers(args, seeds)
    cpu = args.cpu_budget is not None
    result = capacity.run(base, seeds=seeds, store=Path(args.store) if args.store
                          else out / "store",
                          budget_s=(args.cpu_budget if cpu else args.time_budget) * 60,
                          max_cells=args.max_cells, workers=workers, cpu=cpu,
                          max_step=args.max_step or None, fit_budget=args.fit_budget)
    written = write_card(result.card, out)
    from recallbench.law.card_render import headline

    print(headline(result.card))
    print(f"card written to {written['markdown']} (and card.json, card.png)")
    return 0


def write_card(card: dict, out: Path) -> dict:
    """card.json, card.png and card.md in ``out``."""
    from recallbench.law import card_render

    out.mkdir(parents=True, exist_ok=True)
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    card_render.draw(card, out / "card.png")
    md = out / "card.md"
    md.write_text(card_render.render_markdown(card, "card.png"), encoding="utf-8")
    return {"json": str(out / "card.json"), "markdown": str(md), "figure": str(out / "card.png")}

