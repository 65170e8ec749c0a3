"""Re-seedings kept on a method-2 board (``verify --reseed --write``, ``<suite>/reseeds/``):
written, checked like a submission, shown beside the submission by ``render``; forged or
misplaced ones refused in one line by ``validate`` and ``render``."""
import shutil

import pytest

from recallbench import leaderboard as lb
from recallbench.leaderboard.capacity import reseed_docs
from recallbench.leaderboard.submission import content_sha256, write_submission
from test_capacity_suite_v2 import board2  # noqa: F401  (the module's fixture)
from test_leaderboard_tamper import _assert_one_line


@pytest.fixture(scope="module")
def reseeded(board2, tmp_path_factory):  # noqa: F811
    """A copy of the board with the designed model's card re-seeded (seeds 2, 3) and kept."""
    from recallbench.cli.main import main

    _, path, _, _ = board2
    tmp = tmp_path_factory.mktemp("reseeded")
    d = tmp / path.parent.parent.name
    shutil.copytree(path.parent.parent, d)
    out = d / reseed_docs.RESEEDS_DIR / "designed.yaml"
    assert main(["leaderboard", "verify", str(d / "submissions" / path.name), "--reseed",
                 "--store", str(tmp / "s"), "--write", str(out)]) == 0
    return d, out, lb.read_yaml_data(out)


def _forge(d, doc, name="designed.yaml"):
    out = d / reseed_docs.RESEEDS_DIR / name
    write_submission({**doc, "sha256": content_sha256(doc)}, out)
    return out


def test_the_re_seeding_validates_and_the_board_shows_it(reseeded, cli):
    d, out, doc = reseeded
    assert doc["reseed_of"]["seeds"] == [2, 3] and doc["reseed_of"]["submission_seeds"] == [0, 1]
    seeds = {p["seed"] % 1000 for b in doc["budgets"] for p in b["points"]}
    assert seeds == {2, 3}
    rc, text, err = cli("leaderboard", "validate", str(d))
    assert rc == 0, err
    assert "re-seeding of designed.yaml with seeds 2, 3" in text
    rc, _, err = cli("leaderboard", "render", str(d))
    assert rc == 0, err
    readme = (d / "README.md").read_text()
    section = readme[readme.index("## Re-seeded cards"):readme.index("## How to read")]
    assert "| designed | " in section and "0, 1: " in section and "2, 3: " in section
    assert "| yes | 2 of 2 |" in section  # the designed circuit: 6.61 and 6.51, both measured
    assert "Re-seeded cards" in (d / "index.html").read_text()


@pytest.mark.parametrize("case, match", [
    pytest.param("card", "card", marks=pytest.mark.slow),
    ("seeds", "reseed_of.seeds: 0 is one of the submission's seeds"),
    pytest.param("unknown", "not on this board", marks=pytest.mark.slow),
    pytest.param("missing", "not a re-seeding", marks=pytest.mark.slow),
])
def test_a_forged_re_seeding_is_refused_by_validate_and_render(reseeded, cli, tmp_path,
                                                               case, match):
    d0, _, doc = reseeded
    d = tmp_path / d0.name
    shutil.copytree(d0, d)
    doc = {**doc, "reseed_of": dict(doc["reseed_of"])}
    if case == "card":  # the re-seeded card's N50 moved: the points no longer make it
        b = dict(doc["budgets"][0])
        b["card"] = {**b["card"], "n50": {**b["card"]["n50"], "value": 99.0}}
        doc["budgets"] = [b] + doc["budgets"][1:]
    elif case == "seeds":
        doc["reseed_of"]["seeds"] = [0, 3]
    elif case == "unknown":
        doc["reseed_of"]["submission_sha256"] = "0" * 64
    else:
        del doc["reseed_of"]
    _forge(d, doc)
    rc, _, err = cli("leaderboard", "validate", str(d))
    _assert_one_line(rc, err, "reseeds/designed.yaml", match)
    if case == "seeds":  # render reads the board through the same checks
        rc, _, err = cli("leaderboard", "render", str(d), "--no-plot")
        _assert_one_line(rc, err, "reseeds/designed.yaml", match)


@pytest.mark.slow
def test_a_re_seeding_among_the_submissions_is_refused(reseeded, cli, tmp_path):
    d0, out, _ = reseeded
    d = tmp_path / d0.name
    shutil.copytree(d0, d)
    shutil.copy(out, d / "submissions" / "designed-reseeded.yaml")
    rc, _, err = cli("leaderboard", "validate", str(d))
    assert rc == 2 and "belongs in the suite's reseeds/ folder" in err


@pytest.mark.slow
def test_write_to_an_existing_file_is_refused_before_training(reseeded, cli, tmp_path):
    d, out, _ = reseeded
    rc, _, err = cli("leaderboard", "verify", str(d / "submissions" / "designed.yaml"),
                     "--reseed", "--store", str(tmp_path / "s2"), "--write", str(out))
    _assert_one_line(rc, err, "--write", "exists")
    assert not (tmp_path / "s2").exists()
    rc, _, err = cli("leaderboard", "verify", str(d / "submissions" / "designed.yaml"),
                     "--write", str(tmp_path / "x.yaml"))
    _assert_one_line(rc, err, "--write", "go with --reseed")


def test_the_board_marks_a_card_whose_fit_lies_outside_the_simulated_shapes():
    """cpu-v4's mamba2 D32-N4 (fitted slope 0.96, below the simulated 1.0) carries † in the
    ranking and in the re-seeding table; linear-mamba's cards (inside) do not."""
    from pathlib import Path

    from recallbench import leaderboard as lb
    from recallbench.leaderboard.capacity import board2 as b2, reseed_docs as rd

    suite = lb.load_suite("leaderboards/cpu-v4")
    subs = [(Path(f"x/{n}.yaml"), lb.read_yaml_data(f"leaderboards/cpu-v4/submissions/{n}.yaml"))
            for n in ("mamba2", "linear-mamba")]
    rows = {(r["model"], r["budget"]): r for r in b2.card_rows(suite, subs)}
    for r in b2.ranked(list(rows.values()), "D32-N4"):
        marked = b2.ranked_cells(r)[4].endswith(" †")
        assert marked == (r["model"] == "mamba2"), b2.ranked_cells(r)
    assert rows[("mamba2", "D32-N4")]["card"]["simulated"]["outside"] == ["slope"]
    assert "†: the card's fit lies outside the shapes" in b2.how_to_read(1.3)
    card = dict(rows[("mamba2", "D32-N4")]["card"])
    assert rd._n50([0, 1], card).endswith(" †")
    card["simulated"] = {**card["simulated"], "outside": []}
    assert not rd._n50([0, 1], card).endswith("†")


def test_a_budget_the_submission_lacks_is_refused_before_training(reseeded, cli, tmp_path):
    d, _, _ = reseeded
    rc, _, err = cli("leaderboard", "verify", str(d / "submissions" / "designed.yaml"),
                     "--reseed", "--budget", "D32-N4", "--store", str(tmp_path / "s0"))
    _assert_one_line(rc, err, "--budget D32-N4", "not a budget of the submission (it has "
                     "D32-N8)")
    assert not (tmp_path / "s0").exists()
    rc, _, err = cli("leaderboard", "verify", str(d / "submissions" / "designed.yaml"),
                     "--budget", "D32-N8")
    _assert_one_line(rc, err, "--budget", "go with --reseed")


@pytest.mark.slow
def test_budget_re_seeds_one_card_and_the_board_shows_that_one(cli, tmp_path):
    """``verify --reseed --budget D32-N4`` on a two-budget board (the designed model): one
    card trained, a re-seeding naming that budget that validates and renders as one row; a
    forged ``reseed_of.budgets`` refused in one line."""
    import yaml

    from test_capacity_suite_v2 import _suite_dir
    from test_capacity_suite import V3

    d = _suite_dir(tmp_path)
    data = yaml.safe_load((d / "suite.yaml").read_text())
    data["budgets"] = yaml.safe_load((V3 / "suite.yaml").read_text())["budgets"]
    (d / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    store = tmp_path / "store"
    assert cli("leaderboard", "run", "--suite", str(d), "--adapter", "designed", "--store",
               str(store))[0] == 0
    assert cli("submit", "--suite", str(d), "--store", str(store),
               "--model-name", "designed")[0] == 0
    sub = d / "submissions" / "designed.yaml"
    names = [b["name"] for b in lb.read_yaml_data(sub)["budgets"]]
    assert names == ["D32-N4", "D32-N8"]

    out = d / reseed_docs.RESEEDS_DIR / "designed.yaml"
    rc, text, err = cli("leaderboard", "verify", str(sub), "--reseed", "--budget", "D32-N4",
                        "--store", str(tmp_path / "s"), "--write", str(out))
    assert rc == 0, err
    assert "designed D32-N4: " in text and "designed D32-N8" not in text
    doc = lb.read_yaml_data(out)
    assert doc["reseed_of"]["budgets"] == ["D32-N4"]
    assert [b["name"] for b in doc["budgets"]] == ["D32-N4"]
    trained = {r["config"]["model"]["d_state"] for r in lb.load_store_records([tmp_path / "s"])}
    assert trained == {4}
    rc, text, err = cli("leaderboard", "validate", str(d))
    assert rc == 0, err
    rc, _, err = cli("leaderboard", "render", str(d), "--no-plot")
    assert rc == 0, err
    readme = (d / "README.md").read_text()
    section = readme[readme.index("## Re-seeded cards"):readme.index("## How to read")]
    assert "| designed | D32-N4 |" in section and "| designed | D32-N8 |" not in section

    for forged, match in ((["D32-N8"], "suite_recipe_sha256 differs"),
                          (["D32-N16"], "reseed_of.budgets must name")):
        _forge(d, {**doc, "reseed_of": {**doc["reseed_of"], "budgets": forged}})
        rc, _, err = cli("leaderboard", "validate", str(d))
        _assert_one_line(rc, err, "reseeds/designed.yaml", match)
