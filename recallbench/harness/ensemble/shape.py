"""Which configs can be trained as one batched ensemble, and on how many threads.

Configs batch together when they have the same :func:`shape_key`: everything equal except
the per-member keys :data:`MEMBER_KEYS` and the execution-only keys that do not place the
model (threads, progress; the device must be equal, one batched model lives on one).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from recallbench.api.canonical import EXECUTION_KEYS, sha256_of
from recallbench.api.config import RunConfig, resolve
from recallbench.api.errors import ConfigError
from recallbench.harness.prepare import TINY_CHANNELS

#: train keys that may differ between the members of one ensemble
MEMBER_KEYS = ("seed", "lr", "weight_decay", "label_smoothing", "grad_clip", "early_stop",
               "patience")
#: execution-only train keys ignored by shape_key (the ensemble picks one value); the
#: device is not among them
IGNORED_KEYS = tuple(k for k in EXECUTION_KEYS["train"] if k != "device")


class EnsembleError(ConfigError):
    """Configs that cannot be trained as one batched ensemble."""


def as_config(config: RunConfig | Mapping[str, Any]) -> RunConfig:
    return config if isinstance(config, RunConfig) else resolve(config)


def _shape_dict(cfg: RunConfig) -> dict[str, Any]:
    d = cfg.to_dict()
    d["train"] = {k: v for k, v in d["train"].items()
                  if k not in MEMBER_KEYS and k not in IGNORED_KEYS}
    return d


def shape_key(cfg: RunConfig | Mapping[str, Any]) -> str:
    """A hash of everything that must be equal for configs to share one batched model.

    Equal: the task, the whole model section, and train's max_steps, batch_size,
    val_size, test_size, val_every, warmup_frac, decay_frac, betas, top_k and device.
    Free per member: ``MEMBER_KEYS`` (seed, lr, weight_decay, label_smoothing,
    grad_clip, early_stop, patience).  Ignored: threads, progress.
    """
    return sha256_of(_shape_dict(as_config(cfg)))[:16]


def group_by_shape(configs: Sequence[RunConfig | Mapping[str, Any]]) -> dict[str, list[int]]:
    """Indices of ``configs`` grouped by :func:`shape_key` (in first-seen order)."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(shape_key(c), []).append(i)
    return groups


def check_same_shape(cfgs: Sequence[RunConfig]) -> None:
    """EnsembleError naming the first key in which a config differs from the first one."""
    key = shape_key(cfgs[0])
    for i, c in enumerate(cfgs[1:], 1):
        if shape_key(c) != key:
            raise EnsembleError(f"configs 0 and {i} cannot share a batched ensemble: they differ "
                                f"in {_first_difference(cfgs[0], c)}; only train."
                                f"{', train.'.join(MEMBER_KEYS)} may differ")


def _first_difference(a: RunConfig, b: RunConfig) -> str:
    da, db = _shape_dict(a), _shape_dict(b)
    for section in da:
        for key in sorted(set(da[section]) | set(db[section])):
            if da[section].get(key) != db[section].get(key):
                return f"{section}.{key} ({da[section].get(key)!r} vs {db[section].get(key)!r})"
    return "?"


def ensemble_threads(cfgs: Sequence[RunConfig]) -> int:
    """CPU threads for an ensemble: the first config's ``train.threads``, else the harness's
    rule (:data:`recallbench.harness.prepare.TINY_CHANNELS`) applied to the batched width K·expand·D.

    Measured (benchmarks/bench_ensemble.py, Table-8 model, K = 8, 2 cores): on an idle
    machine 2 threads ran the batched model 1.8x faster than 1 thread; on a machine shared
    with other jobs 2 threads were 2-2.3x slower, so set ``train.threads: 1`` (or
    ``--threads-per-worker 1``) when the cores are busy.
    """
    if cfgs[0].train.threads is not None:
        return cfgs[0].train.threads
    width = len(cfgs) * cfgs[0].model.expand * cfgs[0].model.d_model
    return 1 if width <= TINY_CHANNELS else torch.get_num_threads()
