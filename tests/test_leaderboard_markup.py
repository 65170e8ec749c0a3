"""What a submission or a suite may put into the generated README.md: file names are
plain names, and every interpolated string is escaped so that none can open markup, raw
HTML, a link, a table cell or close the code span it is shown in.

The refusals are checked through `leaderboard validate`, `leaderboard render` and
`submit` (one line naming the file, exit 2); the escaping by rendering README.md with
hostile strings and parsing it as CommonMark with tables.
"""
from __future__ import annotations

import copy
import html
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import one_line_error

from recallbench import leaderboard as lb
from recallbench.leaderboard.markdown import code, md

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "leaderboards" / "cpu-small"
BASE = SUITE / "submissions" / "mamba.yaml"
ORIGINAL = lb.read_yaml_data(BASE)
HOSTILE_FILE = "a`<img src=x onerror=alert(1)>`b.yaml"


# -- file names ---------------------------------------------------------------------------

BAD_NAMES = [HOSTILE_FILE, "a b.yaml", "-x.yaml", "x..y.yaml", "a*b.yaml", "x\ny.yaml",
             "_x.yaml", "x" * 65 + ".yaml"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=range(len(BAD_NAMES)))
def test_an_unsafe_file_name_is_refused_by_validate_and_render(board, cli, name):
    path = board / "submissions" / name
    shutil.copy(BASE, path)
    shown = repr(name)
    rc, out, err = cli("leaderboard", "validate", str(path))
    one_line_error(rc, err, shown, "submission file name is a plain name")
    rc, out, err = cli("leaderboard", "render", str(board))
    one_line_error(rc, err, shown, "nothing rendered")
    assert not (board / lb.README).exists()


def test_submit_refuses_an_unsafe_out_name_before_reading_the_store(tmp_path, cli):
    suite = tmp_path / "cpu-v2"
    suite.mkdir()
    data = yaml.safe_load((REPO / "leaderboards" / "cpu-v2" / "suite.yaml").read_text())
    data.pop("retired", None)  # a retired suite takes no submission: refused before --out
    (suite / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    rc, _, err = cli("submit", "--suite", str(suite), "--store", str(tmp_path / "none"),
                     "--model-name", "m", "--out", str(tmp_path / HOSTILE_FILE))
    one_line_error(rc, err, "--out", repr(HOSTILE_FILE), "plain name")


@pytest.mark.parametrize("name", ["mamba.yaml", "mamba-v2.1+x_y.yml", "A" * 64 + ".yaml"])
def test_plain_file_names_pass(name):
    assert lb.checks.check_file_name(Path("s") / name).name == name


# -- README.md escaping -------------------------------------------------------------------

def _parse(text: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable("table").render(text)


HOSTILE = {
    "title": "T <script>alert(1)</script> **bold** [link](http://x) `c",
    "retired": "<img src=x onerror=alert(2)> | pipe",
    "description": "![i](http://x/i.png)\n# heading\n<iframe src=x></iframe> _e_ *e* ~~s~~",
    "model": "m|<b>x</b>|[l](http://x)",
    "adapter": "`a`<img src=y>",
    "library": {"name": "<svg onload=alert(3)>", "version": "1.0 `|`", "class": "*C* [k]"},
}


@pytest.fixture
def hostile(tmp_path):
    d = tmp_path / "cpu-small"
    d.mkdir()
    data = yaml.safe_load((SUITE / "suite.yaml").read_text())
    data.update({k: HOSTILE[k] for k in ("title", "retired", "description")})
    (d / "suite.yaml").write_text(yaml.safe_dump(data))
    suite = lb.load_suite(d)
    sub = copy.deepcopy(ORIGINAL)
    sub["model"].update(name=HOSTILE["model"], adapter=HOSTILE["adapter"],
                        library=HOSTILE["library"])
    rows = lb.leaderboard_rows(suite, [(d / "submissions" / HOSTILE_FILE, sub)])
    return suite, rows


def test_readme_escapes_every_interpolated_string(hostile):
    suite, rows = hostile
    text = lb.render_markdown(suite, rows)
    out = _parse(text)
    for tag in ("<script", "<img", "<iframe", "<svg", "<b>", "<a ", "<em", "<strong>x",
                "<del", "<h1>heading", "<h2"):
        assert tag not in out.replace("<strong>Retired</strong>", "").replace(
            '<img src="accuracy_vs_state.png"', ""), tag
    # the file name is one code span, whole; every other string is literal text
    assert f"<code>{html.escape(HOSTILE_FILE, quote=False)}</code>" in out
    for s in (HOSTILE["title"], HOSTILE["retired"], HOSTILE["model"], HOSTILE["adapter"],
              HOSTILE["library"]["name"], HOSTILE["library"]["class"]):
        assert html.escape(s, quote=False) in out.replace("&quot;", '"'), s
    # one table row per budget, each with exactly the header's cells
    n_head = out.count("<th>")
    assert n_head > 10 and out.count("<tr>") == len(rows) + 1
    assert out.count("<td>") == n_head * len(rows)
    assert out.count("<h1>") == 1


@pytest.mark.parametrize("text", [HOSTILE_FILE, "`", "``x`", "a ``` b", "x` ", "plain.yaml"])
def test_a_code_span_cannot_be_closed_by_its_content(text):
    out = _parse(f"- {code(text)}: after\n")
    assert out.count("<code>") == 1
    assert f"<code>{html.escape(' '.join(text.split()), quote=False)}</code>: after" in out


def test_md_leaves_plain_text_readable():
    assert md("d_model=16, d_state=4") == "d_model=16, d_state=4"
    assert md("2.1e+03") == "2.1e+03" and md("0.998†") == "0.998†"
    assert md("1. x") == "1\\. x" and md("- x") == "\\- x"
    assert md("a\n# b") == "a # b"
