"""benchmarks/gpu_throughput.py: its dry run on a CPU measures every mode and writes a row
per mode as it goes."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_dry_run_writes_a_row_per_mode(repo_root, tmp_path):
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, str(repo_root / "benchmarks" / "gpu_throughput.py"),
                           "--device", "cpu", "--quick", "--workers", "1", "--ensembles", "2",
                           "64", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["mode"], r["n"], r["runs"]) for r in rows] == [
        ("sequential", 1, 2), ("workers", 1, 2), ("ensemble", 2, 2), ("ensemble", 64, 64)]
    assert all(r["failed"] == 0 and r["cell"] == "4x2" and r["device"] == "cpu" for r in rows)
    assert rows[0]["ratio"] == 1.0
    for r in rows[1:]:  # each ratio is the row's runs per hour over the sequential's
        assert r["ratio"] == pytest.approx(r["runs_per_hour"] / rows[0]["runs_per_hour"],
                                           rel=0.02)
    assert proc.stdout.count("x sequential") == 4


def test_without_cuda_it_says_so(repo_root, monkeypatch, capsys):
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(
        "gpu_throughput", repo_root / "benchmarks" / "gpu_throughput.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert script.main([]) == 2
    assert capsys.readouterr().out == ("no CUDA device here: run with --device cpu --quick "
                                       "for a dry run\n")
