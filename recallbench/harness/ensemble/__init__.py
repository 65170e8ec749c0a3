"""Batched ensembles: K independent runs of one model shape trained as one batched model.

    records = run_ensemble([cfg_seed0, cfg_seed1, cfg_seed2])   # one record per config

The K members' parameters are stacked (``torch.func.stack_module_state``) and one vmapped
forward/backward trains them all.  Each member stays its own run: its seed's training stream
and initial weights, its own AdamW lr and weight decay, label smoothing, gradient-norm clip,
best weights, early stop and patience (:mod:`recallbench.harness.convergence`); a member that
stops is frozen, one that diverges gets a ``failed`` record.  A list ``train.lr`` adds one
member per lr, and only the best by validation is tested (:mod:`recallbench.harness.lr_search`).
Each record is :func:`recallbench.api.record.make_record` of the member's best weights plus
``"ensemble": K``; ``train_s`` is the batched training's wall time until that member stopped.

Configs batch (:func:`shape_key`) when they differ only in :data:`MEMBER_KEYS`, ``train.threads``
and ``train.progress`` (:func:`ensemble_threads` picks one thread count).  Refused with
:class:`EnsembleError` (a ConfigError): ``train.max_steps_limit``, ``train.recipe``, and blocks
that do not vmap (:func:`run_ensemble` checks the vmapped forward against the plain one).  One
device, one process; members that do not fit in free memory together train as consecutive
smaller ensembles (:func:`chunks`).  ``compile``: an opt-in ``torch.compile`` of the step.
"""
from __future__ import annotations

from recallbench.harness.ensemble.run import chunks, run_ensemble
from recallbench.harness.ensemble.shape import (MEMBER_KEYS, EnsembleError, ensemble_threads,
                                                group_by_shape, shape_key)

__all__ = ["EnsembleError", "MEMBER_KEYS", "chunks", "ensemble_threads", "group_by_shape",
           "run_ensemble", "shape_key"]
