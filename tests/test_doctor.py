"""Kernel paths: the decisions from facts, the GPU fallbacks, the pre-flight, `recallbench
doctor`, the record's `kernels`, and `install.sh --cuda`.

No test needs a GPU: the facts (compute capability, Triton version, which compiled
extensions import) are replaced with monkeypatch, and the fallbacks are run on the meta
device, which is "not the CPU" to the adapters just as a CUDA device is.
"""
from __future__ import annotations

import json
import subprocess
import sys
import types
import warnings
from importlib import metadata
from pathlib import Path

import pytest
import torch

from recallbench.adapters import kernel_choice
from recallbench.adapters.kernel_swap import Swap, SwapSet
from recallbench.api import kernels
from recallbench.api.config import resolve
from recallbench.api.errors import UnavailableError
from recallbench.api.kernels import FUSED, OWN, PATHS, REFERENCE, UNAVAILABLE
from recallbench.api.registry import ADAPTERS
from recallbench.cli import doctor

ROOT = Path(__file__).resolve().parent.parent
CUDA0, META = torch.device("cuda", 0), torch.device("meta")
TORCH_PIN = (ROOT / "constraints.txt").read_text().split("torch==")[1].split()[0]


def paths_of(out: str) -> dict[str, dict[str, tuple[str, str]]]:
    """Doctor's output as {adapter: {device: (path, reason)}}; unavailable: {"": (..)}."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    name = None
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("adapters"))
    for line in lines[start + 1:]:
        if line.startswith("  ") and not line.startswith("    "):
            name, _, rest = line.strip().partition("  ")
            found[name] = {"": (UNAVAILABLE, rest)} if rest.startswith("unavailable") else {}
        elif line.startswith("    ") and name is not None:
            device, path, reason = line.split(None, 2)
            found[name][device] = (path, reason)
    return found


@pytest.fixture
def hopper(monkeypatch):
    """The facts of the measured H200: Hopper, Triton 3.6.0, mamba-ssm without its compiled
    selective scan, no causal-conv1d, no tilelang; doctor sees the CPU and one GPU."""
    monkeypatch.setattr(kernels, "cuda_capability",
                        lambda d: (9, 0) if torch.device(d).type != "cpu" else None)
    monkeypatch.setattr(kernels, "triton_version", lambda: "3.6.0")
    monkeypatch.setattr(kernels, "importable", lambda name: False)
    monkeypatch.setattr(doctor, "devices", lambda: [
        (torch.device("cpu"), "cpu (test)"), (CUDA0, "cuda:0 fake H200, compute capability 9.0")])


@pytest.fixture
def fla_routes():
    """The fla swap set's GPU routes as they were (the set is process-wide)."""
    from recallbench.adapters.cpu.fla_swaps import SWAPS
    before = set(SWAPS.everywhere)
    yield SWAPS
    SWAPS.everywhere.clear()
    SWAPS.everywhere.update(before)


# -- the decisions, from facts alone -------------------------------------------------------
@pytest.mark.parametrize("capability,triton,tilelang,expected", [
    ((9, 0), "3.6.0", False, REFERENCE),  # the measured H200
    ((9, 0), "3.7.0+git1a2b", False, REFERENCE),
    ((9, 0), "3.7.1", False, FUSED),  # fixed in Triton 3.7.1
    ((9, 0), "3.3.1", False, FUSED),  # before the regression
    ((9, 0), "3.6.0", True, FUSED),  # fla takes tilelang's kernel instead
    ((8, 0), "3.6.0", False, FUSED),  # an A100
    ((10, 0), "3.6.0", False, FUSED),  # Blackwell
])
def test_fla_gated_kernels_fall_back_only_on_hopper_with_an_old_triton(capability, triton,
                                                                       tilelang, expected):
    path, reason = kernel_choice.fla("cuda", references=("fla.ops.simple_gla.naive",),
                                     missing_reference=None, refused=("chunk_simple_gla",),
                                     capability=capability, triton=triton, tilelang=tilelang)
    assert path == expected
    if path == REFERENCE:
        assert "chunk_simple_gla" in reason and "#640" in reason and "3.7.1" in reason
        assert "bash install.sh --cuda" in reason


def test_fla_decisions_without_gated_kernels_on_the_cpu_and_without_a_reference():
    kw = dict(references=("fla.ops.x.naive",), capability=(9, 0), triton="3.6.0", tilelang=False)
    assert kernel_choice.fla("cuda", missing_reference=None, refused=(), **kw)[0] == FUSED
    path, reason = kernel_choice.fla("cpu", missing_reference=None, refused=("k",), **kw)
    assert path == REFERENCE and "fla.ops.x.naive" in reason
    path, reason = kernel_choice.fla("cuda", missing_reference="fla.ops.x.naive", refused=("k",), **kw)
    assert path == UNAVAILABLE and "fla.ops.x.naive" in reason and "fix:" in reason


@pytest.mark.parametrize("device,scan,conv,expected,words", [
    ("cpu", True, True, REFERENCE, "selective_scan_ref"),
    ("cuda", True, True, FUSED, "selective-scan CUDA kernel"),
    ("cuda", True, False, FUSED, "causal-conv1d is not installed"),
    ("cuda", False, True, REFERENCE, "selective_scan_cuda does not import"),
])
def test_mamba1_decision(device, scan, conv, expected, words):
    path, reason = kernel_choice.mamba1(device, selective_scan=scan, causal_conv1d=conv)
    assert path == expected and words in reason


def test_mamba2_needs_no_compiled_extension_on_a_gpu():
    assert kernel_choice.mamba2("cuda", causal_conv1d=False)[0] == FUSED
    assert kernel_choice.mamba2("cpu", causal_conv1d=True)[0] == REFERENCE


def test_release_reads_the_numeric_part_of_a_version():
    assert kernel_choice.release("3.6.0+git1234") == (3, 6, 0)
    assert kernel_choice.release("3.7.1rc1") == (3, 7, 1)
    assert kernel_choice.release(None) == () and kernel_choice.release("dev") == ()


# -- the pre-flight: unavailable raises, a GPU fallback warns in one line -------------------
class _Declared:
    """A stand-in adapter class that declares a fixed path."""

    name = "rb-declared"

    def __init__(self, path, reason):
        self.path, self.reason = path, reason

    def kernel_path(self, device):
        return self.path, self.reason


def test_fallback_message_is_one_line_and_only_for_a_gpu_reference():
    line = kernels.fallback_message("x", CUDA0, REFERENCE, "why\nand the fix")
    assert "\n" not in line and "adapter x" in line and "why and the fix" in line
    assert "reference" in line and "cuda:0" in line
    assert kernels.fallback_message("x", torch.device("cpu"), REFERENCE, "why") is None
    assert kernels.fallback_message("x", CUDA0, FUSED, "why") is None


def test_preflight_warns_once_for_a_gpu_fallback_and_raises_for_unavailable():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert kernels.preflight(_Declared(REFERENCE, "no kernel"), CUDA0) == (REFERENCE, "no kernel")
        kernels.preflight(_Declared(REFERENCE, "no kernel"), torch.device("cpu"))  # a CPU: silent
        kernels.preflight(_Declared(FUSED, "kernels"), CUDA0)
    assert [w.category for w in caught] == [kernels.KernelFallbackWarning]
    assert "no kernel" in str(caught[0].message)
    with pytest.raises(UnavailableError, match="rb-declared cannot run on cuda:0: nothing; fix: x"):
        kernels.preflight(_Declared(UNAVAILABLE, "nothing; fix: x"), CUDA0)


def test_a_run_whose_kernels_cannot_run_stops_in_one_line_before_training(cli, tmp_path):
    base = ADAPTERS.get("linear-mamba")

    class NoKernel(base):
        @classmethod
        def kernel_path(cls, device):
            return UNAVAILABLE, "no kernel for this device; fix: another device"

    ADAPTERS.add("rb-nokernel", NoKernel)
    try:
        rc, out, err = cli("run", "--quiet", "--set", "model.adapter=rb-nokernel",
                           "--set", "train.max_steps=5", "--out", "r.json")
    finally:
        ADAPTERS.remove("rb-nokernel")
    assert rc == 2 and not (tmp_path / "r.json").exists()
    assert err.strip().splitlines() == [
        "recallbench: error: adapter rb-nokernel cannot run on cpu: "
        "no kernel for this device; fix: another device"]


# -- the fallbacks, run off the CPU (meta tensors stand for CUDA ones) ----------------------
def test_mamba_without_its_compiled_scan_runs_the_reference_off_the_cpu(monkeypatch):
    monkeypatch.setattr(kernels, "importable", lambda name: False)
    adapter = ADAPTERS.get("mamba")(resolve({"model": {"adapter": "mamba", "d_model": 8,
                                                       "d_state": 4}}).model)
    blocks = adapter.build_blocks(META)
    assert all(block.reference for block in blocks)
    x = torch.randn(2, 12, 8, device=META, requires_grad=True)
    blocks[0](x).sum().backward()  # forward and backward through selective_scan_ref
    assert x.grad.shape == x.shape
    blocks[0].reference = False  # the kernel path: mamba-ssm's missing extension raises
    with pytest.raises(RuntimeError, match="selective_scan_cuda"):
        blocks[0](x)


def test_fla_routes_only_the_refused_kernel_to_its_reference_off_the_cpu(hopper, fla_routes):
    import fla.layers.simple_gla as layer_module

    target = "fla.layers.simple_gla:chunk_simple_gla"
    before = set(fla_routes.everywhere)
    ADAPTERS.get("gla")(resolve({"model": {"adapter": "gla", "d_model": 8, "d_state": 4}}).model
                        ).build_blocks(META)
    assert fla_routes.everywhere == before  # gla's kernels run on Hopper
    ADAPTERS.get("simple-gla")(resolve({"model": {"adapter": "simple-gla", "d_model": 8,
                                                  "d_state": 4}}).model).build_blocks(META)
    assert fla_routes.everywhere - before == {target} - before
    assert target in fla_routes.everywhere
    q = torch.randn(2, 16, 2, 4, device=META, requires_grad=True)
    v, g = torch.randn(2, 16, 2, 8, device=META), torch.randn(2, 16, 2, device=META)
    o, _ = layer_module.chunk_simple_gla(q, q, v, g)  # the reference: Triton would fail on meta
    o.sum().backward()
    assert o.shape == v.shape and q.grad.shape == q.shape


def test_swap_set_routes_chosen_targets_on_every_device(monkeypatch):
    toy = types.ModuleType("rb_toy_kernels")
    toy.kernel = lambda x: "kernel"
    toy.other = lambda x: "kernel"
    monkeypatch.setitem(sys.modules, "rb_toy_kernels", toy)
    swaps = SwapSet("toy", (Swap("rb_toy_kernels:kernel", lambda x: "torch", "ref"),
                            Swap("rb_toy_kernels:other", lambda x: "torch", "ref")), dispatch=True)
    cpu, meta = torch.zeros(1), torch.zeros(1, device=META)
    with swaps.applied():
        assert (toy.kernel(cpu), toy.kernel(meta)) == ("torch", "kernel")
    with pytest.raises(KeyError, match="rb_toy_kernels:nothing"):
        swaps.route_everywhere(["rb_toy_kernels:nothing"])
    swaps.route_everywhere(f"rb_toy_kernels:{k}" for k in ["kernel"])  # any iterable
    assert swaps.installed() and (toy.kernel(meta), toy.other(meta)) == ("torch", "kernel")
    with pytest.raises(RuntimeError, match="only dispatching"):
        SwapSet("plain", swaps.swaps, dispatch=False).route_everywhere(["rb_toy_kernels:kernel"])


# -- recallbench doctor ---------------------------------------------------------------------
def test_doctor_lists_every_adapter_with_its_path_on_the_cpu(cli):
    rc, out, err = cli("doctor")
    assert rc == 0, err
    assert f"torch {torch.__version__}" in out and "triton" in out
    found = paths_of(out)
    assert set(found) == set(ADAPTERS.names())
    for name, rows in found.items():
        assert rows and all(path in PATHS for path, _ in rows.values()), (name, rows)
        if "" not in rows:
            assert rows["cpu"][1], f"{name}: no reason"
    assert found["linear-mamba"]["cpu"][0] == OWN
    assert found["mamba"]["cpu"][0] == REFERENCE and found["gla"]["cpu"][0] == REFERENCE


def test_doctor_on_a_fake_hopper_shows_the_fallbacks_and_why(cli, hopper):
    rc, out, err = cli("doctor")
    assert rc == 0, err
    assert "cuda:0 fake H200, compute capability 9.0" in out
    found = paths_of(out)
    path, reason = found["mamba"]["cuda:0"]
    assert path == REFERENCE and "selective_scan_cuda does not import" in reason
    for name in ("gated-deltanet", "simple-gla"):
        path, reason = found[name]["cuda:0"]
        assert path == REFERENCE and "Triton 3.6.0 < 3.7.1" in reason, name
    for name in ("gla", "deltanet", "retnet", "mamba2"):
        assert found[name]["cuda:0"][0] == FUSED, name
    assert found["linear-mamba"]["cuda:0"][0] == OWN
    assert all(rows["cpu"][0] in (REFERENCE, OWN) for rows in found.values() if "" not in rows)


def test_doctor_reports_a_plugin_whose_kernel_path_raises(cli):
    class Broken(ADAPTERS.get("linear-mamba")):
        @classmethod
        def kernel_path(cls, device):
            raise ValueError("a bug\nwith a second line")

    ADAPTERS.add("rb-broken", Broken)
    try:
        rc, out, _ = cli("doctor")
    finally:
        ADAPTERS.remove("rb-broken")
    assert rc == 0 and paths_of(out)["rb-broken"]["cpu"] == ("error", "ValueError: a bug")


# -- the record --------------------------------------------------------------------------------
def test_the_record_of_a_cpu_run_names_its_kernels_and_versions(cli, tmp_path):
    rc, _, err = cli("run", "--quiet", "--set", "task.vocab_size=32 task.seq_len=16 task.num_facts=4",
                     "--set", "model.d_model=8 model.d_state=4",
                     "--set", "train.max_steps=2 train.val_every=2 train.val_size=16 train.test_size=16",
                     "--out", "r.json")
    assert rc == 0, err
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["kernels"] == {"path": OWN, "reason": ADAPTERS.get("linear-mamba").kernel_path(
        torch.device("cpu"))[1], "cuda": torch.version.cuda}
    assert rec["versions"]["triton"] == metadata.version("triton")
    assert rec["versions"]["torch"] == metadata.version("torch")


def test_a_library_adapter_records_its_reference_path_on_the_cpu():
    from recallbench.api.record import kernels_used
    adapter = ADAPTERS.get("mamba")(resolve({"model": {"adapter": "mamba"}}).model)
    used = kernels_used(adapter, torch.device("cpu"))
    assert used["path"] == REFERENCE and "selective_scan_ref" in used["reason"]
    assert set(used) == {"path", "reason", "cuda"}


# -- install.sh --cuda -----------------------------------------------------------------------
def _install(tmp_path, *args, nvcc_release=None):
    cuda_home = tmp_path / "cuda"
    if nvcc_release:
        (cuda_home / "bin").mkdir(parents=True)
        nvcc = cuda_home / "bin" / "nvcc"
        nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {nvcc_release}, V{nvcc_release}.1'\n")
        nvcc.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(cuda_home), "VENV": str(tmp_path / "venv")}
    return subprocess.run(["bash", str(ROOT / "install.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.mark.slow
def test_install_sh_parses_and_its_cuda_dry_run_prints_the_gpu_install(tmp_path):
    assert subprocess.run(["bash", "-n", str(ROOT / "install.sh")]).returncode == 0
    p = _install(tmp_path, "--cuda", "--dry-run", nvcc_release="13.0")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    torch_line = next(line for line in lines if "torch==" in line)
    assert f"torch=={TORCH_PIN}+cu130" in torch_line
    assert "--index-url https://download.pytorch.org/whl/cu130" in torch_line
    assert all("-c constraints.txt" in line for line in lines if " pip install " in line)
    assert any("triton\\>=3.7.1" in line for line in lines)
    assert any("CAUSAL_CONV1D_FORCE_BUILD=TRUE" in line and "causal-conv1d==" in line for line in lines)
    mamba = next(line for line in lines if "mamba-ssm==" in line)
    assert "MAMBA_FORCE_BUILD=TRUE" in mamba and "SKIP_CUDA_BUILD" not in mamba
    assert "doctor" in lines[-2] and lines[-1] == "(dry run: nothing was run)"
    assert not (tmp_path / "venv").exists()  # a dry run creates nothing


@pytest.mark.slow
def test_install_sh_refuses_in_one_line_without_a_matching_nvcc(tmp_path):
    p = _install(tmp_path, "--cuda", "--dry-run")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "nvcc not found" in p.stderr
    p = _install(tmp_path, "--cuda", "--dry-run", nvcc_release="12.8")
    assert p.returncode == 1 and "needs CUDA 13" in p.stderr and "TORCH_CUDA" in p.stderr
    p = _install(tmp_path, "--gpu")
    assert p.returncode == 2 and "unknown argument '--gpu'" in p.stderr


@pytest.mark.slow
def test_install_sh_cpu_dry_run_keeps_the_cpu_install(tmp_path):
    p = _install(tmp_path, "--dry-run")
    assert p.returncode == 0, p.stderr
    assert f"torch=={TORCH_PIN} " in p.stdout and "download.pytorch.org" not in p.stdout
    assert "MAMBA_SKIP_CUDA_BUILD=TRUE" in p.stdout and "causal-conv1d" not in p.stdout
