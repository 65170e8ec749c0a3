"""Tampering with copies of the committed submissions: every tampered copy is refused by
`leaderboard validate` and by `leaderboard render`, each in one line naming the file, and
the untouched submissions still validate (and render to the committed README).

Each case copies leaderboards/cpu-small's suite.yaml into tmp_path, writes one tampered
copy of the committed mamba submission there (next to the untouched original for the
duplicate cases), and runs both commands in-process.
"""
from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import pytest

from recallbench import leaderboard as lb
from recallbench.api.canonical import config_hash

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "leaderboards" / "cpu-small"
BASE = "mamba.yaml"
ORIGINAL = lb.read_yaml_data(SUITE / "submissions" / BASE)


def _with_original(board: Path) -> Path:
    shutil.copy(SUITE / "submissions" / BASE, board / "submissions" / BASE)
    return board / "submissions" / BASE


def _data(edit, rehash: bool = True) -> str:
    d = copy.deepcopy(ORIGINAL)
    edit(d)
    if rehash:
        d["sha256"] = lb.content_sha256(d)
    return lb.dump_yaml(d)


def _text(edit) -> str:
    return edit((SUITE / "submissions" / BASE).read_text())


def _points(d):
    return [p for b in d["budgets"] for p in b["points"]]


def _forge_perfect(d):
    for p in _points(d):
        p.update(correct=p["total"], correct_topk=p["total"], accuracy=1.0)


def _renamed_runs(d):
    d["model"]["name"] = "mamba-again"  # the same runs under another name


def _copied_counts(d):
    """mamba's counts under another (consistently re-hashed) model config."""
    d["model"]["name"] = "mamba-wide"
    d["model"]["config"]["d_conv"] = 4
    d["model"]["config_hash"] = config_hash({"model": d["model"]["config"]})
    for b in d["budgets"]:
        b["config"]["model"]["d_conv"] = 4
        for p in b["points"]:
            p["config_hash"] = config_hash(lb.merge_config(b["config"], p.get("delta") or {}))


def _other_adapter(d):
    _copied_counts(d)
    d["model"]["adapter"] = d["model"]["config"]["adapter"] = "not-installed"
    d["model"]["config_hash"] = config_hash({"model": d["model"]["config"]})
    for b in d["budgets"]:
        b["config"]["model"]["adapter"] = "not-installed"
        for p in b["points"]:
            p["config_hash"] = config_hash(lb.merge_config(b["config"], p.get("delta") or {}))


def _huge(d):
    _points(d)[0].update(correct=10 ** 400)


# name -> (file content, what the one-line refusal says)
CASES = {
    "forged-state-size": (lambda: _data(lambda d: d["budgets"][0].update(state_size=8)),
                          "state_size 8 is not the adapter's 512"),
    "forged-state-bits": (lambda: _data(lambda d: d["budgets"][0].update(state_bits=4)),
                          "state_bits 4 is not 32"),
    "forged-accuracies": (lambda: _data(_forge_perfect), "does not match the scorer's"),
    "forged-info-bits": (lambda: _data(lambda d: _points(d)[0].update(info_bits=2.0)),
                         "info_bits 2.0 is not the task's 24"),
    "forged-one-accuracy": (lambda: _data(lambda d: _points(d)[3].update(accuracy=0.9)),
                            "accuracy does not equal correct/total"),
    "forged-score": (lambda: _data(lambda d: d["budgets"][0]["score"]["mean"].update(capacity=99.0)),
                     "score.mean.capacity = 99.0 does not match"),
    "forged-library": (lambda: _data(lambda d: d["model"]["library"].update(name="flash-attn")),
                       "model.library.name is not 'mamba-ssm'"),
    "duplicated-file": (lambda: (SUITE / "submissions" / BASE).read_text(), "duplicate of"),
    "same-runs-renamed": (lambda: _data(_renamed_runs), "same model config"),
    "copied-counts": (lambda: _data(_copied_counts), "same counts at every point"),
    "adapter-not-installed": (lambda: _data(_other_adapter), "is not installed here"),
    "edited-counts": (lambda: _data(lambda d: _points(d)[0].update(correct=8000), rehash=False),
                      "content sha256 mismatch"),
    "counts-10**400": (lambda: _data(_huge), "correct: must be an integer count"),
    "counts-10**400-raw": (lambda: _text(lambda t: t.replace("correct: 949", f"correct: {10 ** 400}", 1)),
                           "content sha256 mismatch"),
    "integer-of-5000-digits": (lambda: _text(lambda t: t.replace("correct: 949", "correct: " + "9" * 5000, 1)),
                               "unreadable value"),
    "deep-nesting": (lambda: "a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than"),
    "nan": (lambda: _text(lambda t: t.replace("info_bits: 24.0", "info_bits: .nan", 1)),
            "not plain data"),
    "infinity-rehashed": (lambda: _data(lambda d: d["budgets"][0]["score"]["mean"].update(s_eff=1e400),
                                        rehash=False), "not plain data"),
    "extra-key": (lambda: _data(lambda d: d.update(bonus=1)), "unknown field 'bonus'"),
    "extra-point-key": (lambda: _data(lambda d: _points(d)[0].update(verified=True)),
                        "unknown field 'verified'"),
    "wrong-schema": (lambda: _data(lambda d: d.update(schema="recallbench.submission/0")), "schema must be"),
    "budgets-a-number": (lambda: _data(lambda d: d.update(budgets=5)), "budgets: must be a non-empty list"),
    "environment-a-list": (lambda: _data(lambda d: d.update(environment=[1])), "environment: must be a mapping"),
    "lr-as-text": (lambda: _data(lambda d: _points(d)[0].update(lr="0.003")), "lr: must be a finite number"),
    "score-a-list": (lambda: _data(lambda d: d["budgets"][0].update(score=[1, 2])), "score: must be a mapping"),
    "mixed-key-types": (lambda: _data(lambda d: d["model"]["config"]["options"].update({1: 2, "a": 3}),
                                      rehash=False), "not plain data"),
    "non-string-key": (lambda: _data(lambda d: d["model"]["config"]["options"].update({1: 2})),
                       "model.config_hash does not match"),
    "python-tag": (lambda: _text(lambda t: t.replace("schema: recallbench.submission/1",
                                                     "schema: !!python/object/apply:os.system ['true']")),
                   "only plain YAML data is allowed"),
    "alias-bomb": (lambda: "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", "aliases are not allowed"),
    "binary": (lambda: b"\x89PNG\r\n\x1a\n\xff\xfe\x00" * 50, "not UTF-8 text"),
    "over-1-MiB": (lambda: "x: " + "a" * (lb.MAX_BYTES + 1) + "\n", "larger than the 1048576-byte limit"),
    "a-list": (lambda: "- 1\n- 2\n", "must be a mapping"),
}


def _write(board: Path, content) -> Path:
    path = board / "submissions" / "tampered.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _assert_one_line(rc: int, err: str, name: str, match: str | None = None) -> str:
    assert rc == 2, err
    assert "Traceback" not in err and len(err.encode()) < 8192
    assert err.count("\n") == 1 and err.startswith("recallbench: error: "), err
    assert name in err, err
    if match:
        assert match in err, err
    return err


@pytest.mark.parametrize("case", list(CASES))
def test_tampered_copy_is_refused_by_validate_and_render(board, cli, case):
    make, match = CASES[case]
    if match.startswith("duplicate") or match.startswith("same"):
        _with_original(board)
    path = _write(board, make())
    rc, out, err = cli("leaderboard", "validate", str(path))
    _assert_one_line(rc, err, str(path), match)
    assert out.startswith("INVALID ") and str(path) in out
    rc, out, err = cli("leaderboard", "render", str(board))
    _assert_one_line(rc, err, "tampered.yaml", match)
    assert "nothing rendered" in err and not (board / lb.README).exists()


def test_a_folder_named_like_a_submission_is_refused(board, cli):
    path = board / "submissions" / "folder.yaml"
    path.mkdir()
    rc, _, err = cli("leaderboard", "validate", str(path))
    _assert_one_line(rc, err, str(path), "not a regular file")
    rc, _, err = cli("leaderboard", "render", str(board))
    _assert_one_line(rc, err, "folder.yaml", "not a regular file")


def test_symlinked_submissions_folder_is_refused(board, tmp_path, cli):
    _with_original(board)
    elsewhere = tmp_path / "elsewhere"
    (board / "submissions").rename(elsewhere)
    os.symlink(elsewhere, board / "submissions")
    path = board / "submissions" / BASE
    rc, _, err = cli("leaderboard", "validate", str(path))
    _assert_one_line(rc, err, str(path), "symbolic link")
    rc, _, err = cli("leaderboard", "render", str(board))
    _assert_one_line(rc, err, "submissions", "symbolic link")
    rc, _, err = cli("leaderboard", "validate", str(board))
    _assert_one_line(rc, err, "submissions", "symbolic link")


def test_symlinked_submission_file_is_refused(board, tmp_path, cli):
    target = tmp_path / "real.yaml"
    target.write_text(_data(_renamed_runs))
    path = board / "submissions" / "linked.yaml"
    os.symlink(target, path)
    rc, _, err = cli("leaderboard", "validate", str(path))
    _assert_one_line(rc, err, str(path), "symbolic links are not accepted")


def test_duplicates_name_each_other(board, cli):
    _with_original(board)
    path = _write(board, _data(_renamed_runs))
    rc, out, _ = cli("leaderboard", "validate", str(board))
    assert rc == 2
    assert f"INVALID {path}: duplicate of {BASE}" in out
    assert f"INVALID {board / 'submissions' / BASE}: duplicate of tampered.yaml" in out


def test_perfect_counts_alone_are_not_a_duplicate():
    a = copy.deepcopy(ORIGINAL)
    _forge_perfect(a)
    b = copy.deepcopy(a)
    _copied_counts(b)
    assert lb.board.duplicates([(Path("a.yaml"), a), (Path("b.yaml"), b)]) == {}
    assert lb.board.duplicates([(Path("a.yaml"), ORIGINAL), (Path("b.yaml"), _copied(_copied_counts))])


def _copied(edit):
    d = copy.deepcopy(ORIGINAL)
    edit(d)
    return d


def test_state_is_recomputed_by_the_adapter_not_read_from_the_file():
    from recallbench.leaderboard.recompute import expected_state

    for b in ORIGINAL["budgets"]:
        assert expected_state(b["config"]["model"], "x") == (b["state_size"], b["state_bits"])
    wide = {**ORIGINAL["budgets"][0]["config"]["model"], "expand": 4}
    assert expected_state(wide, "x") == (2 * ORIGINAL["budgets"][0]["state_size"], 32)


def test_untouched_committed_submissions_still_validate(tmp_path):
    d = tmp_path / "cpu-small"
    shutil.copytree(SUITE, d)
    entries = lb.check_files([d])
    assert [e.error for e in entries] == [None] * len(entries)
    assert {e.path.name for e in entries} == {p.name for p in lb.submission_files(SUITE)}


@pytest.mark.slow
def test_rendering_the_committed_suite_is_unchanged(tmp_path, cli):
    d = tmp_path / "cpu-small"
    shutil.copytree(SUITE, d)
    (d / lb.README).unlink()
    (d / lb.PLOT).unlink()
    rc, _, err = cli("leaderboard", "render", str(d))
    assert rc == 0, err
    assert (d / lb.README).read_bytes() == (SUITE / lb.README).read_bytes()
    assert (d / lb.PLOT).read_bytes() == (SUITE / lb.PLOT).read_bytes()
