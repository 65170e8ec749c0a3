"""Bad input to ``recallbench run`` and ``recallbench theory``: one line, the field, no work.

Every case must exit non-zero without a traceback, with stderr under 8 KB whose last line
names the field, flag or file.  Also: config files are read within bounds (size, depth,
aliases, encoding), the memory estimate refuses what would not fit and is close to what a
run really allocates, ``--out`` is checked before training and a record is never lost,
and a bad config is rejected before torch loads.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

BIG = "9" * 5000  # an integer far past every bound (and past int() of 4300 digits)
LONG = "x" * 5000

BOMB = "x:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
) + "task: {name: *a9}\n"

# (id, argv after "run", files to write first, what the last line must name)
RUN_CASES = [
    ("d_model-nan", ["--set", "model.d_model=nan"], {}, "model.d_model"),
    ("d_model-inf", ["--set", "model.d_model=inf"], {}, "model.d_model"),
    ("d_state-minus-inf", ["--set", "model.d_state=-inf"], {}, "model.d_state"),
    ("expand-nan", ["--set", "model.expand=nan"], {}, "model.expand"),
    ("warmup-nan", ["--set", "train.warmup_frac=nan"], {}, "train.warmup_frac"),
    ("weight-decay-nan", ["--set", "train.weight_decay=nan"], {}, "train.weight_decay"),
    ("label-smoothing-nan", ["--set", "train.label_smoothing=nan"], {}, "train.label_smoothing"),
    ("early-stop-nan", ["--set", "train.early_stop=nan"], {}, "train.early_stop"),
    ("grad-clip-nan", ["--set", "train.grad_clip=nan"], {}, "train.grad_clip"),
    ("lr-inf", ["--set", "train.lr=inf"], {}, "train.lr"),
    ("lr-overflows", ["--set", "train.lr=1e400"], {}, "train.lr"),
    ("betas-inf", ["--set", "train.betas=[0.9,.inf]"], {}, "train.betas"),
    ("power-a-nan", ["--set", "task.power_a=nan"], {}, "task.power_a"),
    ("num-facts-inf", ["--set", "task.num_facts=.inf"], {}, "task.num_facts"),
    ("option-nan", ["--set", "model.options.chunk_size=.nan"], {}, "model.options.chunk_size"),
    ("seed-huge", ["--set", "train.seed=100000000000000000000000"], {}, "train.seed"),
    ("seed-33-bits", ["--set", "train.seed=4294967296"], {}, "train.seed"),
    ("top-k-huge", ["--set", "train.top_k=1000000000"], {}, "train.top_k"),
    ("top-k-over-vocab", ["--set", "train.top_k=129"], {}, "train.top_k"),
    ("top-k-over-given-vocab", ["--set", "task.vocab_size=64 train.top_k=65"], {}, "train.top_k"),
    ("vocab-huge", ["--set", "task.vocab_size=1000000000000"], {}, "task.vocab_size"),
    ("seq-len-huge", ["--set", "task.seq_len=1000000000"], {}, "task.seq_len"),
    ("batch-huge", ["--set", "train.batch_size=1000000000"], {}, "train.batch_size"),
    ("test-size-huge", ["--set", "train.test_size=1000000000"], {}, "train.test_size"),
    ("val-size-huge", ["--set", "train.val_size=1000000000"], {}, "train.val_size"),
    ("d-model-huge", ["--set", "model.d_model=1000000"], {}, "model.d_model"),
    ("layers-huge", ["--set", "model.n_layers=100000"], {}, "model.n_layers"),
    ("heads-huge", ["--set", "model.n_heads=100000"], {}, "model.n_heads"),
    ("expand-huge", ["--set", "model.expand=1000"], {}, "model.expand"),
    ("threads-huge", ["--set", "train.threads=100000"], {}, "train.threads"),
    ("max-steps-huge", ["--set", "train.max_steps=1e300"], {}, "train.max_steps"),
    ("seed-5000-digits", ["--set", f"train.seed={BIG}"], {}, "train.seed"),
    ("task-name-long", ["--set", f"task.name={LONG}"], {}, "task.name"),
    ("adapter-long", ["--set", f"model.adapter={LONG}"], {}, "model.adapter"),
    ("key-long", ["--set", f"train.{LONG}=1"], {}, "unknown key train."),
    ("non-utf8", ["c.yaml"], {"c.yaml": "task: {name: caf\xe9}\n".encode("latin-1")}, "c.yaml"),
    ("section-list", ["c.yaml", "--set", "task.name=ar"], {"c.yaml": b"task: [1, 2]\n"},
     "config section task"),
    ("section-number", ["c.yaml"], {"c.yaml": b"task: 5\n"}, "config section task"),
    ("top-level-list", ["c.yaml"], {"c.yaml": b"- 1\n- 2\n"}, "c.yaml"),
    ("alias-bomb", ["c.yaml"], {"c.yaml": BOMB.encode()}, "c.yaml"),
    ("recursive-alias", ["c.yaml"], {"c.yaml": b"task: &a {name: *a}\n"}, "c.yaml"),
    ("deep-nesting", ["c.yaml"], {"c.yaml": ("task: " + "[" * 3000 + "]" * 3000).encode()},
     "c.yaml"),
    ("deep-mapping", ["c.yaml"], {"c.yaml": ("task: " + "{a: " * 3000 + "1" + "}" * 3000).encode()},
     "c.yaml"),
    ("over-1-mib", ["c.yaml"], {"c.yaml": b"# " + b"x" * (1 << 20) + b"\n"}, "c.yaml"),
    ("python-tag", ["c.yaml"], {"c.yaml": b"task: !!python/object/apply:os.system [ls]\n"},
     "c.yaml"),
    ("int-5000-digits", ["c.yaml"], {"c.yaml": f"train: {{seed: {BIG}}}\n".encode()}, "c.yaml"),
    ("duplicate-section", ["c.yaml"], {"c.yaml": b"train: {seed: 1}\ntrain: {seed: 2}\n"},
     "c.yaml"),
    ("config-is-folder", ["sub"], {"sub/keep": b""}, "sub"),
    ("out-under-file", ["--out", "afile/r.json"], {"afile": b""}, "--out"),
    ("out-is-folder", ["--out", "sub"], {"sub/keep": b""}, "--out"),
    ("out-under-proc", ["--out", "/proc/recallbench/r.json"], {}, "--out"),
]


def _check_one_line(rc, err, names, status=2):
    assert rc == status, err
    assert "Traceback" not in err and len(err.encode()) < 8192
    last = err.strip().splitlines()[-1]
    assert last.startswith("recallbench: error:") and names in last, last
    assert len(last) < 600  # values echoed are cut short


@pytest.mark.parametrize("case", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_bad_run_input_is_one_line(cli, tmp_path, case):
    _, args, files, names = case
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    start = time.perf_counter()
    rc, out, err = cli("run", "--quiet", *args)
    _check_one_line(rc, err, names)
    assert time.perf_counter() - start < 30
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing written


def test_alias_bomb_and_deep_file_are_refused_at_once(cli, tmp_path):
    (tmp_path / "bomb.yaml").write_text(BOMB)
    start = time.perf_counter()
    rc, _, err = cli("run", "bomb.yaml")
    assert time.perf_counter() - start < 1.0
    assert rc == 2 and "more than 100000 values once aliases are expanded" in err


def test_a_set_value_is_read_within_the_same_bounds():
    from recallbench.api.config import parse_value
    from recallbench.api.errors import ConfigError

    bomb = "[&a [1,1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], " + ", ".join(
        f"&{n} [{','.join([f'*{p}'] * 10)}]" for p, n in zip("bcd", "cde")) + ", [*e,*e]]"
    with pytest.raises(ConfigError, match="--set task.name: more than 100000 values"):
        parse_value(bomb, "--set task.name")
    assert parse_value("[1, 2", "--set x") == "[1, 2"  # not YAML: kept as text


def test_sections_are_checked_before_overrides(cli, tmp_path):
    (tmp_path / "c.yaml").write_text("model: [64, 16]\n")
    rc, _, err = cli("run", "c.yaml", "--set", "model.d_model=8")
    assert rc == 2 and "config section model must be a mapping" in err


def test_nan_never_reaches_a_record_or_hash():
    from recallbench.api.config import resolve
    from recallbench.api.errors import ConfigError

    for section, key in [("train", "label_smoothing"), ("train", "early_stop"),
                         ("model", "expand"), ("task", "power_a")]:
        with pytest.raises(ConfigError, match=f"{section}.{key} = nan"):
            resolve({section: {key: float("nan")}})


THEORY = ["theory", "--vocab-size", "512", "--num-facts", "16", "--d-model", "64",
          "--d-state", "16"]
THEORY_CASES = [
    ("n-layers-10**320", ["--n-layers", str(10**320)], "--n-layers"),
    ("vocab-huge", ["--vocab-size", "1000000000000"], "--vocab-size"),
    ("d-model-huge", ["--d-model", "1000000"], "--d-model"),
    ("d-state-zero", ["--d-state", "0"], "--d-state"),
    ("seq-len-huge", ["--seq-len", "99999999999"], "--seq-len"),
    ("a-nan", ["--a", "nan"], "--a"),
    ("a-inf", ["--a", "inf"], "--a"),
    ("a-huge", ["--a", "1e308"], "--a"),
    ("delta-tiny", ["--delta", "1e-300"], "--delta"),
    ("delta-nan", ["--delta", "nan"], "--delta"),
    ("target-nan", ["--target", "nan"], "--target"),
    ("state-bits-huge", ["--state-bits", "1000000"], "--state-bits"),
    ("top-k-huge", ["--top-k", "1000000000"], "--top-k"),
]


@pytest.mark.parametrize("case", THEORY_CASES, ids=[c[0] for c in THEORY_CASES])
def test_bad_theory_flag_is_one_line(cli, case):
    _, args, names = case
    rc, out, err = cli(*THEORY, *args)
    _check_one_line(rc, err, names)


@pytest.mark.parametrize("args,flag", [
    (["theory", "--d-model", BIG], "--d-model"),  # argparse's own error, cut short
    (["run", "--bogus-" + LONG], "unrecognized arguments"),
])
def test_argparse_errors_are_bounded(cli, capsys, args, flag):
    with pytest.raises(SystemExit) as exc:
        cli(*args)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.encode()) < 8192
    assert flag in err.strip().splitlines()[-1]


# -- memory ---------------------------------------------------------------------------

def test_memory_check_refuses_a_huge_batch_quickly(cli):
    start = time.perf_counter()
    rc, _, err = cli("run", "--quiet", "--set", "train.batch_size=1048576")
    _check_one_line(rc, err, "train.batch_size=1048576: a run would need ~")
    assert "available" in err and time.perf_counter() - start < 15


def test_memory_check_accepts_the_default_and_names_the_limit():
    from recallbench.api.config import resolve
    from recallbench.api.errors import ConfigError
    from recallbench.harness.resources import check_memory, host_available

    cfg = resolve({})
    need = check_memory(cfg)
    assert need > 1 << 20 and need < min(host_available(), 1 << 30)  # megabytes, not gigabytes
    with pytest.raises(ConfigError, match=r"^task.seq_len=64: a run would need ~6\d\d MiB "
                                          r"\(an evaluation batch .*\), this machine has 1 B"):
        check_memory(cfg, host_free=1)
    big_sets = resolve({"train": {"test_size": 2**22}})
    with pytest.raises(ConfigError, match=r"^train.test_size=4194304: .* has 1 GiB available"):
        check_memory(big_sets, host_free=1 << 30)


def _measured_bytes(cfg) -> tuple[int, int, int]:
    """(parameters + gradients + optimizer state, tensors saved by one training step,
    evaluation sets), each counted from the real tensors."""
    import torch

    from recallbench.harness.data import RecallDataModule
    from recallbench.harness.loop import labelled_loss
    from recallbench.harness.prepare import build_model

    _, model = build_model(cfg, torch.device("cpu"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs, targets = cfg.task.sample(cfg.train.batch_size, torch.Generator().manual_seed(0))
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = labelled_loss(model, inputs, targets)
    loss.backward()
    opt.step()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    state = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
                if torch.is_tensor(v) and v.dim() > 0)
    dm = RecallDataModule(cfg.task, cfg.train.batch_size, 0, cfg.train.val_size,
                          cfg.train.test_size)
    dm.setup()
    data = sum(t.numel() * t.element_size() for t in (*dm.val_set, *dm.test_set))
    return weights + grads + state, sum(saved.values()), data


@pytest.mark.parametrize("sets,most", [
    ({"train": {"batch_size": 256}}, 10),
    ({"task": {"vocab_size": 4096, "seq_len": 128, "num_facts": 32}, "model": {"d_model": 32},
      "train": {"batch_size": 64, "val_size": 256, "test_size": 256}}, 10),
    ({"model": {"n_layers": 3, "d_state": 8}, "train": {"batch_size": 128}}, 10),
    pytest.param({"model": {"adapter": "gla"}, "train": {"batch_size": 64}}, 10,
                 marks=pytest.mark.slow),  # importing fla takes seconds
], ids=["default", "large-vocab", "three-layers", "gla"])
def test_memory_estimate_is_within_a_few_times_what_a_run_allocates(sets, most):
    from recallbench.api.config import resolve
    from recallbench.api.registry import ADAPTERS
    from recallbench.harness.resources import estimate

    ok, why = ADAPTERS.get(sets.get("model", {}).get("adapter", "linear-mamba")).availability()
    if not ok:
        pytest.skip(why)
    cfg = resolve(sets)
    parts = {p.name: p.bytes for p in estimate(cfg)}
    weights, activations, data = _measured_bytes(cfg)
    assert weights <= parts["the model's parameters and optimizer state"] <= 4 * weights
    assert activations <= parts["one training batch"] <= most * activations
    assert data <= parts["the validation and test sets"] <= 8 * data


# -- --out, divergence ---------------------------------------------------------------

TINY = "task.vocab_size=16 task.seq_len=16 task.num_facts=4 model.d_model=8 model.d_state=2"


def test_divergence_is_one_line_with_its_own_status_and_a_failed_record(cli, tmp_path):
    rc, out, err = cli("run", "--quiet", "--set", TINY, "--set",
                       "train.lr=1e6 train.max_steps=40 train.val_every=20 train.val_size=8 "
                       "train.test_size=8", "--out", "res/r.json")
    assert rc == 3, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "run diverged" in err and "train.lr" in err and "res/r.json" in err
    rec = json.loads((tmp_path / "res" / "r.json").read_text())
    assert rec["status"] == "failed" and ("nan" in rec["error"] or "inf" in rec["error"])
    assert rec["config"]["train"]["lr"] == 1e6


def test_run_help_documents_the_exit_statuses(cli, capsys):
    with pytest.raises(SystemExit):
        cli("run", "--help")
    text = capsys.readouterr().out
    assert "exit status:" in text and "3    the run diverged" in text


def test_a_record_that_cannot_be_written_is_saved_elsewhere(tmp_path, monkeypatch, capsys):
    import tempfile

    from recallbench.cli.main import save_record

    record = {"config_hash": "ab" * 32, "accuracy": 0.5}
    (tmp_path / "gone").write_text("")  # the folder became a file after the check
    fallback = tmp_path / "tmp"
    fallback.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(fallback))
    where, why = save_record(record, tmp_path / "gone" / "r.json")
    saved = list(fallback.glob(f"recallbench-{'ab' * 6}-*.json"))  # a name nobody can guess
    assert why and len(saved) == 1 and where == str(saved[0])
    assert json.loads(saved[0].read_text()) == record
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))  # no fallback either
    where, why = save_record(record, tmp_path / "gone" / "r.json")
    assert why and "standard output" in where
    assert json.loads(capsys.readouterr().out) == record


# -- fresh interpreters -----------------------------------------------------------------

@pytest.mark.slow
def test_bad_config_is_rejected_before_torch_loads(tmp_path):
    code = textwrap.dedent("""
        import sys, time
        from recallbench.cli.main import main
        start = time.perf_counter()
        rc = main(["run", "--set", "model.d_model=nan"])
        print(rc, "torch" in sys.modules, "lightning" in sys.modules,
              round(time.perf_counter() - start, 3))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    rc, torch_loaded, lightning_loaded, _ = proc.stdout.split()
    assert (rc, torch_loaded, lightning_loaded) == ("2", "False", "False"), proc.stderr
    assert "model.d_model = nan" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args,names", [
    (["run", "--set", "train.seed=100000000000000000000000"], "train.seed"),
    (["theory", "--vocab-size", "512", "--num-facts", "16", "--d-model", "64", "--d-state", "16",
      "--n-layers", str(10**320)], "--n-layers"),
])
def test_console_script_bad_input_is_one_line(cli_subprocess, args, names):
    rc, out, err = cli_subprocess(*args, timeout=120)
    _check_one_line(rc, err, names)
