"""``recallbench doctor``: what runs here, and on which kernels.

Prints the devices (the CPU, and each kind of CUDA GPU present with its compute
capability), the versions of Python, torch (and the CUDA it was built with), Triton,
Lightning and every adapter's library, then for every registered adapter whether it can
run here and, on each device, the kernel path it will take and why
(:mod:`recallbench.api.kernels`): ``fused`` (the library's GPU kernels), ``reference``
(the library's pure-torch reference: always on a CPU, and on a GPU where the fused kernel
cannot run, slower), ``own`` (the adapter's own torch code), or ``unavailable`` with the
reason and its fix.  Exit status 0: it reports, it does not judge.
"""
from __future__ import annotations

import argparse
import os
import platform
from importlib import metadata

import torch

from recallbench.api import kernels
from recallbench.api.errors import reason
from recallbench.api.registry import ADAPTERS

LEGEND = ("fused: the library's GPU kernels; reference: its pure-torch reference (on a GPU: "
          "slower); own: the adapter's own torch code")


def devices() -> list[tuple[torch.device, str]]:
    """(device, description): the CPU, then the first CUDA device of each kind (name and
    compute capability) present; what paths are reported for."""
    out = [(torch.device("cpu"), f"cpu ({platform.machine()}, {os.cpu_count()} CPUs)")]
    seen = set()
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        device = torch.device("cuda", i)
        props = torch.cuda.get_device_properties(device)
        kind = (props.name, kernels.cuda_capability(device))
        if kind in seen:
            continue
        seen.add(kind)
        major, minor = kind[1]
        out.append((device, f"{device} {props.name}, compute capability {major}.{minor}, "
                            f"{props.total_memory / 2**30:.0f} GiB"))
    return out


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment_lines(libraries: list[str]) -> list[str]:
    """Versions: Python, torch and its CUDA, Triton, Lightning, the adapters' libraries."""
    cuda = torch.version.cuda
    built = f"CUDA {cuda} build" if cuda else "a CPU build, no CUDA"
    lines = [f"versions: python {platform.python_version()} | torch {torch.__version__} ({built}) | "
             f"triton {kernels.triton_version() or 'not installed'} | "
             f"lightning {_version('lightning')}"]
    if libraries:
        lines.append("libraries: " + ", ".join(f"{d} {_version(d)}" for d in libraries))
    return lines


def _library(name: str) -> str | None:
    """The distribution an adapter declares, None if none or if it cannot load."""
    try:
        return ADAPTERS.get(name).distribution
    except Exception:  # a third-party plugin that fails to load is listed with its reason
        return None


def _path(adapter, device: torch.device) -> tuple[str, str]:
    try:
        return adapter.kernel_path(device)
    except Exception as exc:  # a plugin's own bug must not stop the report
        return "error", reason(exc, 300)


def adapter_lines(name: str, origin: str, ok: bool, why: str,
                  where: list[tuple[torch.device, str]]) -> list[str]:
    """One adapter: whether it runs here, then its path and reason on each device."""
    if not ok:
        return [f"  {name}  unavailable: {why}"]
    adapter = ADAPTERS.get(name)
    lib = adapter.distribution
    head = f"  {name}  available" + (f" ({lib})" if lib else "") + \
        ("" if origin == "built-in" else f" [{origin}]")
    width = max(len(str(d)) for d, _ in where)
    rows = []
    for device, _ in where:
        path, because = _path(adapter, device)
        rows.append(f"    {str(device):<{width}}  {path:<11}  {because}")
    return [head, *rows]


def report() -> list[str]:
    """Every line ``recallbench doctor`` prints."""
    where = devices()
    rows = ADAPTERS.describe()
    libraries = sorted({lib for name in ADAPTERS.names() if (lib := _library(name))})
    lines = ["devices:", *(f"  {text}" for _, text in where), *environment_lines(libraries),
             "adapters, and the kernel path each takes on each device", f"({LEGEND}):"]
    for name, origin, ok, why in rows:
        lines += adapter_lines(name, origin, ok, why, where)
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``recallbench doctor`` takes no flags."""


def command(args) -> int:
    print("\n".join(report()))
    return 0
