"""Worker processes sharing one GPU, tested on a CPU by replacing the device facts
(torch.cuda.is_available, torch.cuda.mem_get_info): the bound on --workers, the memory
check, and one-line refusals."""
from __future__ import annotations

import pytest
import torch

from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.runs import executors, gpu_share
from recallbench.runs.executors import Processes, make_executor
from recallbench.runs.gpu_share import CONTEXT_BYTES, GpuRuns, free_here, uses_gpu

GiB = 1 << 30
SWEEP = """
base:
  task: {name: mqar, vocab_size: 32, seq_len: 16, num_facts: 4}
  model: {adapter: linear-mamba, d_state: 2}
  train: {max_steps: 2, batch_size: 4, val_size: 8, test_size: 8, device: DEVICE}
axes:
  model.d_model: [4, 8]
  train.seed: [0, 1, 2]
"""


@pytest.fixture
def gpu(monkeypatch):
    """A machine with one CUDA device of ``free`` bytes free and 2 CPUs."""
    facts = {"free": 80 * GiB, "asked": []}

    def mem_get_info(device=None):
        facts["asked"].append(str(device))
        return facts["free"], 141 * GiB

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(executors.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(gpu_share, "probe_free", free_here)  # in this process: no spawn
    return facts


def one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 300
    return text


def test_which_device_the_runs_use(monkeypatch):
    assert uses_gpu(["cpu"]) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert uses_gpu(["auto", "cpu"]) is None
    with pytest.raises(UnavailableError) as exc:
        uses_gpu(["cuda:1"])
    assert one_line(exc) == "train.device = cuda:1, but no CUDA device is available here"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert uses_gpu(["auto"]) == "cuda" and uses_gpu(["cuda:1", "cpu"]) == "cuda:1"
    with pytest.raises(ConfigError) as exc:
        uses_gpu(["cuda:0", "cuda:1"])
    assert "--executor processes shares one: run one sweep per GPU" in one_line(exc)


def test_gpu_bound_replaces_the_cpu_bound(gpu):
    runs = GpuRuns("cuda", item_bytes=GiB // 4)
    ex = make_executor("processes", gpu=runs)  # default: min(16, CPUs, what fits)
    assert isinstance(ex, Processes) and ex.workers == 2 and ex.threads == 1
    assert ex._context.get_start_method() == "spawn"  # CUDA only inside the workers
    assert make_executor("processes", workers=16, gpu=runs).workers == 16  # 8x the CPUs
    with pytest.raises(ConfigError) as exc:
        make_executor("processes", workers=17, gpu=runs)
    assert one_line(exc) == ("--workers 17 is not allowed: must be in [1, 16] on cuda "
                             "(--workers-per-gpu, at most 64)")
    assert make_executor("processes", workers=40, gpu=GpuRuns("cuda", 0, 48)).workers == 40
    with pytest.raises(ConfigError) as exc:  # without a GPU the CPUs still bound it
        make_executor("processes", workers=3)
    assert "must be in [1, 2] (the CPUs of this machine" in one_line(exc)
    assert gpu["asked"] == ["cuda"] * 3  # the bound is checked before the memory is read


def test_workers_must_fit_in_the_gpu_memory(gpu):
    each = CONTEXT_BYTES + GiB
    gpu["free"] = 5 * each + each // 2
    runs = GpuRuns("cuda:0", item_bytes=GiB)
    assert make_executor("processes", workers=5, gpu=runs).workers == 5
    with pytest.raises(ConfigError) as exc:
        make_executor("processes", workers=6, gpu=runs)
    text = one_line(exc)
    assert text.startswith("--workers 6 is not allowed on cuda:0: 6 workers need ~10.5 GiB")
    assert text.endswith("9.62 GiB is free; use --workers 5 or fewer")
    gpu["free"] = each - 1
    with pytest.raises(ConfigError) as exc:
        make_executor("processes", gpu=runs)
    assert one_line(exc) == ("cuda:0 has 1.75 GiB free: one worker needs ~1.75 GiB (a CUDA "
                             "context ~768 MiB and its largest run ~1 GiB)")


def test_workers_per_gpu_is_checked(gpu):
    for bad in (0, 65):
        with pytest.raises(ConfigError) as exc:
            make_executor("processes", gpu=GpuRuns("cuda", 0, bad))
        assert one_line(exc) == f"--workers-per-gpu {bad} is not allowed: must be in [1, 64]"


def test_unreadable_gpu_memory_is_one_line(gpu, monkeypatch):
    def broken(device=None):
        raise RuntimeError("CUDA driver version is insufficient\nfor CUDA runtime version")

    monkeypatch.setattr(torch.cuda, "mem_get_info", broken)
    with pytest.raises(UnavailableError) as exc:
        make_executor("processes", gpu=GpuRuns("cuda", 0))
    assert one_line(exc) == ("cuda: cannot read its free memory (RuntimeError: CUDA driver "
                             "version is insufficient)")


def test_sweep_estimates_its_largest_item(gpu, tmp_path):
    from recallbench.harness.ensemble.memory import ensemble_bytes
    from recallbench.runs.gpu_share import sweep_gpu
    from recallbench.runs.sweep import load_sweep

    path = tmp_path / "sw.yaml"
    path.write_text(SWEEP.replace("DEVICE", "auto"))
    points = load_sweep(path).expand().points
    big = points[-1].cfg  # d_model 8
    runs = sweep_gpu(points, None)
    assert runs.device == "cuda" and runs.per_gpu == 16
    assert runs.item_bytes == ensemble_bytes(big, 1, on_device=True)
    assert sweep_gpu(points, 8, 4).item_bytes == ensemble_bytes(big, 3, on_device=True)
    path.write_text(SWEEP.replace("DEVICE", "cpu"))
    assert sweep_gpu(load_sweep(path).expand().points, None) is None


def test_cli_refuses_too_many_gpu_workers_before_the_store(gpu, cli, tmp_path):
    (tmp_path / "sw.yaml").write_text(SWEEP.replace("DEVICE", "cuda"))
    gpu["free"] = 3 * GiB
    rc, out, err = cli("sweep", "sw.yaml", "--store", "st", "--executor", "processes",
                       "--workers", "8")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("recallbench: error: --workers 8 is not allowed on cuda: 8 workers need")
    assert not (tmp_path / "st").exists()
    rc, out, err = cli("sweep", "sw.yaml", "--store", "st", "--workers-per-gpu", "4")
    assert (rc, err) == (2, "recallbench: error: --workers-per-gpu is for --executor processes\n")
    rc, out, err = cli("sweep", "sw.yaml", "--store", "st", "--executor", "processes",
                       "--workers-per-gpu", "99")
    assert err == ("recallbench: error: --workers-per-gpu 99 is not allowed: must be in "
                   "[1, 64]\n") and rc == 2


def test_cli_compile_needs_an_ensemble(cli, tmp_path):
    (tmp_path / "sw.yaml").write_text(SWEEP.replace("DEVICE", "cpu"))
    rc, out, err = cli("sweep", "sw.yaml", "--store", "st", "--compile")
    assert (rc, err) == (2, "recallbench: error: --compile is for --ensemble K with --executor "
                            "inprocess or processes\n")
    rc, out, err = cli("sweep", "sw.yaml", "--store", "st", "--ensemble", "3", "--compile", "x")
    assert rc == 2 and err.startswith("recallbench: error: --compile 'x' is not allowed: one of")


@pytest.mark.slow
def test_free_memory_is_read_in_a_spawned_process():
    # this CPU-only machine has no CUDA: the child's failure comes back as one line, and
    # the driver never touched CUDA
    with pytest.raises(UnavailableError) as exc:
        make_executor("processes", gpu=GpuRuns("cuda", 0))
    assert one_line(exc).startswith("cuda: cannot read its free memory (")
    assert not torch.cuda.is_initialized()
