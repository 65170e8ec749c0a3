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

Modules: :mod:`~recallbench.harness.ensemble.shape` (which configs batch, threads),
:mod:`~recallbench.harness.ensemble.model` (the stacked model, scoring),
:mod:`~recallbench.harness.ensemble.train` (the training loop and the stacked AdamW),
:mod:`~recallbench.harness.ensemble.memory` (what K members need, how many fit),
:mod:`~recallbench.harness.ensemble.compile` (the opt-in compiled step);
:mod:`~recallbench.harness.ensemble.run` runs them and writes the records.

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
:mod:`recallbench.harness.ensemble.memory`) are checked against the device's free memory
(a GPU's, else the host's); members that do not fit together train as consecutive
smaller ensembles (:func:`chunks`), and one member that does not fit alone is refused as
a single run is.  ``compile``: an opt-in ``torch.compile`` of the vmapped blocks
(:mod:`recallbench.harness.ensemble.compile`), off by default.
"""
from __future__ import annotations

from recallbench.harness.ensemble.run import chunks, run_ensemble
from recallbench.harness.ensemble.shape import (MEMBER_KEYS, EnsembleError, ensemble_threads,
                                                group_by_shape, shape_key)

__all__ = ["EnsembleError", "MEMBER_KEYS", "chunks", "ensemble_threads", "group_by_shape",
           "run_ensemble", "shape_key"]
