"""Running a batched ensemble (:mod:`recallbench.harness.ensemble`): the configs in chunks
that fit the device's memory, each chunk built, trained and tested as one stacked model,
and one result record per config (a learning-rate search's: its best member's)."""
from __future__ import annotations

import time
import warnings
from typing import Any, Mapping, Sequence

import torch

from recallbench.api.config import RunConfig
from recallbench.api.record import failed_record, make_record
from recallbench.api.registry import ADAPTERS
from recallbench.harness.convergence import History
from recallbench.harness.ensemble.compile import check_mode
from recallbench.harness.ensemble.memory import available, members_that_fit
from recallbench.harness.ensemble.model import StackedModels
from recallbench.harness.ensemble.shape import (EnsembleError, as_config, check_same_shape,
                                                ensemble_threads)
from recallbench.harness.ensemble.train import Outcome, train
from recallbench.harness.heap import keep_freed_memory
from recallbench.harness.lr_candidates import announce as announce_entry
from recallbench.harness.lr_candidates import candidates, choose, entry, searched_record
from recallbench.harness.resources import check_memory
from recallbench.harness.prepare import cpu_threads, pick_device

__all__ = ["chunks", "run_ensemble"]


def run_ensemble(configs: Sequence[RunConfig | Mapping[str, Any]], progress: bool = False,
                 on_step=None, announce: bool = False, compile: str | None = None
                 ) -> list[dict[str, Any]]:
    """Train K configs of one shape (see :func:`~recallbench.harness.ensemble.shape.shape_key`) as one batched model.

    Returns one result record per config, in order (schema of :func:`train.run`, plus
    ``"ensemble": K``, the members trained).  ``on_step(step, members, losses)`` is called
    after every step (members: the indices trained in it; losses: their training losses).
    A config with a list of learning rates is a search: one member per lr, one record;
    ``announce`` prints one line per candidate.  ``compile``: a mode of
    :data:`~recallbench.harness.ensemble.compile.COMPILE_MODES` (None: not compiled).
    When the members do not fit in the device's memory together, they train as
    consecutive smaller ensembles (:func:`chunks`; a search is never split).
    """
    searches = [as_config(c) for c in configs]
    if not searches:
        return []
    for i, c in enumerate(searches):
        if c.train.max_steps_limit is not None:
            raise EnsembleError(f"train.max_steps_limit = {c.train.max_steps_limit} (config {i}): "
                                "a batched ensemble does not extend its members' cap; train "
                                "such configs as single runs (without --ensemble)")
        if c.train.recipe is not None:
            raise EnsembleError(f"train.recipe = {c.train.recipe} (config {i}): a batched "
                                "ensemble trains only recallbench's default recipe; train "
                                "such configs as single runs (without --ensemble)")
    check_same_shape(searches)
    check_mode(compile)
    ADAPTERS.require(searches[0].model.adapter)
    device = pick_device(searches[0].train.device)
    records, offset = [], 0
    for part in chunks(searches, device):
        step = _shifted(on_step, offset) if on_step is not None and offset else on_step
        records += _run_batched(part, device, progress, step, announce, compile)
        offset += sum(len(candidates(c)) for c in part)
    return records


def _shifted(on_step, offset: int):
    """``on_step`` of a chunk, with its members numbered as in the whole ensemble."""
    return lambda step, members, losses: on_step(step, [k + offset for k in members], losses)


def chunks(searches: list[RunConfig], device: torch.device,
           free: int | None = None) -> list[list[RunConfig]]:
    """The configs in consecutive groups whose members fit together in ``free`` bytes
    (default: what the device has free); ConfigError when one member alone does not."""
    cfg = candidates(searches[0])[0]
    check_memory(cfg, str(device))  # one member must fit, as a single run must
    gpu = device.type == "cuda"
    sizes = [len(candidates(c)) for c in searches]
    free = available(device) if free is None else free
    fit = members_that_fit(cfg, sum(sizes), free, on_device=True if gpu else None)
    groups: list[list[RunConfig]] = [[]]
    count = 0
    for c, n in zip(searches, sizes):
        if groups[-1] and count + n > fit:
            groups.append([])
            count = 0
        groups[-1].append(c)
        count += n
    return groups


def _run_batched(searches: list[RunConfig], device: torch.device, progress: bool, on_step,
                 announce: bool, compile: str | None) -> list[dict[str, Any]]:
    """One batched model of ``searches``' members: train, choose, test; the records."""
    owner = [i for i, c in enumerate(searches) for _ in candidates(c)]
    cfgs = [m for c in searches for m in candidates(c)]
    threads = ensemble_threads(cfgs) if device.type == "cpu" else torch.get_num_threads()
    if device.type == "cpu":
        keep_freed_memory()  # harness/heap.py
    start = time.perf_counter()
    with cpu_threads(threads), warnings.catch_warnings():
        # ops without a batching rule (e.g. CPU SDPA) run member by member: correct, slower
        warnings.filterwarnings("ignore", message=".*have not yet implemented the batching rule")
        ens = StackedModels(cfgs, device)
        ens.check_vmap()
        tc = cfgs[0].train
        out = train(ens, show=progress, on_step=on_step, compile=compile) \
            if ens.trainable and tc.max_steps > 0 else None
        records = _searched(ens, out, searches, owner, announce)
    wall = round(time.perf_counter() - start, 3)
    for rec in records:
        rec["wall_s"] = wall
        rec["threads"] = threads if device.type == "cpu" else None
    return records


def _searched(ens: StackedModels, out: Outcome | None, searches: list[RunConfig],
              owner: list[int], show: bool) -> list[dict]:
    """One record per config: a single member's, or a search's best member's (by
    validation accuracy); only those members are scored on the test set."""
    chosen, entries = [], []
    for i, cfg in enumerate(searches):
        members = [k for k, o in enumerate(owner) if o == i]
        found = [_entry(ens, out, k) for k in members]
        for j, e in enumerate(found):
            announce_entry(show and len(members) > 1, e, j, len(members))
        best = choose(found)
        chosen.append(members[best if best is not None else 0])
        entries.append(found)
    tests = ens.score(ens.test_set, torch.tensor(chosen, device=ens.device), ens.cfgs[0].train.top_k)
    records = []
    for i, cfg in enumerate(searches):
        rec = _record(ens, out, chosen[i], tests[i])
        if isinstance(cfg.train.lr, list):
            if rec["status"] == "ok":
                batch_s = max(out.stop_s[k] for k, o in enumerate(owner) if o == i) if out else 0.0
                rec = searched_record(rec, cfg, entries[i], batch_s)
            else:
                rec = failed_record(cfg, f"every learning rate of {len(entries[i])} diverged "
                                         f"(first: {entries[i][0]['error']})")
        rec["ensemble"] = ens.K
        records.append(rec)
    return records


def _entry(ens: StackedModels, out: Outcome | None, k: int) -> dict:
    """Member ``k`` as a candidate of a learning-rate search."""
    lr = ens.cfgs[k].train.lr
    if out is None:
        return entry(lr, None, 0, True)
    val = out.best_val[k] if out.best_state[k] is not None else None
    return entry(lr, val, out.steps[k], out.history[k].summary()["converged"], out.failed[k])


def _record(ens: StackedModels, out: Outcome | None, k: int, test: dict) -> dict:
    """Member ``k``'s record from its best weights (``out`` None: nothing was trained)."""
    cfg, adapter = ens.cfgs[k], ens.adapters[k]
    if out is not None and out.failed[k] is not None:
        return failed_record(cfg, out.failed[k])
    if out is None:
        return make_record(cfg, adapter, ens.member_model(k), test, steps=0, train_s=0.0,
                           val_accuracy=None, best_step=0, device=ens.device,
                           convergence=History(None, None).summary(adapter.trainable))
    val = out.best_val[k] if out.best_state[k] is not None else None
    return make_record(cfg, adapter, ens.member_model(k), test, steps=out.steps[k],
                       train_s=out.stop_s[k], val_accuracy=val, best_step=out.best_step[k],
                       device=ens.device, convergence=out.history[k].summary(adapter.trainable))
