"""benchmarks/gpu_report.py: the tables in docs/results/gpu/README.md are what it prints from
the JSON there; a later folder fills in only what earlier ones did not measure; what no
folder measured says "not measured" with the first reason; bad input is one line, exit 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = str(ROOT / "benchmarks" / "gpu_report.py")
RESULTS = ROOT / "docs" / "results" / "gpu"


def report(*folders) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *map(str, folders)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


def test_the_readme_holds_the_tables_of_its_json():
    proc = report(RESULTS / "first", RESULTS / "rerun")
    assert proc.returncode == 0, proc.stderr
    readme = (RESULTS / "README.md").read_text()
    inside = readme.split("<!-- gpu_report: begin -->\n")[1].split("<!-- gpu_report: end -->")[0]
    assert inside == proc.stdout


def parity_row(name, **gaps):
    return {"adapter": name, "logits_rel_diff": gaps.get("logits", 1e-7),
            "grad_rel_diff": 2e-7, "worst_param_own": "w", "grad_rel_diff_overall": 1e-7,
            "cpu_ms": 1.0, "other_ms": 0.5}


def folder(path: Path, parity: list[dict], table8: list[dict]) -> Path:
    path.mkdir()
    (path / "summary.json").write_text(json.dumps({
        "device": "GPU X", "python": "3.12", "torch": "2", "torch_cuda": "13", "triton": "3",
        "adapters": ["a", "b", "c"]}))
    steps = [{"step": f"parity-{d}", "limit_s": 50.0} for d in ("ieee", "default")]
    (path / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    for dot in ("ieee", "default"):
        (path / f"parity-{dot}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in parity))
    (path / "table8.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table8))
    return path


def t8(name, status="ok", steps=10, to99=None):
    return {"adapter": name, "status": status, "why": None if status == "ok" else "ran past 9 s",
            "steps": steps, "train_s": 1.0, "accuracy": 0.5, "process_s": 3.0, "concurrent": 1,
            "steps_to_0.99": to99, "kernels": {"path": "own"}}


def test_a_later_folder_fills_in_only_what_was_not_measured(tmp_path):
    one = folder(tmp_path / "one", [parity_row("a", logits=1e-3), {"adapter": "b", "error": "timed out after 9 s"}],
                 [t8("a", steps=0), t8("b", status="timeout")])
    two = folder(tmp_path / "two", [parity_row("a", logits=5e-5), parity_row("b", logits=2e-6)],
                 [t8("a", to99=7), t8("b", to99=8)])
    out = report(one, two).stdout
    lines = out.splitlines()
    # a: measured by the first folder, which is kept; b: by the second only
    assert "| a | ieee | 1.0e-03 |" in out and "5.0e-05" not in out
    assert [ln for ln in lines if ln.startswith("| b | ieee")] == [
        "| b | ieee | 2.0e-06 | 1.0e-07 | 2.0e-07 (w) | 1.0 | 0.50 | 2 |"]
    # c: in no folder's rows, the step having ended first
    assert "| c | ieee | not measured: not reached: the step ran past its 50 s |" in out
    # Table 8: a was not trained in the first folder (0 steps): that is what it shows
    assert any(ln.startswith("| a | own | not trained |") for ln in lines)
    assert any(ln.startswith("| b | own | 8 |") and ln.endswith("| 2 |") for ln in lines)
    assert "| c | | not measured: not run |" in out


def test_a_cell_no_folder_measured_gives_the_first_reason(tmp_path):
    one = folder(tmp_path / "one", [{"adapter": "b", "error": "timed out after 9 s"}], [])
    two = folder(tmp_path / "two", [{"adapter": "b", "error": "exit 1: boom"}], [])
    assert "| b | default | not measured: timed out after 9 s |" in report(one, two).stdout


def test_bad_input_is_one_line(tmp_path):
    for args, word in (((), "give one or more"), ((tmp_path,), "no summary.json")):
        proc = report(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert word in proc.stderr and "Traceback" not in proc.stderr
