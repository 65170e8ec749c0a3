"""Every record says where its adapter's code came from, and a sweep tells results made by
other adapter source apart (warns, or refuses with --refuse-stale; they are not rerun)."""
from __future__ import annotations

import json

import yaml

from recallbench import resolve, run

SWEEP = {"base": {"task": {"name": "mqar", "vocab_size": 16, "seq_len": 16, "num_facts": 4},
                  "model": {"adapter": "designed", "d_model": 16},
                  "train": {"val_size": 16, "test_size": 16}},
         "axes": {"model.d_state": [2, 4, 8, 16], "model.options.embedding": ["gaussian"]}}


def test_a_built_in_record_names_recallbench_and_its_source():
    record = run(resolve(SWEEP["base"] | {"model": {"adapter": "designed", "d_model": 16,
                                                     "d_state": 4}}), progress=False)
    prov = record["provenance"]
    assert prov["distribution"] == "recallbench" and prov["version"] == record["versions"]["recallbench"]
    assert prov["library"] is None and len(prov["source_sha256"]) == 64


def _stale_store(cli, tmp_path, n_stale: int):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SWEEP))
    rc, out, err = cli("sweep", "s.yaml", "--store", "st")
    assert rc == 0, err
    path = tmp_path / "st" / "results.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in lines[:n_stale]:
        rec["provenance"]["source_sha256"] = "0" * 64  # made by an older designed.py
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_a_sweep_warns_once_per_stale_config_and_keeps_them(cli, tmp_path):
    _stale_store(cli, tmp_path, 3)
    rc, out, err = cli("sweep", "s.yaml", "--store", "st")
    assert rc == 0 and "4 done; 0 to run" in out
    warnings = [line for line in err.splitlines() if "stored result made by other designed source" in line]
    assert len(warnings) == 3 and all(line.startswith("recallbench: warning: ") for line in warnings)
    assert "source 000000000000" in warnings[0]
    assert "3 stored results made by other adapter source are kept, not rerun" in err


def test_refuse_stale_stops_before_running(cli, tmp_path, monkeypatch):
    import recallbench.cli.sweep as sweep_cli

    monkeypatch.setattr(sweep_cli, "MAX_STALE_LINES", 2)
    _stale_store(cli, tmp_path, 4)
    (tmp_path / "st" / "results.jsonl").write_text(
        "\n".join((tmp_path / "st" / "results.jsonl").read_text().splitlines()[:3]) + "\n")
    rc, out, err = cli("sweep", "s.yaml", "--store", "st", "--refuse-stale")
    assert rc == 2
    assert err.count("refusing: ") == 3 and "... and 1 more configs" in err  # bounded
    assert "--refuse-stale: 3 stored results of this sweep were made by other adapter source" in err
    assert len((tmp_path / "st" / "results.jsonl").read_text().splitlines()) == 3  # nothing ran
