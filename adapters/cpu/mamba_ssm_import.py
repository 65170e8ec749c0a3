"""Import mamba-ssm anywhere, also where its CUDA extension was not built (a CPU machine).

mamba-ssm (2.3.2) is written for CUDA: its selective scan is a compiled extension
(``selective_scan_cuda``), and installing it with ``MAMBA_SKIP_CUDA_BUILD=TRUE`` leaves
that extension out, so ``import mamba_ssm`` fails.  :func:`import_mamba_ssm` imports it
behind a stub ``selective_scan_cuda`` whose functions raise, naming the fix; on a CPU the
models then run inside :data:`recallbench.adapters.cpu.mamba_ssm_swaps.SWAPS`, which
replaces every use of the extension.  :func:`availability` is the adapters' check.

transformers (>= 5) binds its Mamba / Mamba-2 kernels when its modeling module is first
imported: to mamba-ssm's if ``import mamba_ssm`` succeeds, else to its torch code.  Once
:func:`import_mamba_ssm` has made ``mamba_ssm`` importable on a CPU machine, a
transformers Mamba imported AFTER it binds to mamba-ssm's CUDA/Triton kernels and fails
on the CPU.  Import transformers' ``modeling_mamba`` / ``modeling_mamba2`` first if you
need them (the tests do).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types

INSTALL_HINT = (
    "pip install recallbench[mamba], then MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE "
    "pip install -c constraints.txt --no-build-isolation --no-deps mamba-ssm==2.3.2.post1")

_STUB_NAME = "selective_scan_cuda"


class _MissingExtension(types.ModuleType):
    """Stands in for the unbuilt ``selective_scan_cuda``: any use raises, naming the fix."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(
            f"selective_scan_cuda.{name}: mamba-ssm's CUDA extension was not built on this "
            "machine; on a CPU run the model inside recallbench.adapters.cpu.mamba_ssm_swaps."
            "SWAPS.applied()")


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a broken or None entry in sys.modules
        return None


@functools.lru_cache(maxsize=None)
def import_mamba_ssm() -> types.ModuleType:
    """``import mamba_ssm``, behind a stub ``selective_scan_cuda`` if the extension is absent.

    Raises ImportError (with the install hint) if mamba-ssm or one of its dependencies
    (einops, triton, huggingface_hub) is missing.
    """
    if _find_spec("mamba_ssm") is None:
        raise ImportError(f"mamba-ssm is not installed ({INSTALL_HINT})")
    stubbed = False
    if _STUB_NAME not in sys.modules and _find_spec(_STUB_NAME) is None:
        sys.modules[_STUB_NAME] = _MissingExtension(_STUB_NAME)
        stubbed = True
    try:
        module = importlib.import_module("mamba_ssm")
        for name in ("mamba_ssm.modules.mamba_simple", "mamba_ssm.modules.mamba2",
                     "mamba_ssm.modules.block", "mamba_ssm.models.mixer_seq_simple",
                     "mamba_ssm.modules.ssd_minimal"):
            importlib.import_module(name)
    except Exception:
        if stubbed:
            sys.modules.pop(_STUB_NAME, None)
        raise
    return module


@functools.lru_cache(maxsize=None)
def availability() -> tuple[bool, str]:
    """(True, "") if mamba-ssm imports here (on CPU through the stub), else (False, why)."""
    if _find_spec("mamba_ssm") is None:
        return False, f"mamba-ssm is not installed ({INSTALL_HINT})"
    try:
        import_mamba_ssm()
    except Exception as exc:  # a missing dependency, a broken build
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return False, f"mamba-ssm is installed but cannot be imported: {first}"
    return True, ""
