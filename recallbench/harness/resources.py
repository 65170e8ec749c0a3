"""What a run will need, checked before anything is allocated.

:func:`estimate` adds up, in bytes, from the config alone (no tensor is made):

* **weights**: the parameters (the tied embedding V·D, and per layer about
  D_in·(3·D + D_in + 3·M·N + d_conv), D_in = expand·D, which bounds the linear Mamba's
  and the library mixers' projections), each held 5 times (weights, gradients, AdamW's
  two moments, the best-validation copy), plus the read-out's contiguous copy of Eᵀ
  and its gradient;
* **activations** of one training batch: per layer ~12 (B, L, D_in) tensors kept for the
  backward pass, twice the expanded (B, L, D_in, N) state of a selective scan, and the
  (B, M, L, min(L, 64)) scores of the masked matmul; the read-out's (B·Q, V) logits,
  their softmax and its gradient (Q: positions that ask a question);
* **evaluation**: the same without gradients, for batches of 512 sequences (training
  and evaluation batches take turns, so only the larger of the two counts);
* **data**: the fixed validation and test sets (two int64 (S, L) tensors each) and the
  sampler's scratch for the larger set (S·V/2 random scores when keys are ranked).

Measured against the tensors a real training step keeps (tests/test_bad_inputs_run.py),
the parameter part is 2 to 3 times the parameters, gradients and AdamW state, the data
part 2 to 6 times the sets, and the training batch 4 to 9 times the saved activations of
the linear Mamba and of attention but about as much as mamba-ssm's CPU reference scan
keeps: conservative for the built-in models, never a bound for every plugin.
:func:`check_memory` refuses, in one line naming the field that drives the largest part,
a run whose estimate exceeds the memory available (``MemAvailable`` of ``/proc/meminfo``,
or the cgroup's limit if lower; a CUDA device's free memory for what lives there).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from recallbench.api.errors import ConfigError
from recallbench.api.registry import ADAPTERS

FLOAT = 4  # bytes of a float32
LONG = 8  # bytes of an int64 token
EVAL_BATCH = 512  # sequences per evaluation batch (RecallDataModule, train.score)
CHUNK = 64  # the masked-matmul width of the linear Mamba's chunked form


class Part(NamedTuple):
    name: str
    bytes: int
    field: str  # the config field that drives this part most
    on_device: bool  # lives on the training device (False: host memory)
    batch: bool = False  # a batch's activations: batches take turns, the largest counts


def needed(parts: list[Part]) -> int:
    """Bytes the parts need together: all the lasting ones, and the largest batch."""
    return (sum(p.bytes for p in parts if not p.batch)
            + max((p.bytes for p in parts if p.batch), default=0))


def estimate(cfg) -> list[Part]:
    """The memory parts of a run of ``cfg`` (a resolved RunConfig), largest first."""
    m, t, task = cfg.model, cfg.train, cfg.task
    V, L, D, N = task.vocab_size, task.length, m.d_model, m.d_state
    Di, M, B = m.expand * m.d_model, m.n_heads, t.batch_size
    Q = min(getattr(task, "num_queries", L), L)
    trains = t.max_steps > 0 and getattr(ADAPTERS.get(m.adapter), "trainable", True)
    layer = Di * (3 * D + Di + 3 * M * N + m.d_conv)
    weights = FLOAT * (5 * (V * D + m.n_layers * layer) + 2 * V * D)

    def forward(batch: int, grad: bool) -> tuple[int, int]:
        """(bytes of the layers, bytes of the read-out) of one batch."""
        per_layer = batch * L * ((12 if grad else 4) * Di + 2 * Di * N + M * min(L, CHUNK))
        keep = m.n_layers if grad else 1  # without gradients layers do not pile up
        readout = batch * Q * (V * (3 if grad else 2) + D)
        return FLOAT * (keep * per_layer + batch * L * D), FLOAT * readout

    largest = max(t.val_size, t.test_size)
    data = LONG * 2 * L * (t.val_size + t.test_size + B) + FLOAT * largest * (V // 2 + 4 * L)
    parts = [
        Part("the model's parameters and optimizer state", weights,
             "task.vocab_size" if V * D >= m.n_layers * layer else "model.d_model", True),
        Part("the validation and test sets", data,
             "train.test_size" if t.test_size >= t.val_size else "train.val_size", False),
    ]
    layers, readout = forward(min(EVAL_BATCH, largest), False)
    parts.append(Part("an evaluation batch of 512 sequences", layers + readout,
                      "task.vocab_size" if readout >= layers else "task.seq_len", True, True))
    if trains:
        parts.append(Part("one training batch", sum(forward(B, True)), "train.batch_size",
                          True, True))
    return sorted(parts, key=lambda p: -p.bytes)


def host_available() -> int:
    """Bytes of memory this process may still take: MemAvailable, or the cgroup's room."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    if avail is None:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            avail = min(avail, int(limit) - used)
    except (OSError, ValueError):
        pass
    return max(avail, 0)


def human(n: float) -> str:
    """Bytes in binary units, two or three significant digits: ``3.2 TiB``, ``512 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_memory(cfg, device: str = "cpu", host_free: int | None = None) -> int:
    """ConfigError unless a run of ``cfg`` on ``device`` fits; returns the estimate in bytes.

    On a CUDA device the model's parts are checked against the device's free memory and
    the data against the host's; ``host_free`` overrides :func:`host_available`.
    """
    parts = estimate(cfg)
    pools = [("this machine", host_available() if host_free is None else host_free,
              [p for p in parts if not (device.startswith("cuda") and p.on_device)])]
    if device.startswith("cuda"):
        import torch

        free = torch.cuda.mem_get_info(torch.device(device))[0]
        pools.append((f"the GPU {device}", free, [p for p in parts if p.on_device]))
    for where, free, mine in pools:
        need = needed(mine)
        if mine and need > free:
            top = mine[0]
            raise ConfigError(f"{top.field}={_field_value(cfg, top.field)}: a run would need "
                              f"~{human(need)} ({top.name}: ~{human(top.bytes)}), {where} has "
                              f"{human(free)} available")
    return needed(parts)


def _field_value(cfg, field: str):
    section, _, key = field.partition(".")
    return getattr(cfg.task if section == "task" else getattr(cfg, section), key)
