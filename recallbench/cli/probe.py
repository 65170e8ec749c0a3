"""``recallbench probe``: the mechanistic probe of a trained (or designed) recall circuit.

    recallbench run --set model.d_model=64 --out runs/t8.json --save-weights
    recallbench probe runs/t8.json                   # weights from runs/t8.pt
    recallbench probe --set model.adapter=designed   # fixed weights: nothing to load
    recallbench probe runs/*.json                    # several: a markdown table of all

Writes ``probe.json`` (every score, with the record it came from) and three figures into
``--out`` (default: ``<record>.probe/`` beside the record, or ``probe/``).  The scores are
explained in docs/theory.md, "The probe".  A probe never trains: a trained model's weights
come from ``run --save-weights``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from recallbench.api.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("records", nargs="*", metavar="RECORD",
                        help="a run's record JSON (its config rebuilds the model); several "
                             "print a table of all")
    parser.add_argument("--weights", help="the run's weights (default: the record's path with .pt)")
    parser.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                        help="without a record: the config of a fixed-weight model (e.g. "
                             "model.adapter=designed)")
    parser.add_argument("--out", help="folder for probe.json and the figures (one probe only)")
    parser.add_argument("--sequences", type=int, default=64,
                        help="task sequences to probe with (1..4096, default 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of those sequences (default 0)")


def _config(record: str | None, args):
    """(resolved config, weights path or None, where the config came from, the record's test
    accuracy or None)."""
    from recallbench.api.config import apply_overrides, resolve

    if record is None:
        return resolve(apply_overrides({}, args.set or [])), args.weights, "--set", None
    from recallbench.law.records import load_records

    records = [r for r in load_records([record]) if r.get("status") == "ok"]
    if len(records) != 1:
        raise ConfigError(f"probe: {record} must hold exactly one finished run's record "
                          f"(found {len(records)})")
    weights = args.weights or str(Path(record).with_suffix(".pt"))
    return resolve(records[0]["config"]), weights, record, records[0].get("accuracy")


def _load_weights(model, path: str | None, trainable: bool, adapter: str) -> None:
    import torch

    if path is None or (not trainable and not Path(path).exists()):
        if trainable:
            raise ConfigError(f"probe: adapter {adapter} is trained: give the record of a run "
                              "saved with `recallbench run --save-weights`")
        return
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConfigError(f"probe: no weights at {path} (run with --save-weights, or pass "
                          "--weights)") from None
    except Exception as exc:  # a truncated or foreign file: one line, never a traceback
        raise ConfigError(f"probe: cannot read weights {path} ({type(exc).__name__})") from None
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError):
        raise ConfigError(f"probe: the weights in {path} do not fit the record's model") from None


SCORES = ("vv_block_fraction", "kq_block_fraction", "vv_identity", "kq_identity",
          "copy_score", "shift_score", "state_cosine", "state_decode_accuracy")


def command(args) -> int:
    if not 1 <= args.sequences <= 4096:
        raise ConfigError(f"--sequences = {args.sequences}: must be in 1..4096")
    if not 0 <= args.seed < 2**32:
        raise ConfigError(f"--seed = {args.seed}: must be in 0..2**32-1")
    if args.records and args.set:
        raise ConfigError("probe: --set builds a model without a record; give one or the other")
    if len(args.records) > 1 and (args.out or args.weights):
        raise ConfigError("probe: --out and --weights name one probe's files; with several "
                          "records each probe is written beside its record")
    results = [_probe(record, args) for record in (args.records or [None])]
    if len(results) > 1:
        print(table(results))
    return 0


def table(results: list[dict]) -> str:
    """A markdown table of several probes: the model, its test accuracy, every score."""
    head = "| model | accuracy | " + " | ".join(SCORES) + " |"
    rows = [head, "|" + "---|" * (len(SCORES) + 2)]
    for r in results:
        m, acc = r["config"]["model"], r.get("accuracy")
        name = f"D={m['d_model']} N={m['d_state']} W={m['d_conv']}"
        rows.append(f"| {name} | {'—' if acc is None else f'{acc:.3f}'} | "
                    + " | ".join(f"{r['scores'][k]:.3f}" for k in SCORES) + " |")
    return "\n".join(rows)


def _probe(record: str | None, args) -> dict:
    cfg, weights, source, accuracy = _config(record, args)
    out = Path(args.out) if args.out else (
        Path(record).with_suffix(".probe") if record else Path("probe"))
    from recallbench.cli.main import check_writable

    check_writable(out / "probe.json")
    import torch

    from recallbench.harness.prepare import build_model
    from recallbench.probe.figures import draw
    from recallbench.probe.measure import measure

    adapter, model = build_model(cfg, torch.device("cpu"))
    _load_weights(model, weights, adapter.trainable, cfg.model.adapter)
    scores, arrays = measure(model, adapter, cfg.task, args.sequences, args.seed)
    m = cfg.model
    title = f"{m.adapter} D={m.d_model} N={m.d_state} W={m.d_conv} · {cfg.task.name} " \
            f"V={cfg.task.vocab_size} N_f={cfg.task.num_facts}"
    figures = draw(arrays, scores, out, title)
    result = {"schema": "recallbench.probe/1", "source": source, "weights": weights,
              "accuracy": accuracy, "config": cfg.to_dict(), "config_hash": cfg.hash(),
              "scores": scores, "figures": [p.name for p in figures]}
    (out / "probe.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{source}:")
    for key in SCORES:
        print(f"  {key:<22} {scores[key]:.3f}")
    W = scores["width"]
    print("  chance: " + (f"block fractions 1/W = {1 / W:.2f} (G_vv), 1/W² = {1 / W ** 2:.2f} "
                          "(G_kq)" if W > 1 else "W = 1 (d_conv = 1): no previous-token tap, "
                          "so no key-query block")
          + "; identity and cosine scores 0")
    print(f"  wrote {out / 'probe.json'} and {len(figures)} figures")
    return result
