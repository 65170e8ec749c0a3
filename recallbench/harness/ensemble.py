"""Batched ensembles: K independent runs of one model shape trained as one batched model.

    records = run_ensemble([cfg_seed0, cfg_seed1, cfg_seed2])   # one record per config

The K members' parameters are stacked (``torch.func.stack_module_state``) and one
forward/backward pass trains all of them (``torch.func.vmap`` over
``torch.func.functional_call`` of the adapter's blocks), so each op runs once on a
K-times bigger tensor instead of K times.  Everything that makes a run a run stays
per member:

* **Data**: member k draws its training batches from the generator a single run with its
  seed would use (``data.make_generator(TRAIN_STREAM, seed, 0, 0)``, the stream of
  :class:`recallbench.harness.data.TrainStream`); the fixed validation and test sets
  (``data.fixed_set``) do not depend on the seed and are shared.
* **Initialization**: member k is built exactly as :func:`recallbench.harness.train.run` builds it
  (``seed_everything(seed)``, then the adapter and :class:`RecallModel`), so its initial
  weights are the single run's.
* **Optimizer**: AdamW (the single run's: betas, eps 1e-8, decoupled weight decay) with the
  member's own lr and weight decay, the shared warmup → flat → cosine schedule; the
  loss is the member's own mean cross-entropy with its own label smoothing.
* **Gradient clipping**: each member's global gradient norm (over all its parameters) is
  clipped to its own ``grad_clip`` (the formula of ``torch.nn.utils.clip_grad_norm_``),
  so a member with a huge gradient does not scale the others.
* **Validation, best weights, early stop and patience**: every ``val_every`` steps each
  active member is validated; its best weights are kept; a member whose validation
  accuracy exceeds its ``early_stop`` (strictly, as Lightning's EarlyStopping) or that
  reaches a plateau (its ``patience``; :mod:`recallbench.harness.convergence`, as the single
  run) is frozen: it stops drawing data and updating, and its record reports the step it
  stopped at.  A member whose loss becomes NaN/inf is frozen and gets a ``failed``
  record; the others go on.
* **Learning-rate searches**: a config whose ``train.lr`` is a list adds one member per
  learning rate; its record is its best member's by validation accuracy, and only that
  member is scored on the test set (:mod:`recallbench.harness.lr_search`).
* **Records**: :func:`recallbench.api.record.make_record` of each member's best weights on the
  test set, plus ``"ensemble": K``.  ``train_s`` is the wall time of the batched training
  until that member stopped (shared by the K members, not divided), ``wall_s`` the whole
  ensemble's.

Which configs may be batched (:func:`shape_key`): everything must be equal except the
keys in :data:`MEMBER_KEYS` (``train.seed, lr, weight_decay, label_smoothing, grad_clip,
early_stop, patience``) and the execution-only keys ``train.threads`` and ``train.progress``
(the ensemble uses one thread count: the first config's, else 1, see :func:`ensemble_threads`).

Modules: :mod:`~recallbench.harness.ensemble_shape` (which configs batch, threads),
:mod:`~recallbench.harness.ensemble_model` (the stacked model, scoring),
:mod:`~recallbench.harness.ensemble_train` (the training loop and the stacked AdamW);
this one runs them and writes the records.

Speed (CPU).  Stacking K members turns K small ops into one, which pays where a single
run is dispatch-bound, and costs where the stacked tensors outgrow the cache.  Like a
single run (:meth:`RecallModel.logits_at`), the batched path reads out only the labelled
positions, here fused and blocked so the K·Q·V logits never exist at once
(:mod:`recallbench.harness.linear_ce`); it also makes one AdamW update for all members and has
no Lightning machinery.  Measured with ``benchmarks/bench_ensemble.py --table8 --repeat 2``
(K = 8, 100 steps, cells of the D–N study at V = 512, idle 2-core machine), throughput
against 8 sequential ``train.run`` calls: D = 4: 1.57x with 1 thread, 2.24x with 2;
D = 8: 1.43x / 2.26x; D = 16: 1.29x / 2.10x; D = 32: 1.08x / 1.84x; the Table-8 model
(V = 128, D = 64): 0.96x / 1.63x.  So on a CPU the ensemble's gain is mostly that one
process keeps every core busy: against the same 8 runs over 2 worker processes (each on
one thread) it was 1.22x faster at D = 4 and 0.83x as fast at D = 64.

Not supported: ``train.max_steps_limit`` (extending a run still improving at its cap,
:mod:`recallbench.harness.module`) is refused with an :class:`EnsembleError`; a
learning-rate search with it trains its candidates one by one.  So is ``train.recipe``
(:mod:`recallbench.api.recipes`: the paper's fresh validation sets and step offsets).

Limits: the blocks must vmap (pure PyTorch ops, no data-dependent Python control flow,
no custom CUDA/Triton kernels, no in-place updates of buffers); :func:`run_ensemble` checks
that the vmapped forward matches the plain one and raises :class:`EnsembleError` (a
ConfigError) naming the adapter otherwise.  One device, one process; no DDP.

Size: K is bounded by memory, not by the code.  Before building, the members' parameters,
optimizer state and training batches (K times a single run's,
:mod:`recallbench.harness.ensemble_memory`) are checked against the device's free memory
(a GPU's, else the host's); members that do not fit together train as consecutive
smaller ensembles (:func:`chunks`), and one member that does not fit alone is refused as
a single run is.  ``compile``: an opt-in ``torch.compile`` of the vmapped blocks
(:mod:`recallbench.harness.ensemble_compile`), off by default.
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Mapping, Sequence

import torch

from recallbench.api.config import RunConfig
from recallbench.api.record import failed_record, make_record
from recallbench.api.registry import ADAPTERS
from recallbench.harness.convergence import History
from recallbench.harness.ensemble_compile import check_mode
from recallbench.harness.ensemble_memory import available, members_that_fit
from recallbench.harness.ensemble_model import StackedModels
from recallbench.harness.ensemble_shape import (MEMBER_KEYS, EnsembleError, as_config,
                                                check_same_shape, ensemble_threads,
                                                group_by_shape, shape_key)
from recallbench.harness.ensemble_train import Outcome, train
from recallbench.harness.lr_candidates import announce as announce_entry
from recallbench.harness.lr_candidates import candidates, choose, entry, searched_record
from recallbench.harness.resources import check_memory
from recallbench.harness.prepare import cpu_threads, pick_device

__all__ = ["EnsembleError", "MEMBER_KEYS", "chunks", "ensemble_threads", "group_by_shape",
           "run_ensemble", "shape_key"]


def run_ensemble(configs: Sequence[RunConfig | Mapping[str, Any]], progress: bool = False,
                 on_step=None, announce: bool = False, compile: str | None = None
                 ) -> list[dict[str, Any]]:
    """Train K configs of one shape (see :func:`shape_key`) as one batched model.

    Returns one result record per config, in order (schema of :func:`train.run`, plus
    ``"ensemble": K``, the members trained).  ``on_step(step, members, losses)`` is called
    after every step (members: the indices trained in it; losses: their training losses).
    A config with a list of learning rates is a search: one member per lr, one record;
    ``announce`` prints one line per candidate.  ``compile``: a mode of
    :data:`~recallbench.harness.ensemble_compile.COMPILE_MODES` (None: not compiled).
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
