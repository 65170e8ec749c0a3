"""The benchmark scripts run end to end at a tiny size and print what their docs promise
(the scripts themselves are the measurements; these tests keep them from rotting)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def bench(name, *args, timeout=300):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
def test_bench_ensemble_prints_a_ratio_per_shape_and_thread_count():
    out = bench("bench_ensemble.py", "--members", "2", "--steps", "3", "--shapes", "4x2", "8x2",
                "--threads", "1")
    rows = [ln for ln in out.splitlines() if ln.startswith("V=512 D=")]
    assert len(rows) == 2
    for row in rows:
        times = [float(t) for t in re.findall(r"([\d.]+)s\b", row)]
        ratios = [float(r) for r in re.findall(r"([\d.]+)x\b", row)]
        # sequential, 1 member x K, batched 1 thread (and processes on a multi-core machine);
        # ratios: sequential/batched, (processes/batched), batching alone
        assert len(times) == len(ratios) + 1 and len(times) in (3, 4)
        assert all(t > 0 for t in times) and all(r > 0 for r in ratios)
        assert float(row.split()[-1]) < 0.02  # members reproduce the single runs


@pytest.mark.slow
def test_bench_adaptive_on_the_designed_model(tmp_path):
    grid = tmp_path / "grid.jsonl"
    out = bench("bench_adaptive.py", "--adapter", "designed", "--grid", "coarse",
                "--max-runs", "12", "--p-range", "0.2", "0.8", "--stop", "either",
                "--random-draws", "4", "--needed-budget", "16", "--full-grid", str(grid))
    assert re.search(r"seed 0 +\d+ runs, .* a = [\d.]+ \[", out)
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if "p in [0.2, 0.8], stop either" in ln)
    runs = int(re.search(r"either\s+(\d+) runs", lines[at]).group(1))
    assert 4 <= runs <= 12
    # the no-theory baseline: as many random cells as the search ran
    assert re.search(rf"random {runs} cells: \d+% of 4 within tol, median [\d.]+%", lines[at + 1])
    needed = lines[lines.index(next(ln for ln in lines if ln.startswith("runs needed"))) + 1]
    assert re.match(r"\s+seed 0 +p in \[0.2, 0.8\]: (\s*\d+ runs \(\d+% of the grid's\)"
                    r"|not within 16 runs)", needed), needed
    cells = int(re.search(r"coarse grid of (\d+) cells", out).group(1))
    assert len(grid.read_text().splitlines()) == cells  # appended as it ran
    again = bench("bench_adaptive.py", "--adapter", "designed", "--grid", "coarse",
                  "--max-runs", "12", "--p-range", "0.2", "0.8", "--stop", "either",
                  "--random-draws", "4", "--needed-budget", "16", "--full-grid", str(grid))
    assert f"{cells} runs read" in again


def cuda_vs_cpu():
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    import cuda_vs_cpu as script
    return script


def test_cuda_vs_cpu_without_cuda_says_so(monkeypatch, capsys):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda_vs_cpu().main(["--device", "cuda"]) == 0
    assert capsys.readouterr().out.startswith("no CUDA device here")


def test_cuda_vs_cpu_refuses_an_out_it_cannot_write(tmp_path, capsys):
    assert cuda_vs_cpu().main(["--device", "cpu", "--only", "designed", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"--out {tmp_path}: cannot write") and "\n" not in err


@pytest.mark.parametrize("flag", ["--batch", "--time-limit", "--seq-len"])
def test_cuda_vs_cpu_refuses_a_size_below_one_in_one_line(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        cuda_vs_cpu().main(["--device", "cpu", flag, "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"cuda_vs_cpu.py: {flag} must be > 0\n"


@pytest.mark.slow
def test_cuda_vs_cpu_dry_run_writes_a_row_per_adapter_as_it_goes(tmp_path):
    import json
    rows = tmp_path / "rows.jsonl"
    out = bench("cuda_vs_cpu.py", "--device", "cpu", "--only", "designed", "linear-attention",
                "--batch", "2", "--d-model", "32", "--d-state", "16", "--seq-len", "32", "--reps", "1",
                "--triton-f32", "ieee", "--out", str(rows))
    designed, linear = (json.loads(ln) for ln in rows.read_text().splitlines())
    assert designed["other_path"] == "same cpu path" and designed["logits_rel_diff"] == 0.0
    # linear-attention's fla kernels run under Triton's interpreter, with IEEE dots
    assert linear["other_path"] == "triton interpreter" and linear["other_ms"] is None
    assert (linear["TRITON_INTERPRET"], linear["TRITON_F32_DEFAULT"], linear["torch_allow_tf32"]) == ("1", "ieee", False)
    assert linear["logits_rel_diff"] < 1e-4 and linear["grad_rel_diff_overall"] < 1e-4
    assert linear["worst_param_overall"] == "embedding.weight" and linear["worst_param_own"].startswith("blocks.0.")
    assert re.search(r"^linear-attention +logits \S+ +grads \S+ \(blocks\.0\.\S+\) +overall \S+ \(embedding.weight\)",
                     out, re.M), out
    # an adapter over its time limit gets a row saying so, after the rows already written
    bench("cuda_vs_cpu.py", "--device", "cpu", "--only", "designed", "--time-limit", "0.01", "--out", str(rows))
    kept = [json.loads(ln) for ln in rows.read_text().splitlines()]
    assert kept[:2] == [designed, linear]
    assert kept[2] == {"adapter": "designed", "error": "timed out after 0.01 s", "jobs": 1}


@pytest.mark.slow
def test_bench_overhead_prints_the_three_ratios_beside_the_times():
    out = bench("bench_overhead.py", "--reps", "1", "--steps", "4", "8",
                "--run-set", "train.max_steps=10", "--run-set", "train.val_every=4",
                "--run-set", "train.val_size=64", "--run-set", "train.test_size=64")
    start = re.search(r"^1\. start-up: 1-step run ([\d.]+) s, import torch ([\d.]+) s, "
                      r"ratio ([\d.]+)x \(import lightning alone ([\d.]+) s", out, re.M)
    assert start, out
    run_s, torch_s, ratio, _ = map(float, start.groups())
    assert run_s > torch_s > 0 and ratio == pytest.approx(run_s / torch_s, abs=0.03)
    floor = re.search(r"import torch, torch._dynamo, torchmetrics ([\d.]+) s, ([\d.]+)x\)", out)
    assert floor, out
    assert float(floor.group(1)) > 0 and float(floor.group(2)) == pytest.approx(
        float(floor.group(1)) / torch_s, abs=0.03)
    around = re.search(r"^2\. around the steps: default run 10 steps, train_s ([\d.]+) s, "
                       r"its steps ([\d.]+) s .* train_s / steps ([\d.]+)x", out, re.M)
    assert around, out
    train_s, steps_s, ratio = map(float, around.groups())
    assert 0 < steps_s <= train_s and ratio >= 1.0  # the steps are part of train_s
    assert re.search(r"^3\. process around train_s: .* ratio ([\d.]+)x$", out, re.M), out


@pytest.mark.slow
def test_bench_capacity_prints_both_protocols_and_their_ratio():
    """The designed model (nothing to train) at a small budget: a row per protocol with its
    CPU minutes and N50, their ratio, and the cells both cards trained."""
    out = bench("bench_capacity.py", "--adapter", "designed", "--d-model", "16",
                "--d-state", "4", "--seeds", "0")
    rows = re.findall(r"^(old|new)\s+([\d.]+)\s+\d+\s+(\d+)\s", out, re.M)
    assert [r[0] for r in rows] == ["old", "new"] and all(int(r[2]) >= 1 for r in rows)
    assert re.search(r"CPU minutes new/old: [\d.]+", out)
    assert re.search(r"cells in both cards: \d+, the same lr chosen in \d+", out)


@pytest.mark.slow
def test_bench_extension_prints_both_ways_and_their_ratio():
    """A search whose chosen lr is extended (40 → 160 steps): continued from its checkpoint
    it trains 40 steps fewer than trained again, and both give the same record."""
    out = bench("bench_extension.py", "--num-facts", "4", "--set",
                "train.max_steps=40 train.max_steps_limit=160 train.val_every=10 "
                "train.val_size=64 train.test_size=64")
    cont = re.search(r"continued: +(\d+) steps trained", out)
    again = re.search(r"again: +(\d+) steps trained", out)
    assert cont and again, out
    assert int(again[1]) - int(cont[1]) == 40, out
    assert re.search(r"again / continued: [\d.]+x the CPU time; the same record: yes$", out,
                     re.M), out


@pytest.mark.slow
def test_bench_recipes_prints_both_recipes_side_by_side():
    out = bench("bench_recipes.py", "--seeds", "0,1", "--level", "0", "--set",
                "task.vocab_size=32 task.seq_len=16 task.num_facts=4 model.d_model=8 "
                "model.d_state=4 train.max_steps=12 train.val_every=5 train.val_size=32 "
                "train.test_size=32 train.batch_size=8")
    assert "default recipe" in out and "paper recipe" in out
    rows = {ln.split("|")[0].strip(): ln.split("|")[1:] for ln in out.splitlines()
            if re.match(r"(\d+|mean)\s+\|", ln)}
    assert list(rows) == ["0", "1", "mean"]
    for default, paper in rows.values():
        d, p = default.split(), paper.split()
        # level 0: reached at the first validation, after step 5 (default) and 6 (the
        # paper's loop validates after the step of index 5); sequences = steps x batch 8
        assert (d[0], d[1], p[0], p[1]) == ("5", "40", "6", "48")
        assert all(0 <= float(x) <= 1 for x in (d[3], p[3]))
    assert "steps trained: default [12, 12], paper [12, 12]" in out
    refused = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_recipes.py"),
                              "--set", "train.recipe=paper"], capture_output=True, text=True,
                             cwd=ROOT, timeout=120)
    assert refused.returncode == 1 and refused.stderr.strip() == (
        "bench_recipes: --set train.recipe is not allowed: the benchmark runs both recipes, "
        "null and paper")


@pytest.mark.slow
def test_bench_heap_prints_both_settings_their_ratio_and_the_same_loss():
    out = bench("bench_heap.py", "--facts", "15", "--reps", "1", "--steps", "5")
    row = re.search(r"^\s+15\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+(\w+)$", out, re.M)
    if row is None:  # off glibc the settings do not exist, and the script says so
        assert "not available here" in out, out
        return
    assert row[6] == "True", out  # the same loss with and without: nothing computed changed
    assert float(row[5]) == pytest.approx(float(row[1]) / float(row[3]), abs=0.01)


@pytest.mark.slow
def test_bench_logging_prints_both_settings_their_ratio_and_the_same_record():
    out = bench("bench_logging.py", "--facts", "9", "--reps", "1", "--steps", "30")
    row = re.search(r"^\s+9\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\w+)$", out, re.M)
    assert row is not None, out
    assert row[4] == "True", out  # the same record either way: nothing computed changed
    assert float(row[3]) == pytest.approx(float(row[1]) / float(row[2]), abs=0.01)


@pytest.mark.slow
def test_bench_chunk_prints_every_form_and_the_ratio_of_the_former_default():
    out = bench("bench_chunk.py", "--facts", "9", "26", "--reps", "1")
    rows = re.findall(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)((?:\s+[\d.]+){6})\s+(\S+)\s+([\d.]+)$",
                      out, re.M)
    assert len(rows) == 8, out  # four states, two N_f
    for n, p, nf, L, times, chunk, ratio in rows:
        ms = [float(t) for t in times.split()]
        assert int(L) == 4 * int(nf) and all(t > 0 for t in ms)
        # short: the parallel form, no chunks; long: chunks of 16 for N·P <= 512, else 32
        assert chunk == ("-" if int(L) <= 64 else str(16 if int(n) * int(p) <= 512 else 32))
        former, auto, r = ms[4], ms[5], float(ratio)  # each printed to 0.01
        assert (former - .005) / (auto + .005) - .005 <= r <= (former + .005) / (auto - .005) + .005
