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
* **Validation, best weights and early stop**: every ``val_every`` steps each active member
  is validated; its best weights are kept; a member whose validation accuracy exceeds its
  ``early_stop`` (strictly, as Lightning's EarlyStopping) is frozen: it stops drawing
  data and updating, and its record reports the step it stopped at.  A member whose loss
  becomes NaN/inf is frozen and gets a ``failed`` record; the others go on.
* **Records**: :func:`recallbench.api.record.make_record` of each member's best weights on the
  test set, plus ``"ensemble": K``.  ``train_s`` is the wall time of the batched training
  until that member stopped (shared by the K members, not divided), ``wall_s`` the whole
  ensemble's.

Which configs may be batched (:func:`shape_key`): everything must be equal except the
keys in :data:`MEMBER_KEYS` (``train.seed, lr, weight_decay, label_smoothing, grad_clip,
early_stop``) and the execution-only keys ``train.threads`` and ``train.progress``
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

Limits: the blocks must vmap (pure PyTorch ops, no data-dependent Python control flow,
no custom CUDA/Triton kernels, no in-place updates of buffers); :func:`run_ensemble` checks
that the vmapped forward matches the plain one and raises :class:`EnsembleError` (a
ConfigError) naming the adapter otherwise.  One device, one process; no DDP.
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Mapping, Sequence

import torch

from recallbench.api.config import RunConfig
from recallbench.api.record import failed_record, make_record
from recallbench.api.registry import ADAPTERS
from recallbench.harness.ensemble_model import StackedModels
from recallbench.harness.ensemble_shape import (MEMBER_KEYS, EnsembleError, as_config,
                                                check_same_shape, ensemble_threads,
                                                group_by_shape, shape_key)
from recallbench.harness.ensemble_train import Outcome, train
from recallbench.harness.train import cpu_threads, pick_device

__all__ = ["EnsembleError", "MEMBER_KEYS", "ensemble_threads", "group_by_shape",
           "run_ensemble", "shape_key"]


def run_ensemble(configs: Sequence[RunConfig | Mapping[str, Any]], progress: bool = False,
                 on_step=None) -> list[dict[str, Any]]:
    """Train K configs of one shape (see :func:`shape_key`) as one batched model.

    Returns one result record per config, in order (schema of :func:`train.run`, plus
    ``"ensemble": K``).  ``on_step(step, members, losses)`` is called after every step
    (members: the indices trained in it; losses: their training losses).
    """
    cfgs = [as_config(c) for c in configs]
    if not cfgs:
        return []
    check_same_shape(cfgs)
    ADAPTERS.require(cfgs[0].model.adapter)
    device = pick_device(cfgs[0].train.device)
    threads = ensemble_threads(cfgs) if device.type == "cpu" else torch.get_num_threads()
    start = time.perf_counter()
    with cpu_threads(threads), warnings.catch_warnings():
        # ops without a batching rule (e.g. CPU SDPA) run member by member: correct, slower
        warnings.filterwarnings("ignore", message=".*have not yet implemented the batching rule")
        ens = StackedModels(cfgs, device)
        ens.check_vmap()
        tc = cfgs[0].train
        out = train(ens, show=progress, on_step=on_step) \
            if ens.trainable and tc.max_steps > 0 else None
        records = _records(ens, out, ens.score(ens.test_set, None, tc.top_k))
    wall = round(time.perf_counter() - start, 3)
    for rec in records:
        rec["wall_s"] = wall
        rec["threads"] = threads if device.type == "cpu" else None
    return records


def _records(ens: StackedModels, out: Outcome | None, tests: list[dict]) -> list[dict]:
    """Each member's record from its best weights (``out`` None: nothing was trained)."""
    records = []
    for k, cfg in enumerate(ens.cfgs):
        if out is not None and out.failed[k] is not None:
            rec = failed_record(cfg, out.failed[k])
        elif out is None:
            rec = make_record(cfg, ens.adapters[k], ens.member_model(k), tests[k], steps=0,
                              train_s=0.0, val_accuracy=None, best_step=0, device=ens.device)
        else:
            val = out.best_val[k] if out.best_state[k] is not None else None
            rec = make_record(cfg, ens.adapters[k], ens.member_model(k), tests[k],
                              steps=out.steps[k], train_s=out.stop_s[k], val_accuracy=val,
                              best_step=out.best_step[k], device=ens.device)
        rec["ensemble"] = ens.K
        records.append(rec)
    return records
