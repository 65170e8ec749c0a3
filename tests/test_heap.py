"""recallbench.harness.heap: freed buffers stay in the heap, so a step's pages are not
faulted in again at every step; opt-out, and where it applies."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from recallbench.harness import heap

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="the settings are glibc's")

ROOT = Path(__file__).resolve().parents[1]

# The read-out of a training step at N_f = 38 (B·N_f = 1,216 asked positions, D = 32,
# V = 512): its logits and their gradients, 2.4 MiB each, allocated and freed every step.
READOUT = """
import json, resource
import torch
from recallbench.harness.heap import keep_freed_memory
applied = keep_freed_memory()
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
E = torch.randn(512, 32, generator=g, requires_grad=True)
x, y = torch.randn(1216, 32, generator=g), torch.randint(0, 512, (1216,), generator=g)
def step():
    loss = torch.nn.functional.cross_entropy(x @ E.t(), y, label_smoothing=0.1)
    loss.backward()
    return loss.item()
for _ in range(5):
    step()
per_step = []  # a one-off burst (a lazy initialisation) lands in one step: the median skips it
for _ in range(21):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    loss = step()
    per_step.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
faults = sorted(per_step)[10]
print(json.dumps({"applied": applied, "faults": faults, "loss": loss}))
"""


# Both processes start from glibc's documented default mmap threshold (128 KiB) with its
# dynamic raise switched off. Left dynamic, the threshold a process reaches depends on the
# order of its earlier allocations (one machine faulted 1,216 pages a step by default,
# another none), and the comparison would test the machine rather than the setting.
TUNABLES = "glibc.malloc.mmap_threshold=131072"


def _side_by_side(cmd: list[str], *keep: str) -> list[dict]:
    """``cmd`` in a fresh process per value of ``keep`` (the environment variable), run side
    by side; the JSON each prints last."""
    env = {**os.environ, "GLIBC_TUNABLES": TUNABLES}
    procs = [subprocess.Popen(cmd, env={**env, heap.ENV: k}, cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in keep]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


@glibc
def test_the_read_out_reuses_its_buffers_without_page_faults():
    default, kept = _side_by_side([sys.executable, "-c", READOUT], "0", "1")
    assert not default["applied"] and kept["applied"]
    # at the default threshold the logits' pages are mapped afresh every step (about 600 a buffer)
    assert default["faults"] > 300, default
    assert kept["faults"] < 0.1 * default["faults"], (default, kept)
    assert kept["loss"] == default["loss"]


@pytest.mark.slow
@glibc
def test_a_training_step_reuses_its_buffers_and_computes_the_same():
    """Ten steps of linear-mamba at D32-N8, N_f = 38, a capacity card's largest cell
    (benchmarks/bench_heap.py's worker, which imports the harness: seconds)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_heap.py"), "--worker", "38",
           "--steps", "10"]
    default, kept = _side_by_side(cmd, "0", "1")
    assert not default["applied"] and kept["applied"]
    assert default["faults"] > 300, default
    assert kept["faults"] < 0.1 * default["faults"], (default, kept)
    assert kept["loss"] == default["loss"]  # the same floats, bit for bit


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_the_environment_variable_turns_it_off(monkeypatch, value):
    monkeypatch.setattr(heap, "_state", None)
    monkeypatch.setenv(heap.ENV, value)
    assert heap.keep_freed_memory() is False
    assert heap._state is False  # once per process: not tried again


def test_off_glibc_it_does_nothing(monkeypatch):
    monkeypatch.setattr(heap, "_state", None)
    monkeypatch.delenv(heap.ENV, raising=False)
    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("", ""))
    assert heap.keep_freed_memory() is False


@glibc
def test_a_cpu_run_applies_it(monkeypatch):
    from recallbench.harness.train import run

    monkeypatch.setattr(heap, "_state", None)
    monkeypatch.delenv(heap.ENV, raising=False)
    rec = run({"task": {"name": "mqar", "vocab_size": 32, "num_facts": 2, "seq_len": 8},
               "model": {"adapter": "linear-mamba", "d_model": 8, "d_state": 2},
               "train": {"max_steps": 2, "val_every": 1, "val_size": 8, "test_size": 8,
                         "batch_size": 4, "device": "cpu"}}, progress=False)
    assert rec["status"] == "ok"
    assert heap._state is True
