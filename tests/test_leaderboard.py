"""Leaderboards: suites, `leaderboard run`, `submit`, validate/verify/render, and the
safety of reading submissions (size limit, safe YAML, hashes, paths, Fano bound).

Tiny suites in tmp_path use the `designed` adapter (fixed weights, no training), so a
whole suite runs in seconds; it is built once and each test works on its own copy in
its tmp_path.  The last tests check the committed leaderboards/ folder:
every submission validates and every rendered README is up to date.
"""
from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import pytest
import yaml

from recallbench import leaderboard as lb
from recallbench.api.canonical import config_hash
from recallbench.api.errors import ConfigError
from recallbench.leaderboard.capacity.reseed_docs import check_reseeds, reseed_files

REPO = Path(__file__).resolve().parent.parent

TINY_SUITE = """\
schema: recallbench.suite/1
name: tiny
title: tiny test suite
task: {name: mqar, vocab_size: 32, seq_len: 32}
num_facts: [2, 4, 8]
budgets:
  - name: D16-N8
    model: {d_model: 16, d_state: 8, n_layers: 1}
adapters: {}
train: {max_steps: 0, batch_size: 8, val_size: 16, test_size: 128}
lr: [0.01]
seeds: [0, 1]
device: cpu
threads: 1
tolerance: {accuracy: 0.0}
scoring: {delta: 0.01, form: eq19, level: 0.95}
"""


def _run(cfg, progress=False):
    from recallbench.harness.train import run

    return run(cfg, progress=False)


@pytest.fixture(scope="module")
def tiny_built(tmp_path_factory):
    """Built once: a tiny suite folder, a store of its `designed` runs, a valid submission."""
    root = tmp_path_factory.mktemp("lb")
    suite_dir = root / "leaderboards" / "tiny"
    suite_dir.mkdir(parents=True)
    (suite_dir / "suite.yaml").write_text(TINY_SUITE)
    suite = lb.load_suite(suite_dir)
    counts = lb.run_suite(suite, "designed", root / "store", log=lambda m: None)
    assert counts == {"points": 6, "skipped": 0, "ran": 6, "failed": 0, "left": 0}
    sub = lb.build_submission(suite, lb.load_store_records([root / "store"]), "designed-ref")
    lb.write_submission(sub, suite_dir / "submissions" / "designed-ref.yaml")
    return root, sub


@pytest.fixture
def tiny(tiny_built, tmp_path):
    """This test's own copy of the tiny suite folder, store and submission."""
    built, sub = tiny_built
    root = tmp_path / "lb"
    shutil.copytree(built, root)
    suite_dir = root / "leaderboards" / "tiny"
    return {"root": root, "suite_dir": suite_dir, "suite": lb.load_suite(suite_dir),
            "store": root / "store", "path": suite_dir / "submissions" / "designed-ref.yaml",
            "sub": copy.deepcopy(sub)}


def _write(tiny, name: str, data, raw: str | None = None, rehash: bool = True) -> Path:
    path = tiny["suite_dir"] / "submissions" / name
    if raw is None:
        if rehash:
            data["sha256"] = lb.content_sha256(data)
        raw = lb.dump_yaml(data)
    path.write_text(raw)
    return path


def _reject(path, match: str, suite_dir=None):
    with pytest.raises(ConfigError, match=match) as info:
        lb.validate_file(path, suite_dir)
    msg = str(info.value)
    assert "\n" not in msg  # one line
    return msg


# -- suites ---------------------------------------------------------------------------

def test_suite_grid_and_point_config(tiny):
    suite = tiny["suite"]
    pts = suite.points()
    assert len(pts) == 3 * 2
    cfg = suite.point_config("designed", pts[-1])
    assert cfg["task"] == {"name": "mqar", "vocab_size": 32, "seq_len": 32, "num_facts": 8}
    assert cfg["model"] == {"adapter": "designed", "d_model": 16, "d_state": 8, "n_layers": 1}
    assert cfg["train"]["seed"] == 1 and cfg["train"]["lr"] == 0.01 and cfg["train"]["threads"] == 1


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(schema="x/1"), "schema must be"),
    (lambda d: d.update(name="other"), "must equal its folder name"),
    (lambda d: d.update(num_facts=[2, 2]), "distinct positive"),
    (lambda d: d["train"].update(lr=0.1), "give the learning rate once"),
    (lambda d: d["train"].update(seed=1), "train.seed is the grid"),
    (lambda d: (d.pop("lr"), d["train"].update(lr=[0.1, -1])), "train.lr"),
    (lambda d: d.update(retired=""), "retired must be a text"),
    (lambda d: d.update(budgets=[{"name": "../x", "model": {"d_model": 4}}]), "not a plain name"),
    (lambda d: d.update(extra=1), "unknown key"),
    (lambda d: d.update(seq_len_per_fact=4), "give task.seq_len or seq_len_per_fact, not both"),
    (lambda d: (d["task"].pop("seq_len"), d.update(seq_len_per_fact=2)),
     r"seq_len_per_fact must be an integer from 3 to 64 \(L = seq_len_per_fact · N_f > 2·N_f\)"),
])
def test_bad_suites(tmp_path, edit, match):
    data = yaml.safe_load(TINY_SUITE)
    edit(data)
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "suite.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=match):
        lb.load_suite(d)


def test_seq_len_per_fact_scales_l_with_n_f(tmp_path):
    """seq_len_per_fact: 4 gives each point L = 4·N_f (the paper's MQAR), enters the recipe
    hash, and leaves the hash of a suite without it as it was."""
    data = yaml.safe_load(TINY_SUITE)
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "suite.yaml").write_text(yaml.safe_dump(data))
    before = lb.load_suite(d).recipe_sha256()
    data["task"].pop("seq_len")
    data["seq_len_per_fact"] = 4
    (d / "suite.yaml").write_text(yaml.safe_dump(data))
    suite = lb.load_suite(d)
    lens = {p["num_facts"]: suite.point_config("designed", p)["task"]["seq_len"] for p in suite.points()}
    assert lens == {nf: 4 * nf for nf in data["num_facts"]} and len(lens) >= 2
    assert suite.recipe_sha256() != before
    # a submission of it: each point's L in its delta, checked against the suite's
    counts = lb.run_suite(suite, "designed", tmp_path / "store", log=lambda m: None)
    assert counts["failed"] == 0 and counts["ran"] == len(suite.points())
    sub = lb.build_submission(suite, lb.load_store_records([tmp_path / "store"]), "designed")
    path = d / "submissions" / "designed.yaml"
    lb.write_submission(sub, path)
    lb.validate_file(path)
    point = next(p for b in sub["budgets"] for p in b["points"]
                 if (p.get("delta") or {}).get("task", {}).get("seq_len") == 32)
    point["delta"]["task"]["seq_len"] = 40  # not 4·N_f, with its hashes made consistent
    budget = next(b for b in sub["budgets"] if point in b["points"])
    point["config_hash"] = config_hash(lb.merge_config(budget["config"], point["delta"]))
    sub["sha256"] = lb.content_sha256(sub)
    path.write_text(lb.dump_yaml(sub))
    with pytest.raises(ConfigError, match=r"config does not follow the suite: task.seq_len = 40, "
                                          r"the suite fixes 32"):
        lb.validate_file(path)
    data["seq_len_per_fact"] = 5
    (d / "suite.yaml").write_text(yaml.safe_dump(data))
    assert lb.load_suite(d).recipe_sha256() != suite.recipe_sha256()


def test_committed_suites_load():
    dirs = lb.suite_dirs(REPO / "leaderboards")
    assert {d.name for d in dirs} >= {"cpu-small", "gpu-standard", "cpu-v3"}
    for d in dirs:
        suite = lb.load_suite(d)
        if suite.is_capacity:  # no grid: the search places N_f in the keys of V
            assert not suite.points() and suite.facts_range() == (2, 255)
        else:
            assert suite.points()


# -- run and submit ---------------------------------------------------------------------

def test_run_skips_points_already_in_the_store(tiny):
    counts = lb.run_suite(tiny["suite"], "designed", tiny["store"], log=lambda m: None)
    assert counts["skipped"] == 6 and counts["ran"] == 0
    lines = (tiny["store"] / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6


def test_submission_content(tiny):
    sub = tiny["sub"]
    assert sub["schema"] == lb.SUBMISSION_SCHEMA and sub["suite"] == "tiny"
    assert sub["model"]["adapter"] == "designed" and sub["model"]["library"]["name"] == "recallbench"
    b = sub["budgets"][0]
    assert b["state_size"] == 2 * 16 * 8 and b["state_bits"] == 32
    assert len(b["points"]) == 6 and all(p["total"] > 0 for p in b["points"])
    assert set(b["score"]) == {"mean", "best"}
    assert "s_eff" in b["score"]["mean"] or "error" in b["score"]["mean"]
    assert sub["environment"]["versions"]["torch"]
    assert sub["sha256"] == lb.content_sha256(sub)
    # the file on disk round-trips to the same content hash
    back = lb.read_yaml_data(tiny["path"])
    assert lb.content_sha256(back) == sub["sha256"]


def test_submit_and_validate_cli(tiny, cli):
    out = tiny["suite_dir"] / "submissions" / "cli-made.yaml"
    rc, stdout, err = cli("submit", "--suite", str(tiny["suite_dir"]), "--store", str(tiny["store"]),
                          "--model-name", "cli-made", "--out", str(out))
    assert rc == 0, err
    assert "S_eff" in stdout and out.is_file()
    # the same runs under another name duplicate designed-ref: both are refused
    rc, stdout, err = cli("leaderboard", "validate", str(out), str(tiny["path"]))
    assert rc == 2 and stdout.count("INVALID") == 2 and "duplicate of designed-ref.yaml" in stdout
    assert err.count("\n") == 1 and f"{out}: duplicate of designed-ref.yaml" in err
    tiny["path"].unlink()
    rc, stdout, err = cli("leaderboard", "validate", str(out))
    assert rc == 0, err
    assert stdout.count("ok ") == 1
    rc, _, err = cli("submit", "--suite", str(tiny["suite_dir"]), "--store", str(tiny["store"]),
                     "--model-name", "cli-made", "--out", str(out))
    assert rc == 2 and "exists" in err


def test_submit_rejects_incomplete_store(tiny, tmp_path, cli):
    lines = (tiny["store"] / "results.jsonl").read_text().splitlines()
    part = tmp_path / "part"
    part.mkdir()
    (part / "results.jsonl").write_text("\n".join(lines[:4]) + "\n")
    rc, _, err = cli("submit", "--suite", str(tiny["suite_dir"]), "--store", str(part),
                     "--model-name", "x", "--out", str(tmp_path / "x.yaml"))
    assert rc == 2 and "lacks 2 of 6 points" in err and err.count("\n") == 1


# -- rejected submissions ---------------------------------------------------------------

def _edited(tiny, edit, name: str = "bad.yaml", rehash: bool = True) -> Path:
    """The valid submission changed in place by ``edit``, written to submissions/NAME."""
    data = copy.deepcopy(tiny["sub"])
    edit(data)
    return _write(tiny, name, data, rehash=rehash)


def _point(data, j: int = 0) -> dict:
    return data["budgets"][0]["points"][j]


def test_grid_submission_without_the_protocol_fields_stays_valid(tiny):
    """A suite with a top-level lr list (one run per lr) accepts submissions made before
    points carried lr_search, converged, stop_reason and steps_to, and the model its
    provenance; the page shows "—" for them.  A search result there is refused."""
    data = copy.deepcopy(tiny["sub"])
    del data["model"]["provenance"]
    for b in data["budgets"]:
        for p in b["points"]:
            for k in ("lr_search", "converged", "stop_reason", "steps_to"):
                del p[k]
    path = _write(tiny, "designed-ref.yaml", data)
    lb.validate_file(path)
    lb.render(tiny["suite_dir"], plot=False)
    page = (tiny["suite_dir"] / "index.html").read_text()
    assert "<dt>lr search</dt><dd>—</dd>" in page and "<dt>provenance</dt><dd>—</dd>" in page
    _point(data)["lr_search"] = [{"lr": 0.01, "val_accuracy": 0.5, "steps": 0, "converged": True,
                                  "error": None}]
    _reject(_write(tiny, "designed-ref.yaml", data), "point 1: lr_search: must be null: the "
            "config trains one lr")


def test_tampered_counts_fail_the_content_hash(tiny):
    path = _edited(tiny, lambda d: _point(d).update(correct=_point(d)["correct"] - 1), rehash=False)
    _reject(path, "content sha256 mismatch")


def test_tampered_config_fails_the_config_hash(tiny):
    # the content sha256 is recomputed, the config hashes are not
    path = _edited(tiny, lambda d: d["budgets"][0]["config"]["train"].update(batch_size=9))
    _reject(path, "config_hash does not match")
    path = _edited(tiny, lambda d: d["model"]["config"].update(d_conv=4))
    _reject(path, "model.config_hash does not match")


def _other_model_config_in_one_point(data) -> None:
    p = _point(data, 1)
    p["delta"] = {**p["delta"], "model": {"d_conv": 3}}
    p["config_hash"] = config_hash(lb.merge_config(data["budgets"][0]["config"], p["delta"]))


def _consistent_config_off_the_recipe(data) -> None:
    b = data["budgets"][0]
    for p in b["points"]:
        full = lb.merge_config(b["config"], p.get("delta") or {})
        full["train"]["max_steps"] = 5
        p["config_hash"] = config_hash(full)
    b["config"]["train"]["max_steps"] = 5


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["budgets"][0]["points"].pop(), "missing"),
    (lambda d: _point(d).update(seed=7), "not a point of suite"),
    (_other_model_config_in_one_point, "model.d_conv differs between the points"),
    (_consistent_config_off_the_recipe, "does not follow the suite: train.max_steps"),
])
def test_off_suite_and_missing_points(tiny, edit, match):
    _reject(_edited(tiny, edit), match)


def test_fano_impossible_submission_is_rejected(tiny, monkeypatch):
    # the adapter's recomputed state refuses a forged size first; without that check, the
    # Fano bound still refuses a state too small for the accuracies
    monkeypatch.setattr("recallbench.leaderboard.validate.check_state", lambda b, where: None)
    path = _edited(tiny, lambda d: d["budgets"][0].update(state_size=1, state_bits=1))
    msg = _reject(path, "IMPOSSIBLE")
    assert "Fano" in msg


def test_python_tag_is_rejected(tiny):
    raw = tiny["path"].read_text().replace("schema: recallbench.submission/1",
                                           "schema: !!python/object/apply:os.system ['echo pwned']")
    path = _write(tiny, "evil.yaml", None, raw=raw)
    msg = _reject(path, "only plain YAML data is allowed")
    assert "python/object" in msg
    path.write_text("a: !!python/object:recallbench.leaderboard.Suite {}\n")
    _reject(path, "only plain YAML data is allowed")


def test_aliases_malformed_and_non_mapping(tiny):
    path = _write(tiny, "odd.yaml", None, raw="a: &x [1, 2]\nb: *x\n")
    _reject(path, "aliases are not allowed")
    path.write_text("schema: [unclosed\n")
    _reject(path, "not valid YAML at line")
    path.write_text("- just\n- a list\n")
    _reject(path, "must be a mapping")
    path.write_text("schema: a\nschema: b\n")
    _reject(path, "duplicate key")
    data = copy.deepcopy(tiny["sub"])
    del data["environment"]
    _write(tiny, "odd.yaml", data)
    _reject(path, "missing field 'environment'")


def test_oversized_submission_is_rejected_before_parsing(tiny, monkeypatch):
    path = tiny["suite_dir"] / "submissions" / "big.yaml"
    path.write_text("x: " + "a" * (lb.MAX_BYTES + 10) + "\n")
    parsed = []
    real_init = yaml.SafeLoader.__init__

    def spy(self, stream):
        parsed.append(stream[:5])
        real_init(self, stream)

    monkeypatch.setattr(yaml.SafeLoader, "__init__", spy)
    msg = _reject(path, "larger than the 1048576-byte limit")
    assert "x: aa" not in parsed and "bytes" in msg  # only the suite was parsed


def test_paths_must_stay_inside_the_leaderboard(tiny, tmp_path):
    outside = tmp_path / "elsewhere.yaml"
    _reject(outside, "no such file")
    outside.write_text(tiny["path"].read_text())
    _reject(outside, "submissions must live in")
    # a file under the suite folder but not in submissions/
    stray = tiny["suite_dir"] / "stray.yaml"
    stray.write_text(tiny["path"].read_text())
    _reject(stray, "submissions must live in")
    _reject(stray, "not inside", suite_dir=tiny["suite_dir"])
    for bad, match in [("../../etc/passwd", r"escapes the leaderboard folder \('\.\.'\)"),
                       ("/etc/passwd", "absolute path"), ("C:/x", "absolute path")]:
        _reject(_edited(tiny, lambda d: d.update(artifacts=[bad])), match)
    _reject(_edited(tiny, lambda d: d.update(suite="../tiny")), "not a plain name")
    _reject(_edited(tiny, lambda d: d["model"].update(name="../../x")), "not a plain name")
    with pytest.raises(ConfigError, match="not a plain name"):
        lb.build_submission(tiny["suite"], [], "../escape")


def test_validate_cli_reports_one_line_per_bad_file(tiny, cli):
    path = _edited(tiny, lambda d: _point(d).update(total=_point(d)["total"] + 1), rehash=False)
    rc, out, err = cli("leaderboard", "validate", str(path), str(tiny["path"]))
    assert rc == 2
    assert "INVALID" in out and "sha256 mismatch" in out and "ok " in out
    assert err.startswith(f"recallbench: error: 1 of 2 submission(s) invalid; first: {path}: content "
                          "sha256 mismatch") and err.count("\n") == 1


# -- verify -----------------------------------------------------------------------------

def test_sample_points_follow_the_seed_not_the_submission(tiny):
    def picked(sub, seed):
        return [p["config_hash"] for _, p in lb.sample_points(sub, 3, seed)]

    forged = copy.deepcopy(tiny["sub"])
    forged["sha256"] = "0" * 64  # what a submitter controls does not steer the sample
    assert picked(tiny["sub"], 7) == picked(forged, 7)
    assert len({tuple(picked(tiny["sub"], s)) for s in range(20)}) > 1
    assert len(lb.sample_points(tiny["sub"], 99, 0)) == 6
    assert len({lb.new_seed() for _ in range(5)}) > 1


def test_verify_agrees_and_catches_a_disagreement(tiny, cli):
    rc, out, err = cli("leaderboard", "verify", str(tiny["path"]), "--sample", "2")
    assert rc == 0, err
    assert "verify ok: 2" in out
    seed = int(re.search(r"drawn with seed (\d+) \(repeat with --seed \1\)", out).group(1))
    rc, again, err = cli("leaderboard", "verify", str(tiny["path"]), "--sample", "2", "--seed", str(seed))
    assert rc == 0, err
    points = [line.split(":")[0] for line in out.splitlines() if "re-run" in line and "N_f=" in line]
    assert points and points == [line.split(":")[0] for line in again.splitlines()
                                 if "re-run" in line and "N_f=" in line]
    sub = copy.deepcopy(tiny["sub"])
    for b in sub["budgets"]:
        for p in b["points"]:
            p["correct"] = p["correct"] // 2  # halve every claimed count
    rows = lb.verify(sub, tiny["suite"], 1, seed=3, runner=_run, log=lambda m: None)
    assert len(rows) == 1 and not rows[0]["ok"]


# -- render -----------------------------------------------------------------------------

def test_render_and_check(tiny, cli):
    d = tiny["suite_dir"]
    rc, out, err = cli("leaderboard", "render", str(d), "--check")
    assert rc == 1 and "stale" in out
    rc, out, err = cli("leaderboard", "render", str(d))
    assert rc == 0, err
    readme = (d / "README.md").read_text()
    assert "designed-ref" in readme and "N_f\\* per kbit" in readme and "acc N_f=8" in readme
    png = d / lb.PLOT
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rc, out, _ = cli("leaderboard", "render", str(d), "--check")
    assert rc == 0 and "up to date" in out
    (d / "README.md").write_text(readme + "\nedited\n")
    rc, out, _ = cli("leaderboard", "render", str(d), "--check")
    assert rc == 1 and "stale" in out


def test_leaderboard_rows_rank_by_capacity_per_bit(tiny):
    a = copy.deepcopy(tiny["sub"])
    b = copy.deepcopy(tiny["sub"])
    b["model"]["name"] = "bigger-state"
    b["budgets"][0]["state_size"] *= 4  # same capacity, four times the state
    a["budgets"][0]["score"]["mean"]["capacity"] = 5.0
    b["budgets"][0]["score"]["mean"]["capacity"] = 5.0
    c = copy.deepcopy(a)
    c["model"]["name"] = "attn"
    c["budgets"][0]["state_size"] = None
    rows = lb.leaderboard_rows(tiny["suite"], [(Path("b.yaml"), b), (Path("c.yaml"), c),
                                               (Path("a.yaml"), a)])
    assert [r["model"] for r in rows] == ["designed-ref", "bigger-state", "attn"]
    text = lb.render_markdown(tiny["suite"], rows)
    assert "grows with L" in text
    # a file with rows at two budgets is listed once among the submissions
    two = lb.render_markdown(tiny["suite"], rows + [{**rows[0], "budget": "other"}])
    listed = two.split("Submissions (in")[1]
    assert listed.count("`a.yaml`") == 1 and listed.count("`b.yaml`") == 1
    png = lb.render_plot(tiny["suite"], rows, tiny["root"] / "plot.png")
    assert png.stat().st_size > 1000


def test_run_stores_a_crashing_point_as_failed_and_retries_it(tiny, tmp_path):
    calls = []

    def runner(cfg, progress=False):
        calls.append(cfg.hash())
        raise RuntimeError("boom\nsecond line")

    store = tmp_path / "s"
    counts = lb.run_suite(tiny["suite"], "designed", store, runner=runner, limit=2, log=lambda m: None)
    assert counts["failed"] == 2 and counts["ran"] == 0 and len(calls) == 2
    recs = lb.load_store_records([store])
    assert [r["status"] for r in recs] == ["failed", "failed"]
    assert recs[0]["error"] == "RuntimeError: boom"
    counts = lb.run_suite(tiny["suite"], "designed", store, runner=runner, limit=1, log=lambda m: None)
    assert counts["skipped"] == 0  # failed points are retried


def test_run_cli_accepts_only_open_model_settings(tiny, cli):
    base = ["leaderboard", "run", "--suite", str(tiny["suite_dir"]), "--adapter", "designed",
            "--store", str(tiny["store"])]
    rc, _, err = cli(*base, "--set", "train.lr=0.1")
    assert rc == 2 and "only model.* settings" in err
    rc, _, err = cli(*base, "--set", "model.d_state=4")
    assert rc == 2 and "fixed by suite tiny" in err
    rc, out, err = cli(*base)
    assert rc == 0 and "6 skipped" in out


# -- the committed leaderboards ----------------------------------------------------------

COMMITTED = [p for d in lb.suite_dirs(REPO / "leaderboards") for p in lb.submission_files(d)]


@pytest.mark.parametrize("scores", [pytest.param(False, id="envelope"),
                                    pytest.param(True, id="scores", marks=pytest.mark.slow)])
@pytest.mark.parametrize("path", COMMITTED, ids=[f"{p.parent.parent.name}/{p.name}" for p in COMMITTED])
def test_committed_submission_is_valid(path, scores):
    """Everything ``validate`` checks; the scores recomputed from the points only in the
    slow run (a capacity card's search replayed look by look costs up to a minute)."""
    sub, suite, _ = lb.validate_file(path, check_scores=scores)
    assert sub["suite"] == suite.name == path.parent.parent.name


@pytest.mark.parametrize("path", COMMITTED, ids=[f"{p.parent.parent.name}/{p.name}" for p in COMMITTED])
def test_committed_submission_was_run_with_the_committed_adapter_code(path):
    """A submission to an open suite by a built-in adapter carries the source hash of the
    adapter code in this checkout: editing an adapter means re-running its submissions."""
    from recallbench.api.provenance import provenance
    from recallbench.api.registry import ADAPTERS

    sub, suite, _ = lb.validate_file(path, check_scores=False)
    adapter = sub["model"]["adapter"]
    then = (sub["model"].get("provenance") or {}).get("source_sha256")
    if suite.retired or then is None:
        pytest.skip("a retired suite, or a submission from before records had provenance")
    if not ADAPTERS.get(adapter).availability()[0]:
        pytest.skip(f"{adapter} is not available here")
    assert provenance(adapter)["source_sha256"] == then, (
        f"{path}: the {adapter} adapter's code changed since this submission was run; re-run it")


@pytest.mark.parametrize("suite_dir", lb.suite_dirs(REPO / "leaderboards"),
                         ids=lambda p: p.name)
def test_committed_readme_is_not_stale(suite_dir, monkeypatch):
    """The README, plot and page as render writes them from the committed files (their
    scores recomputed in test_committed_submission_is_valid's and
    test_committed_reseedings_replay's slow runs: no card is replayed here)."""
    from recallbench.leaderboard.capacity import suite as capacity_suite

    replayed = []
    monkeypatch.setattr(capacity_suite, "check_cards", lambda *a: replayed.append(a[2]))
    fresh, msgs = lb.render(suite_dir, check=True, check_scores=False)
    assert fresh, "; ".join(msgs)
    assert replayed == []


RESEEDED = [d for d in lb.suite_dirs(REPO / "leaderboards") if reseed_files(d)]


@pytest.mark.slow
@pytest.mark.parametrize("suite_dir", RESEEDED, ids=lambda p: p.name)
def test_committed_reseedings_replay(suite_dir, monkeypatch):
    """Every re-seeding on a committed board passes ``validate``'s checks with each of its
    cards replayed from its points (a Mamba card's search replayed look by look: a minute)."""
    from recallbench.leaderboard.capacity import suite as capacity_suite

    replayed, check = [], capacity_suite.check_cards
    monkeypatch.setattr(capacity_suite, "check_cards",
                        lambda *a: replayed.append(a[2]) or check(*a))
    subs = lb.valid_board(suite_dir, check_scores=False)
    checked = check_reseeds(lb.load_suite(suite_dir), subs, check_scores=True)
    assert checked and [c[3] for c in checked] == [None] * len(checked)
    assert sorted(replayed) == sorted(str(c[0]) for c in checked)


# -- bad command-line input: one line naming the flag or file, exit 2 ---------------------

def _forged_store(tiny, out: Path, **fields) -> Path:
    """A copy of the tiny store in ``out`` with ``fields`` overwritten in every record."""
    import json

    out.mkdir()
    lines = [json.loads(x) for x in (tiny["store"] / "results.jsonl").read_text().splitlines()]
    (out / "results.jsonl").write_text("".join(json.dumps({**r, **fields}) + "\n" for r in lines))
    return out


@pytest.mark.parametrize("args, match", [
    (["--store", "{tmp}/bin.json"], "bin.json"),
    (["--store", "{tmp}/missing"], "missing does not exist"),
    (["--out", "{tmp}"], "--out"),
    (["--out", "{tmp}/bin.json/x.yaml"], "is not a folder"),
    (["--description", "x" * 600], "--description: 600 characters; at most 500"),
    (["--model-name", "a/b"], "--model-name"),
    (["--store", "{forged_state}"], "state_size 8, the adapter computes 256"),
    (["--store", "{forged_counts}"], "correct"),
])
def test_submit_bad_input_is_one_line(tiny, tmp_path, cli, args, match):
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00\x01" * 8)
    subs = {"tmp": tmp_path, "forged_state": _forged_store(tiny, tmp_path / "a", state_size=8),
            "forged_counts": _forged_store(tiny, tmp_path / "b", correct=10 ** 400)}
    base = {"--suite": str(tiny["suite_dir"]), "--store": str(tiny["store"]), "--model-name": "m",
            "--out": str(tmp_path / "m.yaml")}
    base.update({k: v.format(**subs) for k, v in zip(args[::2], args[1::2])})
    rc, _, err = cli("submit", *[x for kv in base.items() for x in kv])
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert match in err and len(err) < 8192
    assert not (tmp_path / "m.yaml").exists()


@pytest.mark.parametrize("args, match", [
    (["run", "--adapter", "designed", "--set", "model.expand=nan"], "model.expand"),
    (["run", "--adapter", "designed", "--limit", "0"], "--limit 0: must be >= 1"),
    (["run", "--adapter", "no-such-adapter"], "unknown adapter 'no-such-adapter'"),
    (["run", "--adapter", "designed", "--store", "{file}"], "not a directory"),
    (["run", "--adapter", "designed", "--workers", "2"], "--workers: is for --executor processes"),
    (["run", "--adapter", "designed", "--workers", "0"], "--workers 0: must be >= 1"),
    (["run", "--adapter", "designed", "--executor", "processes", "--workers", "100000"],
     "--workers 100000 is not allowed: must be in [1, "),
    (["run", "--adapter", "designed", "--time-budget", "0.5"], "--time-budget 0.5: must be in [1, 1e7]"),
    (["verify", "{sub}", "--sample", "0"], "--sample 0: must be >= 1"),
    (["verify", "{sub}", "--seed", "-1"], "--seed -1: must be in [0, 2**32)"),
    (["verify", "{suite}"], "verify takes one submission"),
    (["validate", "{missing}"], "missing.yaml: no such file"),
    (["render", "{missing}"], "missing.yaml: no suite.yaml found"),
])
def test_leaderboard_bad_input_is_one_line(tiny, tmp_path, cli, args, match):
    subs = {"sub": tiny["path"], "suite": tiny["suite_dir"], "file": tiny["path"],
            "missing": tmp_path / "missing.yaml"}
    args = [a.format(**subs) for a in args]
    if args[0] == "run":
        args[1:1] = ["--suite", str(tiny["suite_dir"])]
        args += [] if "--store" in args else ["--store", str(tiny["store"])]
    rc, _, err = cli("leaderboard", *args)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert match in err
