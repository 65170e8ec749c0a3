"""What validation recomputes instead of trusting: state size, bits, info bits, library.

A submission states ``state_size`` (scalars of recurrent state per sequence) and
``state_bits`` (bits per scalar) per budget; the ranking divides by their product, so
neither is taken from the file.  :func:`expected_state` asks the adapter itself,
``ADAPTERS.get(name)(ModelConfig(...)).state_size()``, and takes the bits from the dtype
the harness trains in (torch's default, as ``recallbench.api.record`` counts them).  An
adapter that is not installed here cannot be checked, and the submission is refused in
one line saying so rather than trusted.  A point's ``info_bits`` (what its queries ask
for, the Fano bound's numerator) comes from its task config (:func:`check_info_bits`).
The library a row credits (:func:`check_library`)
is the one the adapter declares, at the version the runs recorded.
"""
from __future__ import annotations

import math
from typing import Mapping

from recallbench.api.errors import ConfigError
from recallbench.leaderboard.checks import need, short


def harness_state_bits() -> int:
    """Bits per state scalar in the dtype the harness trains in (torch's default dtype)."""
    import torch

    from recallbench.api.record import DTYPE_BITS

    return DTYPE_BITS.get(torch.get_default_dtype(), 32)


def installed_adapter(name, where: str):
    """The adapter class ``name``; a one-line refusal when it is not installed here."""
    from recallbench.api.registry import ADAPTERS

    try:
        return ADAPTERS.get(name)
    except ConfigError:
        raise ConfigError(f"{where}: adapter {short(name)} is not installed here, so its state "
                          "size cannot be recomputed; the file's value is not trusted") from None


def expected_state(model: Mapping, where: str) -> tuple[int | None, int]:
    """(state_size, state_bits) of a budget's model config, computed by its adapter."""
    from recallbench.api.config import ModelConfig
    from recallbench.api.fields import from_mapping

    cls = installed_adapter(model.get("adapter"), where)
    try:
        cfg = from_mapping(ModelConfig, model, "model")
        cfg.validate()
        size = cls(cfg).state_size()
    except ConfigError as exc:
        raise ConfigError(f"{where}: config.{str(exc)[:200]}") from None
    return size, harness_state_bits()


def check_state(budget: Mapping, where: str) -> None:
    """The budget's ``state_size`` and ``state_bits`` equal what its adapter computes."""
    size, bits = expected_state(budget["config"]["model"], where)
    need(budget["state_size"] == size, where,
         f"state_size {short(budget['state_size'])} is not the adapter's "
         f"{'null (grows with L)' if size is None else size} for this config")
    need(budget["state_bits"] == bits, where,
         f"state_bits {short(budget['state_bits'])} is not {bits} (the dtype the harness trains in)")


def check_info_bits(point: Mapping, task: Mapping, where: str) -> None:
    """The point's ``info_bits`` equal what its task, built from its config, asks for."""
    from recallbench.api.registry import TASKS

    params = {k: v for k, v in task.items() if k != "name"}
    try:
        bits = TASKS.get(task.get("name")).from_params(params).info_bits
    except ConfigError as exc:
        raise ConfigError(f"{where}: config.{str(exc)[:200]}") from None
    need(math.isclose(point["info_bits"], bits, rel_tol=1e-9), where,
         f"info_bits {short(point['info_bits'])} is not the task's {bits:.6g}")


def check_library(model: Mapping, versions: Mapping, where: str) -> None:
    """``model.library`` names the adapter's distribution and class, at the runs' version."""
    cls = installed_adapter(model["adapter"], where)
    dist = getattr(cls, "distribution", None) or "recallbench"
    want = {"name": dist, "version": versions.get(dist),
            "class": getattr(cls, "library_class", "") or None}
    lib = model["library"]
    for k, v in want.items():
        need(isinstance(lib, dict) and lib.get(k) == v, where,
             f"model.library.{k} is not {short(v)}, what adapter {model['adapter']} declares")
    need(set(lib) == set(want), where, "model.library has fields other than name, version, class")
