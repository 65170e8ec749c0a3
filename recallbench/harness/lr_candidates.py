"""The candidates of a learning-rate search and how one is chosen (pure functions, shared by
the one-by-one search in :mod:`recallbench.harness.lr_search` and the batched ensemble)."""
from __future__ import annotations

import dataclasses
import sys
from typing import Any, Sequence

from recallbench.api.config import RunConfig

ENTRY_KEYS = ("lr", "val_accuracy", "steps", "converged", "error")


def candidates(cfg: RunConfig) -> list[RunConfig]:
    """One config per learning rate of a search (a single lr: the config itself)."""
    lrs = cfg.train.lr if isinstance(cfg.train.lr, list) else [cfg.train.lr]
    return [dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=lr)) for lr in lrs]


def entry(lr: float, val_accuracy: float | None, steps: int, converged: bool,
          error: str | None = None) -> dict[str, Any]:
    """One candidate of ``lr_search``."""
    return {"lr": lr, "val_accuracy": val_accuracy, "steps": steps,
            "converged": bool(converged), "error": error}


def ranked(entries: Sequence[dict]) -> list[int]:
    """Indices of the candidates with an accuracy, best first: the highest validation
    accuracy, then fewer steps, then the smaller lr."""
    ok = [i for i, e in enumerate(entries) if e["val_accuracy"] is not None]
    return sorted(ok, key=lambda i: (entries[i]["val_accuracy"], -entries[i]["steps"],
                                     -entries[i]["lr"]), reverse=True)


def choose(entries: Sequence[dict]) -> int | None:
    """Index of the best candidate (:func:`ranked`); None when no candidate has an
    accuracy (all diverged)."""
    order = ranked(entries)
    return order[0] if order else None


def searched_record(record: dict, cfg: RunConfig, entries: list[dict], train_s: float) -> dict:
    """The chosen candidate's record as the search's: its config and hash, the entries."""
    record.update(config=cfg.to_dict(), config_hash=cfg.hash(), lr_search=entries,
                  train_s=round(train_s, 3))
    return record


def announce(show: bool, e: dict, i: int, n: int) -> None:
    """One progress line per candidate (stderr)."""
    if not show:
        return
    how = (f"diverged ({e['error']})" if e["error"] else
           f"val {e['val_accuracy']:.4f}, {e['steps']} steps, "
           f"{'converged' if e['converged'] else 'not converged'}")
    print(f"lr search [{i + 1}/{n}] lr={e['lr']:g}: {how}", file=sys.stderr, flush=True)
