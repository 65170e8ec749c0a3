"""Result records: what one run measured, as plain JSON.

Schema ``recallbench.result/1``; docs/reference.md ("Result record") gives each key's meaning::

    schema, status ("ok" | "failed"), error (null or a one-line reason),
    accuracy, accuracy_topk, top_k, correct, correct_topk,
    total (train.test_size × the task's queries per sequence: :func:`run_problem`),
    val_accuracy, best_step, converged, stop_reason ("early_stop" | "plateau" | "max_steps" |
    null), steps_to (:mod:`recallbench.harness.convergence`), extended, max_steps_reached
    (:mod:`recallbench.harness.module`), lr, lr_search (:mod:`recallbench.harness.lr_search`),
    state_size (scalars per sequence; null when it grows with L), state_note, state_bits,
    info_bits (N_f · log2 V_v), params, steps, train_s, wall_s, threads, seed, config,
    config_hash, versions, device, kernels (:mod:`recallbench.api.kernels`), node ({host,
    ray_node_id}), cpu ({model, cpus, threads}), wrapper (:mod:`recallbench.harness.model`),
    provenance (:func:`recallbench.api.provenance.provenance`)

Every key is present, except ``kernels`` and ``cpu`` in a failed record (whose ``wrapper``, and
``node`` when the worker was lost, are null).  ``converged`` is true for an evaluation-only
model.  Nothing in a record is executable; records are read back with ``json``.
"""
from __future__ import annotations

import json
import math
import platform
import socket
import sys
from importlib import metadata
from typing import Any, Mapping

import torch

from recallbench.api.errors import ConfigError
from recallbench.api.fields import short
from recallbench.api.kernels import TRITON
from recallbench.api.provenance import provenance
from recallbench.api.registry import ADAPTERS

SCHEMA = "recallbench.result/1"
DTYPE_BITS = {torch.float32: 32, torch.float16: 16, torch.bfloat16: 16, torch.float64: 64}
#: a record's times: null or a finite number of seconds >= 0
SECONDS = ("cpu_s", "wall_s", "train_s")
_QUERIES: dict[str, int | None] = {}  # a task section's queries per sequence, by its JSON


def tested_queries(config: Mapping) -> tuple[int, int] | None:
    """(``train.test_size``, the task's queries per sequence, ``Task.num_queries``) of a run
    of ``config``: its ``total`` is their product, since every test sequence asks every one
    of its queries.  None when the config cannot tell: no test size, or a task not installed
    here (or whose parameters it refuses)."""
    from recallbench.api.registry import TASKS

    task = config.get("task") if isinstance(config, Mapping) else None
    train = config.get("train") if isinstance(config, Mapping) else None
    size = train.get("test_size") if isinstance(train, Mapping) else None
    if not isinstance(task, Mapping) or not isinstance(size, int) or isinstance(size, bool) \
            or size < 1:
        return None
    key = json.dumps(task, sort_keys=True, default=str)
    if key not in _QUERIES:
        try:
            per = TASKS.get(task.get("name")).from_params(
                {k: v for k, v in task.items() if k != "name"}).num_queries
        except (ConfigError, ImportError, AttributeError, TypeError, ValueError,
                NotImplementedError):
            per = None
        if len(_QUERIES) > 4096:
            _QUERIES.clear()
        _QUERIES[key] = per if isinstance(per, int) and per >= 1 else None
    per = _QUERIES[key]
    return None if per is None else (size, per)


def _seconds(x: Any) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            and x >= 0)


def run_problem(rec: Mapping) -> str | None:
    """Why a record's numbers cannot be those of a run of its config, or None: its times
    (:data:`SECONDS`) null or finite and >= 0, and an ok record's ``total`` exactly
    :func:`tested_queries`' product (counts multiplied by 10 keep the accuracy but narrow
    every interval drawn from them).  Its counts themselves are
    :func:`recallbench.api.verify.counts_problem`'s to judge."""
    for key in SECONDS:
        if rec.get(key) is not None and not _seconds(rec[key]):
            return f"{key} = {short(rec[key])} is impossible (a finite number >= 0): record not used"
    total = rec.get("total")
    got = tested_queries(rec.get("config")) if rec.get("status") == "ok" else None
    if total is not None and got is not None and total != got[0] * got[1]:
        return (f"total = {short(total)} is not the queries its config tests, train.test_size "
                f"× queries per sequence = {got[0]} × {got[1]} = {got[0] * got[1]} (counts "
                "scaled?): record not used")
    return None


def versions(distribution: str | None = None) -> dict[str, str]:
    """Python's version and those of recallbench, torch, Lightning and ``distribution``
    (the one an adapter declares runs its mixer), each under its distribution name."""
    out = {"python": platform.python_version()}
    for dist in ("recallbench", "torch", "lightning", TRITON,
                 *([distribution] if distribution else [])):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def adapter_distribution(name: str | None) -> str | None:
    """The distribution an adapter declares (``Adapter.distribution``); None if the adapter
    declares none or cannot be loaded here."""
    try:
        return ADAPTERS.get(name).distribution if name else None
    except ConfigError:
        return None


def adapter_provenance(name: str | None) -> dict | None:
    """The adapter's provenance (distribution, versions, source hash); None if it cannot load."""
    try:
        return provenance(name) if name else None
    except ConfigError:
        return None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.machine()}"


def kernels_used(adapter, device: torch.device) -> dict[str, str | None]:
    """The kernel path an adapter takes on ``device``, why, and torch's CUDA version."""
    path, reason = adapter.kernel_path(device)
    return {"path": path, "reason": reason, "cuda": torch.version.cuda}


def node() -> dict[str, str | None]:
    """Where this process runs: its host name and, inside a Ray worker (or a driver connected
    to Ray), the Ray node id, which tells apart several nodes on one host."""
    ray = sys.modules.get("ray")  # never imported just for this
    ray_id = None
    if ray is not None and ray.is_initialized():
        ray_id = ray.get_runtime_context().get_node_id()
    return {"host": socket.gethostname(), "ray_node_id": ray_id}


def cpu_info() -> dict[str, Any]:
    """The CPU a run trained on: its model name (``/proc/cpuinfo``, else the platform's), the
    logical CPUs of the machine and the threads torch used.  Recorded so that a card's CPU
    times can be read against their machine; a card's verdict counts tokens, not seconds."""
    name = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), None)
    except OSError:
        pass
    import os

    return {"model": name or platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "threads": torch.get_num_threads()}


def make_record(cfg, adapter, model, test: dict[str, Any], *, steps: int, train_s: float,
                val_accuracy: float | None, best_step: int, device: torch.device,
                convergence: dict[str, Any]) -> dict:
    """The record of a trained (or evaluated) model; ``convergence``: the
    ``converged``, ``stop_reason`` and ``steps_to`` of its validation history, and where
    the cap was extended, ``extended`` and ``max_steps_reached``."""
    dtype = next(model.parameters()).dtype
    return {
        "schema": SCHEMA,
        "status": "ok",
        "error": None,
        "accuracy": test["accuracy"],
        "accuracy_topk": test["accuracy_topk"],
        "top_k": cfg.train.top_k,
        "correct": int(test["correct"]),
        "correct_topk": int(test["correct_topk"]),
        "total": int(test["total"]),
        "val_accuracy": val_accuracy,
        "best_step": best_step,
        "converged": bool(convergence["converged"]),
        "stop_reason": convergence["stop_reason"],
        "steps_to": convergence["steps_to"],
        "extended": int(convergence.get("extended", 0)),
        "max_steps_reached": int(convergence.get("max_steps_reached", cfg.train.max_steps)),
        "lr": cfg.train.lr,
        "lr_search": None,
        "state_size": adapter.state_size(),
        "state_note": adapter.state_note(),
        "state_bits": DTYPE_BITS.get(dtype, 32),
        "info_bits": cfg.task.info_bits,
        "params": sum(p.numel() for p in model.parameters()),
        "steps": steps,
        "train_s": round(train_s, 3),
        "seed": cfg.train.seed,
        "config": cfg.to_dict(),
        "config_hash": cfg.hash(),
        "versions": versions(adapter.distribution),
        "device": device_name(device),
        "kernels": kernels_used(adapter, device),
        "node": node(),
        "cpu": cpu_info(),
        "wrapper": getattr(model, "wrapper", None),
        "provenance": adapter_provenance(cfg.model.adapter),
    }


def failed_record(cfg, error: str) -> dict:
    """The record of a run that raised or diverged: its config, and why."""
    return {"schema": SCHEMA, "status": "failed", "error": error, "seed": cfg.train.seed,
            "config": cfg.to_dict(), "config_hash": cfg.hash(),
            "versions": versions(adapter_distribution(cfg.model.adapter)), "node": node(),
            "wrapper": None, "provenance": adapter_provenance(cfg.model.adapter)}
