"""Hostile inputs to `recallbench capacity`, `--factory` layers and capacity suites: stale
results in the store, impossible state sizes, flags that other flags or --set would
silently override, and the messages that must say what to do.

Each check stops at validation, or trains at most one tiny run to have a real record."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from conftest import one_line_error
from recallbench.api.errors import ConfigError
from recallbench.runs import capacity, card_search

ROOT = Path(__file__).resolve().parent.parent
#: a run of a few steps on one learning rate (a real record in about a second)
QUICK = ["--seeds", "0", "--set", "train.lr=0.01 train.max_steps=10 train.max_steps_limit=10 "
         "train.val_every=10 train.val_size=32 train.test_size=32"]


def _args(*argv):
    from recallbench.cli.main import build_parser

    argv = ["capacity", *argv]
    return build_parser(argv).parse_args(argv)


def _layer(folder: Path, module: str, extra: str = "") -> None:
    (folder / f"{module}.py").write_text(
        "from torch import nn\n\n\ndef make_mixer(d_model):\n"
        f"    return nn.Linear(d_model, d_model){extra}\n")


def _store_runs(store: Path, base: dict, cells, edit=None, method2=True) -> list[dict]:
    """Real runs of ``base`` at (N_f, card seed) ``cells`` appended to ``store``'s results
    (``method2``: the first batch's run seed at N_f, s + 100000·N_f)."""
    from recallbench import run

    records = []
    for nf, seed in cells:
        seed = card_search.run_seed(seed, nf, 0) if method2 else seed
        rec = run(capacity.cell_config(base, nf, seed), progress=False)
        if edit is not None:
            edit(rec)
        records.append(rec)
    store.mkdir(parents=True, exist_ok=True)
    with (store / "results.jsonl").open("a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    return records


def _search_stub(monkeypatch):
    """Both methods' searches (capacity.run, card_search.run) replaced: each records its
    call and stops the command (one line)."""
    from recallbench.runs import card_search

    calls = []

    def run(base, **kw):
        calls.append(base)
        raise ConfigError("search started")

    monkeypatch.setattr(capacity, "run", run)
    monkeypatch.setattr(card_search, "run", run)
    return calls


# -- 6: stale results --------------------------------------------------------------------------
def test_a_factory_record_carries_its_source_and_an_edited_factory_is_stale(
        cli, tmp_path, monkeypatch):
    module = "stale_layer_a"
    _layer(tmp_path, module)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["--factory", f"{module}:make_mixer", "--d-model", "8", *QUICK,
            "--out", str(tmp_path / "card")]
    from recallbench.cli.capacity import base_config

    base = base_config(_args(*argv))
    (rec,) = _store_runs(tmp_path / "card" / "store", base, [(2, 0)])
    assert rec["config"]["model"]["options"]["name"] == "make_mixer"
    made_by = rec["provenance"]["source_sha256"]
    assert made_by and rec["config"]["model"]["adapter"] == "pytest-factory"
    calls = _search_stub(monkeypatch)

    rc, out, err = cli("capacity", *argv)  # the same source: no word about it
    assert rc == 2 and "warning" not in err and len(calls) == 1

    _layer(tmp_path, module, extra="  # edited")  # the layer's code changed
    rc, out, err = cli("capacity", *argv, "--refuse-stale")
    assert rc == 2 and len(calls) == 1, err  # stopped before the search
    lines = err.strip().splitlines()
    assert lines[0].startswith("recallbench: refusing: ") and "N_f=2 seed=200000" in lines[0]
    assert "made by other pytest-factory source" in lines[0] and made_by[:12] in lines[0]
    assert lines[-1] == ("recallbench: error: --refuse-stale: 1 stored results of this card "
                         "were made by other adapter source; use a new --store to rerun them")

    rc, out, err = cli("capacity", *argv)  # without: warned, kept, and the search goes on
    assert len(calls) == 2 and "recallbench: warning: " in err and "N_f=2 seed=200000" in err
    assert "1 stored results made by other adapter source are kept" in err


def test_an_adapter_s_stale_runs_are_refused_before_the_search(cli, tmp_path, monkeypatch):
    from recallbench.cli.capacity import base_config

    argv = ["--adapter", "designed", "--d-model", "16", "--d-state", "4", *QUICK,
            "--out", str(tmp_path / "card")]

    def older(rec):
        rec["provenance"]["source_sha256"] = "0" * 64  # made by another designed.py

    _store_runs(tmp_path / "card" / "store", base_config(_args(*argv)), [(2, 0), (3, 0)], older)
    # a run of another card in the same store is not this card's: not judged
    _store_runs(tmp_path / "card" / "store", base_config(_args(*argv[:-2], "--d-state", "2",
                                                               "--out", "x")), [(2, 0)], older)
    calls = _search_stub(monkeypatch)
    rc, out, err = cli("capacity", *argv, "--refuse-stale")
    assert rc == 2 and not calls
    assert err.count("recallbench: refusing: ") == 2 and "source 000000000000" in err
    assert "--refuse-stale: 2 stored results of this card" in err


def _small_v3(tmp_path):
    """cpu-v3's suite with its D32-N8 budget alone and small test sets: (folder, Suite)."""
    from recallbench import leaderboard as lb

    d = tmp_path / "cpu-v3"
    d.mkdir()
    data = yaml.safe_load((ROOT / "leaderboards" / "cpu-v3" / "suite.yaml").read_text())
    data.pop("retired", None)  # an open suite with cpu-v3's recipe
    data["budgets"] = [b for b in data["budgets"] if b["name"] == "D32-N8"]
    data["train"].update(test_size=32, val_size=32)
    (d / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    return d, lb.load_suite(d)


def test_a_capacity_suite_warns_or_refuses_stale_runs_before_any_search(tmp_path, monkeypatch):
    from recallbench.leaderboard.capacity.suite import budget_base, run_capacity_suite

    d, suite = _small_v3(tmp_path)
    base = budget_base(suite, "designed", suite.budgets[0])

    def older(rec):
        rec["provenance"]["source_sha256"] = "0" * 64

    _store_runs(tmp_path / "store", base, [(2, suite.seeds[0])], older, method2=False)
    calls = []
    monkeypatch.setattr(capacity, "run", lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(
        ConfigError("search started")))
    said = []
    with pytest.raises(ConfigError, match="--refuse-stale: 1 stored results of this card"):
        run_capacity_suite(suite, "designed", tmp_path / "store", log=said.append,
                           refuse_stale=True)
    assert not calls and said[0].startswith("recallbench: refusing: ")
    said.clear()
    with pytest.raises(ConfigError, match="search started"):
        run_capacity_suite(suite, "designed", tmp_path / "store", log=said.append)
    assert calls and said[0].startswith("recallbench: warning: ")



def test_leaderboard_run_passes_refuse_stale_to_a_capacity_suite(cli, tmp_path, monkeypatch):
    """`leaderboard run --refuse-stale` reaches the capacity suite's check: exit 2, one
    refusing line per stale run, and no search started."""
    from recallbench.leaderboard.capacity.suite import budget_base

    d, suite = _small_v3(tmp_path)

    def older(rec):
        rec["provenance"]["source_sha256"] = "0" * 64

    _store_runs(tmp_path / "store", budget_base(suite, "designed", suite.budgets[0]),
                [(2, suite.seeds[0])], older, method2=False)
    calls = _search_stub(monkeypatch)
    rc, out, err = cli("leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                       "--store", str(tmp_path / "store"), "--refuse-stale")
    assert rc == 2 and not calls
    assert "recallbench: refusing: " in out and "--refuse-stale: 1 stored results" in err


# -- 7: impossible state sizes -----------------------------------------------------------------
@pytest.mark.parametrize("value", ["-5", "0", "1e30", "2.5", "nan"])
def test_an_impossible_state_size_flag_is_refused_with_its_range(cli, tmp_path, value):
    with pytest.raises(SystemExit) as exc:
        cli("capacity", "--factory", "os:getcwd", f"--state-size={value}", "--d-model", "8",
            "--out", str(tmp_path / "o"))
    assert exc.value.code == 2


def test_the_state_size_type_names_the_flag_and_the_range(capsys):
    from recallbench.cli.main import main

    with pytest.raises(SystemExit):
        main(["capacity", "--factory", "os:getcwd", "--state-size", "1e30", "--d-model", "8",
              "--out", "o"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--state-size" in err and "an integer in [1, 10^15]" in err
    assert _args("--factory", "m:f", "--state-size", "5e5", "--d-model", "8",
                 "--out", "o").state_size == 500000


@pytest.fixture
def negative_state():
    """An entry-point style adapter whose state_size() is -7."""
    from recallbench.api.registry import ADAPTERS

    class Negative(ADAPTERS.get("designed")):
        def state_size(self):
            return -7

    ADAPTERS.add("negative-state", Negative, origin="rb_thirdparty")
    yield "negative-state"
    ADAPTERS.remove("negative-state")


def test_an_adapter_with_a_negative_state_gets_no_card(cli, tmp_path, negative_state):
    rc, out, err = cli("capacity", "--adapter", negative_state, "--d-model", "16", "--d-state",
                       "4", "--out", str(tmp_path / "o"))
    one_line_error(rc, err, "adapter negative-state", "state_size() = -7",
                   "a positive integer", "or None")
    assert not (tmp_path / "o").exists()


def test_the_harness_refuses_a_negative_state_before_training(negative_state):
    from recallbench import run

    cfg = {"task": {"name": "mqar", "vocab_size": 16, "seq_len": 16, "num_facts": 4},
           "model": {"adapter": negative_state, "d_model": 16, "d_state": 4},
           "train": {"val_size": 16, "test_size": 16}}
    with pytest.raises(ConfigError, match=r"adapter negative-state: state_size\(\) = -7 is "
                                          "not allowed: a positive integer"):
        run(cfg, progress=False)


# -- 9: flag holes ---------------------------------------------------------------------------
@pytest.mark.parametrize("who, sets, flag", [
    ("--adapter", "model.d_model=8", "--d-model"),
    ("--adapter", "model.d_state=2", "--d-state"),
    ("--adapter", "model.n_layers=2", "--n-layers"),
    ("--adapter", "model.adapter=designed", "--adapter"),
    ("--factory", "model.adapter=designed", "--factory"),
    ("--factory", "model.options.state_size=5", "--state-size"),
    ("--factory", "model.options.factory=os:getcwd", "--factory"),
    ("--factory", "model.options.name=x", "--name"),
])
def test_set_of_what_a_flag_gives_is_refused_naming_the_flag(cli, tmp_path, who, sets, flag):
    name = "designed" if who == "--adapter" else "os:getcwd"
    rc, out, err = cli("capacity", who, name, "--d-model", "16", "--set",
                       f"train.seed=0 {sets}", "--out", str(tmp_path / "o"))
    key = sets.split("=")[0]
    one_line_error(rc, err, f"--set {key} is not allowed: use {flag}")


@pytest.mark.parametrize("workers", ["0", "-1", "100000"])
def test_workers_out_of_range_is_refused_with_the_range(cli, tmp_path, workers):
    for who in (["--adapter", "designed"], ["--factory", "os:getcwd"]):
        rc, out, err = cli("capacity", *who, "--d-model", "16", "--workers", workers,
                           "--out", str(tmp_path / "o"))
        one_line_error(rc, err, f"--workers {workers} is not allowed: must be in [1, ")


def test_a_factory_not_on_the_import_path_says_how_to_make_it_importable(cli, tmp_path):
    rc, out, err = cli("capacity", "--factory", "no_such_layers_here:make", "--d-model", "8",
                       "--out", str(tmp_path / "o"))
    one_line_error(rc, err, "cannot import it", "no module named 'no_such_layers_here'",
                   "PYTHONPATH", "install")


def test_a_factory_that_fails_to_import_is_one_line(cli, tmp_path, monkeypatch):
    (tmp_path / "broken_layer_b.py").write_text("import no_such_dependency_here\n")
    (tmp_path / "raising_layer_c.py").write_text("raise RuntimeError('boom\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, out, err = cli("capacity", "--factory", "broken_layer_b:make", "--d-model", "8",
                       "--out", str(tmp_path / "o"))
    one_line_error(rc, err, "cannot import it", "no_such_dependency_here")
    assert "PYTHONPATH" not in err  # the module was found: its own import failed
    rc, out, err = cli("capacity", "--factory", "raising_layer_c:make", "--d-model", "8",
                       "--out", str(tmp_path / "o"))
    one_line_error(rc, err, "cannot import it (RuntimeError: boom)")


def test_the_factory_s_name_defaults_to_the_callable_and_is_validated(cli, tmp_path):
    from recallbench.cli.capacity import base_config

    base = base_config(_args("--factory", "os:getcwd", "--d-model", "8", "--out", "o"))
    assert base["model"]["options"]["name"] == "getcwd"
    base = base_config(_args("--factory", "os:getcwd", "--name", "my.layer-1", "--d-model", "8",
                             "--out", "o"))
    assert base["model"]["options"]["name"] == "my.layer-1"
    for bad in ("a b", "x" * 65, "", "ü"):
        rc, out, err = cli("capacity", "--factory", "os:getcwd", "--name", bad, "--d-model",
                           "8", "--out", str(tmp_path / "o"))
        one_line_error(rc, err, "--name", "is not allowed: 1 to 64 characters")
    rc, out, err = cli("capacity", "--adapter", "designed", "--name", "x", "--d-model", "8",
                       "--out", str(tmp_path / "o"))
    one_line_error(rc, err, "--name is for --factory only")


def test_a_locked_store_says_what_capacity_can_do(tmp_path):
    from recallbench.runs.store import Store

    with Store(tmp_path / "s"):
        with pytest.raises(ConfigError) as exc:
            Store(tmp_path / "s").open()
    text = str(exc.value)
    assert "another --store" in text and "wait for it to finish" in text


def test_topk_says_how_many_runs_were_left_out_as_unconverged(cli, tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from test_topk import _records
    finally:
        sys.path.remove(str(Path(__file__).parent))
    recs = _records()
    for r in recs[7:]:  # V = 512: one converged run, five cut by max_steps
        r["converged"] = False
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rc, out, err = cli("topk", "runs.jsonl", "--bootstrap", "0")
    one_line_error(rc, err, "V = 512", "5 run(s) were left out as unconverged",
                   "--include-unconverged")
    assert "fit_threshold" in err  # the cause, after what to do about it
    rc, out, err = cli("topk", "runs.jsonl", "--bootstrap", "0", "--include-unconverged")
    assert rc == 0, err


def test_install_sh_says_each_step_on_stderr(tmp_path):
    import subprocess

    p = subprocess.run(["bash", str(ROOT / "install.sh"), "--dry-run"], capture_output=True,
                       text=True, env={"PATH": "/usr/bin:/bin", "VENV": str(tmp_path / "v")},
                       timeout=60)
    assert p.returncode == 0, p.stderr
    steps = p.stderr.splitlines()
    assert len(steps) == 5 and all(s.startswith("install.sh: ") for s in steps)
    assert any(s.startswith("install.sh: installing torch ") for s in steps)
    assert "install.sh:" not in p.stdout  # the printed commands are unchanged


@pytest.mark.parametrize("flags, names", [
    (["--seeds", "0,1000"], ["--seeds: 1000 is not allowed", "[0, 1000)", "100000·N_f"]),
    (["--max-cells", "100"], ["--max-cells 100 is not allowed", "[1, 99]"]),
])
def test_method_2_refuses_seeds_and_batches_its_run_seeds_cannot_name(cli, tmp_path, flags,
                                                                       names):
    """A run's seed is s + 1000·j + 100000·N_f: s below 1000 and j below 100, else two runs
    of a card could share a seed."""
    rc, out, err = cli("capacity", "--adapter", "designed", "--d-model", "16", *flags,
                       "--dry-run", "--out", str(tmp_path / "card"))
    one_line_error(rc, err, *names)
