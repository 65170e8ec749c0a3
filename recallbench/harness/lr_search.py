"""A learning-rate search: ``train.lr`` as a list (or ``auto``) trains every candidate and
keeps the best.

    record = run({"train": {"lr": [3e-4, 1e-2]}, ...})
    record["lr"], record["lr_search"]    # 0.01, [{lr: 0.0003, ...}, {lr: 0.01, ...}]

One fixed learning rate under-trains some layers: Mamba solves MQAR only inside a narrow
lr window (Okpekpe & Orvieto, 2025), and Zoology and MAD-lab keep the best of a sweep.
Candidates (``lr_candidates.candidates``) are one config per lr, equal in all else (the same
seed: the same initial weights and batches).  Selection is by VALIDATION accuracy, never the
test set: the highest wins, ties go to fewer steps, then the smaller lr (``lr_candidates.choose``);
a diverged candidate is never chosen, and if all diverged the run did.  Only the chosen model
is tested.  With ``train.max_steps_limit`` the candidates are compared at ``max_steps`` and only
the chosen one is extended (:func:`recallbench.harness.single.extend`); ``train.lr_rung``
compares them early and trains only the best on (:mod:`recallbench.harness.lr_halving`).  The
record is the chosen candidate's, with the search's config and hash, ``lr_search`` (one ``{lr,
val_accuracy, steps, converged, error}`` per candidate) and ``train_s`` the whole search's.
Where the blocks vmap and no limit is set, the candidates train as one batched ensemble
(:mod:`recallbench.harness.ensemble`), the same models up to floating-point order.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from recallbench.api.config import RunConfig
from recallbench.api.errors import reason
from recallbench.harness.lr_candidates import announce, candidates, choose, entry, searched_record
from recallbench.harness.single import extend, train_one

def run_search(cfg: RunConfig, device: torch.device, show: bool,
               batched: bool | None = None, weights=None, report=None) -> dict[str, Any]:
    """Train every candidate of ``cfg``'s lr list and test the best.  ``batched``: True
    trains them as one ensemble (EnsembleError if the adapter does not vmap), False one by
    one, None batched where the adapter vmaps and the memory allows.  ``weights``: save the
    chosen model's ``state_dict`` there (one by one only).  ``report``: told of each
    candidate's start, its steps and the extension (:mod:`recallbench.runs.progress`)."""
    from recallbench.harness.ensemble import EnsembleError, run_ensemble
    from recallbench.harness.module import DivergedError

    if cfg.train.lr_rung is not None:  # successive halving trains one by one
        from recallbench.harness.lr_halving import run_halving

        return run_halving(cfg, device, show, weights, report)
    cands = candidates(cfg)
    required = batched is True  # asked for; chosen by memory alone, it falls back one by one
    if cfg.train.max_steps_limit is not None:
        batched = False  # the ensemble does not extend its members
    elif batched is None:
        batched = fits_batched(cfg, device, len(cands))
    if batched is not False:
        if report is not None:
            report.batched([c.train.lr for c in cands], cfg.train.max_steps)
        try:
            rec = run_ensemble([cfg], progress=False, announce=show)[0]
        except EnsembleError:
            if required:
                raise
        else:
            if rec["status"] != "ok":
                raise DivergedError(rec["error"])
            return rec
    return _sequential(cfg, cands, device, show, weights, report)


def _sequential(cfg: RunConfig, cands: list[RunConfig], device: torch.device, show: bool,
                weights=None, report=None) -> dict[str, Any]:
    """The candidates one after another; the best so far is kept, the others dropped; with
    ``max_steps_limit``, compared at ``max_steps`` and only the chosen one extended."""
    from recallbench.harness.module import DivergedError

    limit = cfg.train.max_steps_limit
    extending = limit is not None and limit > cfg.train.max_steps
    if limit is not None:
        cands = [_with_limit(c, None) for c in cands]
    entries, best, train_s = [], None, 0.0
    for i, c in enumerate(cands):
        if report is not None:
            report.candidate(i, len(cands), c.train.lr, c.train.max_steps, limit)
        try:  # the best so far keeps its checkpoint; the others are dropped with theirs
            t = train_one(c, device, False, checkpoint=extending, report=report)
        except DivergedError as exc:
            entries.append(entry(c.train.lr, None, 0, False, reason(exc)))
        else:
            train_s += t.train_s
            entries.append(entry(c.train.lr, t.val_accuracy, t.steps,
                                 t.convergence()["converged"]))
            if choose(entries) == i:
                best = t
        announce(show, entries[-1], i, len(cands))
    if best is None:
        raise DivergedError(f"every learning rate of {len(cands)} diverged "
                            f"(first: {entries[0]['error']})")
    if extending and not best.convergence()["converged"]:
        i = choose(entries)
        try:  # from its checkpoint at the cap, the cap doubling while it improves
            t = extend(best, limit, device, report=report)
        except DivergedError:
            pass  # diverged past the cap: the capped run stands
        else:
            train_s += t.train_s - best.train_s
            entries[i] = entry(t.cfg.train.lr, t.val_accuracy, t.steps,
                               t.convergence()["converged"])
            best = t
    if weights is not None:
        best.save_weights(weights)
    return searched_record(best.record(device), cfg, entries, train_s)


def _with_limit(c: RunConfig, limit: int | None) -> RunConfig:
    return dataclasses.replace(c, train=dataclasses.replace(c.train, max_steps_limit=limit))


def fits_batched(cfg: RunConfig, device: torch.device, k: int) -> bool:
    """Whether K candidates fit in memory at once (K times one run's estimate)."""
    from recallbench.harness.resources import estimate, host_available, needed

    parts = estimate(cfg)
    if device.type == "cuda":
        return k * needed([p for p in parts if p.on_device]) <= torch.cuda.mem_get_info(device)[0]
    return k * needed(parts) <= host_available()
