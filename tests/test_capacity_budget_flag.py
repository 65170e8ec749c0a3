"""``leaderboard run --budget NAME`` on a capacity suite: only the named budgets' cards are
searched (the rest can run elsewhere, into their own store); unknown names and grid suites
refused in one line; a submission still needs every budget."""
import json

import pytest
import yaml

from test_capacity_suite import V3
from test_leaderboard_tamper import _assert_one_line


def _two_budget_suite(root):
    d = root / "cap-two"
    (d / "submissions").mkdir(parents=True)
    data = yaml.safe_load((V3 / "suite.yaml").read_text())
    data.pop("retired", None)
    data.update(name="cap-two", capacity={"method": 2, "work_budget_mtok": 40, "max_batches": 8})
    (d / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    return d


@pytest.mark.slow
def test_one_budget_runs_alone_and_the_other_is_said_to_be_left(cli, tmp_path):
    d, store = _two_budget_suite(tmp_path), tmp_path / "store"
    names = [b["name"] for b in yaml.safe_load((d / "suite.yaml").read_text())["budgets"]]
    assert len(names) == 2
    rc, out, err = cli("leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                       "--store", str(store), "--budget", names[0])
    assert rc == 0, err
    assert f"not run here: {names[1]} (`--budget NAME` searches it" in out
    assert "budgets left" not in out  # the store may hold it: the line does not say it is left
    states = {json.loads(line)["config"]["model"]["d_state"]
              for line in (store / "results.jsonl").read_text().splitlines()}
    assert len(states) == 1  # only the first budget's model trained
    rc, _, err = cli("submit", "--suite", str(d), "--store", str(store), "--model-name", "x")
    assert rc == 2 and names[1] in err and "Traceback" not in err
    other = tmp_path / "other"  # the second budget elsewhere, into its own store
    rc, out, err = cli("leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                       "--store", str(other), "--budget", names[1])
    assert rc == 0, err
    rc, out, err = cli("submit", "--suite", str(d), "--store", str(store), str(other),
                       "--model-name", "x")
    assert rc == 0, err
    rc, out, err = cli("leaderboard", "validate", str(d))
    assert rc == 0 and "ok " in out, err


def test_an_unknown_budget_and_a_grid_suite_are_refused(cli, tmp_path):
    d = _two_budget_suite(tmp_path)
    rc, _, err = cli("leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                     "--store", str(tmp_path / "s"), "--budget", "D99")
    _assert_one_line(rc, err, "--budget 'D99'", "is not allowed: one of D32-N4, D32-N8")
    grid = tmp_path / "cpu-v2"  # an open grid suite (the committed one is retired)
    grid.mkdir()
    data = yaml.safe_load((V3.parent / "cpu-v2" / "suite.yaml").read_text())
    data.pop("retired")
    (grid / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    rc, _, err = cli("leaderboard", "run", "--suite", str(grid), "--adapter", "designed",
                     "--store", str(tmp_path / "s"), "--budget", "x")
    _assert_one_line(rc, err, "--budget", "grid suite")
    assert not (tmp_path / "s").exists()
