"""benchmarks/gpu_run.py: its dry run on a CPU runs every step and writes what each measured;
bad input and a machine without CUDA are refused in one line with exit status 2; a step past
its limit is killed with its children."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = str(ROOT / "benchmarks" / "gpu_run.py")
STEPS = ["doctor", "parity-ieee", "parity-default", "table8", "throughput", "leaderboard"]


def gpu_run(*args, timeout=120):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def refused(proc, *words):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("gpu_run.py: "), proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def survivors(tmp_path) -> list[str]:
    """Command lines of processes still running that name ``tmp_path`` (Linux /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(tmp_path) in text:
            found.append(text)
    return found


def test_a_folder_that_is_not_empty_is_refused(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    refused(gpu_run("--device", "cpu", "--out", str(tmp_path)), "--out", "not empty")


def test_an_unknown_step_is_refused(tmp_path):
    refused(gpu_run("--only", "doctor", "bogus", "--out", str(tmp_path / "x")), "--only",
            "bogus")
    assert not (tmp_path / "x").exists()


def test_jobs_out_of_range_is_refused(tmp_path):
    refused(gpu_run("--device", "cpu", "--jobs", "0", "--out", str(tmp_path / "x")), "--jobs 0",
            "1 to 32")
    assert not (tmp_path / "x").exists()


def test_out_is_required():
    refused(gpu_run("--device", "cpu"), "--out")


def test_without_cuda_it_says_so_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = gpu_run("--out", str(tmp_path / "gpu"))
    refused(proc, "CUDA is not available")
    assert not (tmp_path / "gpu").exists()


@pytest.mark.slow
def test_dry_run_runs_every_step(tmp_path):
    out = tmp_path / "gpu"
    proc = gpu_run("--device", "cpu", "--quick", "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not survivors(tmp_path)
    lines = [json.loads(ln) for ln in (out / "steps.jsonl").read_text().splitlines()]
    assert [(r["step"], r["status"]) for r in lines] == [(s, "ok") for s in STEPS]
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["step"], r["status"]) for r in summary["steps"]] == [(s, "ok") for s in STEPS]
    assert summary["budget_s"] == 480 and summary["device"].startswith("cpu")
    assert {"torch", "triton", "torch_cuda", "tf32"} <= set(summary)
    assert "torch.backends.cuda.matmul.allow_tf32" in summary["tf32"]
    assert [ln.split()[:2] for ln in proc.stdout.splitlines()] == [[s, "ok"] for s in STEPS]
    adapters = summary["adapters"]
    assert adapters and set(adapters) <= {"linear-mamba", "mamba2"}

    for dot, setting in (("ieee", "ieee"), ("default", None)):  # a row per adapter each
        rows = [json.loads(ln) for ln in (out / f"parity-{dot}.jsonl").read_text().splitlines()]
        assert sorted(r["adapter"] for r in rows) == sorted(adapters)
        assert all("error" not in r and r["TRITON_F32_DEFAULT"] == setting for r in rows), rows
        assert all(r["jobs"] == 2 for r in rows), rows  # the dry run's default: 2 at once

    rows = [json.loads(ln) for ln in (out / "table8.jsonl").read_text().splitlines()]
    assert sorted(r["adapter"] for r in rows) == sorted(adapters)
    for r in rows:
        assert r["status"] == "ok" and r["steps"] == 2 and 0 <= r["accuracy"] <= 1, r
        assert r["kernels"]["path"] in ("own", "reference") and r["train_s"] >= 0
    # linear-mamba alone first; the dry run sends mamba2 through the pool of the others
    assert {r["adapter"]: r["concurrent"] for r in rows} == {"linear-mamba": 1, "mamba2": 1}
    assert rows[0]["adapter"] == "linear-mamba" and lines[3]["jobs"] == 1

    rows = [json.loads(ln) for ln in (out / "throughput.jsonl").read_text().splitlines()]
    assert [r["mode"] for r in rows] == ["sequential", "workers", "ensemble"]
    assert all(r["ratio"] > 0 and r["failed"] == 0 for r in rows)
    board = lines[-1]
    assert board["points"] == 1 and board["chunk_points"] == 1
    assert board["calls_of_480s"] == {"from_eta": [1, 1], "from_chunk": 1}
    assert lines[4]["not_run"]["mamba2"].startswith("not supported by gpu_throughput.py")


@pytest.mark.slow
def test_a_step_past_its_limit_is_killed_with_its_children(tmp_path):
    """A budget of 6 s leaves the step a few seconds: less than its child needs to import
    torch and the kernel libraries and run two adapters on any machine (16 s idle here), so
    it is killed mid-run, whatever the machine's speed."""
    out = tmp_path / "gpu"
    proc = gpu_run("--device", "cpu", "--quick", "--only", "parity-ieee", "--budget-s", "6",
                   "--out", str(out), timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert not survivors(tmp_path)
    (line,) = [json.loads(ln) for ln in (out / "steps.jsonl").read_text().splitlines()]
    assert line["status"] == "timeout", line
    assert line["why"].startswith("parity-ieee: "), line
    assert proc.stdout.split()[:2] == ["parity-ieee", "timeout"]
