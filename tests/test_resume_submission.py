"""``leaderboard run --from-submission``: a method-2 submission's runs put back into a store
(``leaderboard.capacity.resume``).  The board's own linear-mamba file is the reference: its
runs rebuilt make, through ``submit``'s path, the same points and cards the file holds; a
second import adds nothing; under a stricter rule the search asks only for runs the file
lacks; the user's mistakes are refused in one line."""
import contextlib
import json

import pytest

from recallbench import leaderboard as lb
from recallbench.api.errors import ConfigError
from recallbench.cli.main import main
from recallbench.law import run_card
from recallbench.leaderboard.capacity import resume
from recallbench.leaderboard.submission import build_submission
from recallbench.leaderboard.yaml_io import read_yaml_data
from recallbench.runs.store import read_store

SUITE = "leaderboards/cpu-v4"
FILE = f"{SUITE}/submissions/linear-mamba.yaml"


@pytest.fixture(scope="module")
def board():
    return lb.load_suite(SUITE), read_yaml_data(FILE, "submission")


def test_the_runs_rebuilt_make_the_submission_again(board, tmp_path):
    suite, sub = board
    added, held = resume.import_runs(resume.checked(FILE, suite), "linear-mamba", tmp_path / "s")
    assert (added, held) == (sum(len(b["points"]) for b in sub["budgets"]), 0)
    records = read_store(tmp_path / "s").records
    assert all(r["imported_from"] == {"submission_sha256": sub["sha256"]} for r in records)
    again = build_submission(suite, records, "linear-mamba")
    assert again["model"] == sub["model"] and again["environment"] == sub["environment"]
    for old, new in zip(sub["budgets"], again["budgets"], strict=True):
        assert new["points"] == old["points"]  # counts, lr searches, costs, in search order
        assert new["card"] == old["card"]  # replayed: the same cells make the same card
    # a second import adds nothing: the store holds every config hash already
    assert resume.import_runs(sub, "linear-mamba", tmp_path / "s") == (0, added)
    assert len(read_store(tmp_path / "s").records) == added


def test_a_stricter_rule_asks_only_for_runs_the_file_lacks(board, tmp_path, monkeypatch):
    """With a target of 1.2 the file's D32-N4 card is unfinished: the resumed search's first
    request is one new batch (a run per suite seed, none of the file's hashes)."""
    suite, sub = board
    resume.import_runs(sub, "linear-mamba", tmp_path / "s")
    held = {r["config_hash"] for r in read_store(tmp_path / "s").records}
    asked = []

    class Asked(Exception):
        pass

    @contextlib.contextmanager
    def fake_trained(store, workers=1, say=None, executor=None):
        def run_cell(cfgs, limit=None):
            asked.extend(cfgs)
            raise Asked
        yield {r["config_hash"]: r for r in read_store(store).records}, run_cell

    # a target stricter than any a suite may set, so that the file's card is unfinished
    monkeypatch.setattr(run_card, "SPREAD_RANGE", (1.1, 2.0))
    monkeypatch.setitem(suite.data["capacity"], "max_spread", 1.2)
    monkeypatch.setattr("recallbench.runs.capacity.trained", fake_trained)
    from recallbench.api.canonical import config_hash
    from recallbench.leaderboard.capacity import method2 as v2

    with pytest.raises(Asked):
        v2.run(suite, "linear-mamba", suite.budgets[0], sub["budgets"][0]["config"],
               tmp_path / "s", 1, lambda m: None)
    assert len(asked) == len(suite.seeds)
    assert not {config_hash(c) for c in asked} & held
    assert len({c["task"]["num_facts"] for c in asked}) == 1


def test_the_command_imports_then_trains_nothing_it_holds(tmp_path, capsys):
    store = tmp_path / "s"
    assert main(["leaderboard", "run", "--suite", SUITE, "--adapter", "linear-mamba",
                 "--store", str(store), "--budget", "D32-N4", "--from-submission", FILE]) == 0
    out = capsys.readouterr().out
    assert "16 run(s) put into" in out and "D32-N4 measured" in out
    lines = (store / "results.jsonl").read_text().splitlines()
    assert len(lines) == 16 and all("imported_from" in json.loads(x) for x in lines)


@pytest.mark.parametrize("argv, needle", [
    (["--adapter", "gla"], "holds adapter linear-mamba's runs, not --adapter gla's"),
    (["--adapter", "linear-mamba", "--dry-run"], "--from-submission with --dry-run"),
    (["--adapter", "linear-mamba", "--shape", "key=8"], "the file's shape is the adapter's "
     "default; run with the same --shape (none)"),
])
def test_mistakes_are_one_line(argv, needle, tmp_path, capsys):
    code = main(["leaderboard", "run", "--suite", SUITE, "--store", str(tmp_path / "s"),
                 "--from-submission", FILE, *argv])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


def test_a_file_that_is_not_a_valid_submission_is_refused(board, tmp_path):
    suite, _ = board
    with pytest.raises(ConfigError, match="no such file"):
        resume.checked(tmp_path / "none.yaml", suite)
    bad = tmp_path / "x.yaml"
    bad.write_text(open(FILE).read().replace("correct: 4301", "correct: 4401", 1))
    with pytest.raises(ConfigError, match="sha256"):
        resume.checked(bad, suite)
    with pytest.raises(ConfigError, match="not a method-2 capacity suite"):
        resume.checked(FILE, lb.load_suite("leaderboards/cpu-v3"))


def test_a_reseeding_made_again_from_its_own_runs_trains_nothing(tmp_path, capsys):
    """verify --reseed --from-reseeding: the board's linear-mamba re-seeding rebuilt into a
    store makes the same document again (the same points and cards, the same seeds)."""
    old = f"{SUITE}/reseeds/linear-mamba.yaml"
    out = tmp_path / "again.yaml"
    assert main(["leaderboard", "verify", FILE, "--reseed", "--store", str(tmp_path / "s"),
                 "--from-reseeding", old, "--write", str(out)]) == 0
    printed = capsys.readouterr().out
    held = len((tmp_path / "s" / "results.jsonl").read_text().splitlines())
    assert f"{held} run(s) put into" in printed and "reseed ok: 2 of 2" in printed
    a, b = read_yaml_data(old, "re-seeding"), read_yaml_data(out, "re-seeding")
    assert b["reseed_of"] == a["reseed_of"]
    for x, y in zip(a["budgets"], b["budgets"], strict=True):
        assert y["points"] == x["points"] and y["card"] == x["card"]


def test_a_reseeding_is_refused_where_a_submission_goes_and_with_other_seeds(tmp_path, capsys):
    old = f"{SUITE}/reseeds/linear-mamba.yaml"
    code = main(["leaderboard", "verify", FILE, "--reseed", "--store", str(tmp_path / "s"),
                 "--from-reseeding", FILE])
    err = capsys.readouterr().err
    assert code == 2 and "not a re-seeding (it has no reseed_of)" in err
    code = main(["leaderboard", "verify", FILE, "--reseed", "--store", str(tmp_path / "s"),
                 "--seeds", "4,5", "--from-reseeding", old])
    err = capsys.readouterr().err
    assert code == 2 and "made with seeds 2,3; leave --seeds out" in err
    assert not (tmp_path / "s").exists()
