"""benchmarks/bench_rwkv6.py: its rows and ratio check end to end (slow), and its bad flags in
one line each."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fla")

ROOT = Path(__file__).resolve().parents[1]


def _bench(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_rwkv6.py"), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.slow
def test_prints_a_ratio_per_setting_and_checks_table8():
    out = _bench("--steps", "1", "--rounds", "2", "--facts", "9", "--check-ratio", "1e-6")
    assert out.returncode == 1, out.stderr[-2000:]
    rows = [ln for ln in out.stdout.splitlines() if re.search(r" [\d.]+x$", ln)]
    assert [r.split()[0] for r in rows] == ["Table", "card"] and "N_f=9 L=36" in rows[1]
    for row in rows:
        rwkv6, lmamba, ratio = (float(x) for x in row.rstrip("x").split()[-3:])
        assert rwkv6 > 0 and lmamba > 0 and ratio > 0
    assert out.stdout.strip().splitlines()[-1].startswith("rwkv6 at Table 8: ")
    ok = _bench("--steps", "1", "--rounds", "1", "--facts", "--check-ratio", "1e6")
    assert ok.returncode == 0 and ok.stdout.strip().endswith("within 1e+06x linear-mamba")


@pytest.mark.parametrize("flag, value, allowed", [("--check-ratio", "0", "must be > 0"),
                                                   ("--rounds", "0", "must be >= 1"),
                                                   ("--facts", "300", "must be in [1, 255]")])
def test_refuses_bad_flags_in_one_line(flag, value, allowed, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_rwkv6

    with pytest.raises(SystemExit) as exc:
        bench_rwkv6.parse([flag, value])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "\n" not in err
    assert err.startswith(f"bench_rwkv6.py: {flag} = ") and allowed in err, err
