"""The leaderboard's web page (index.html) and figure.

Fast tests build the page and the figure from the committed cpu-small submissions read as
data (page_html and build_figure validate nothing: render does, and one test checks that a
board with a refused submission gets no page).  The browser tests render a copy of the
committed suite with `leaderboard render` and open the page in headless Chromium
(``--dump-dom`` after the script ran, ``--screenshot``); they are skipped, with the reason,
where Chromium is not installed (CI installs it).
"""
from __future__ import annotations

import base64
import copy
import importlib
import math
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from recallbench import leaderboard as lb
from recallbench.leaderboard import page
from recallbench.leaderboard.grid import page as grid_page, plot
from recallbench.leaderboard.grid import readme as grid_readme

# the module: the package's own `render` is the function
render_mod = importlib.import_module("recallbench.leaderboard.render")

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "leaderboards" / "cpu-small"
SUBS = [(f, lb.read_yaml_data(f)) for f in lb.submission_files(SUITE)]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed "
                                    "(apt-get install chromium; CI installs it)")
EVIL = "<script>document.title='pwned'</script>"


def _suite():
    return lb.load_suite(SUITE)


def _subs():
    return [(f, copy.deepcopy(s)) for f, s in SUBS]


def _page(subs, png: bytes | None = b"\x89PNG\r\n\x1a\n") -> str:
    suite = _suite()
    return grid_page.page_html(suite, lb.leaderboard_rows(suite, subs), subs, png)


def _evil_subs():
    subs = _subs()
    m = subs[0][1]["model"]
    m["name"] = EVIL
    m["description"] = "</p>" + EVIL
    m["url"] = "javascript:alert(1)"
    subs[0][1]["budgets"][0]["state_note"] = EVIL
    return subs


# -- the page's text ----------------------------------------------------------------------

def test_submission_text_is_escaped_and_only_the_page_script_remains():
    text = _page(_evil_subs())
    assert text.count("<script>") == 1 and EVIL not in text  # the page's own script only
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in text
    assert "javascript:" not in text  # a url that is not http(s) is not a link
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', text).group(1)
    assert "default-src &#x27;none&#x27;" in csp and "script-src &#x27;sha256-" in csp


def test_page_has_a_row_and_a_card_per_submission_and_relative_links():
    text = _page(_subs())
    rows = re.findall(r'<tr data-file="([^"]+)"', text)
    assert sorted(rows) == sorted(f.name for f, _ in SUBS)
    assert len(re.findall(r'<article class="card"', text)) == len(SUBS)
    for f, _ in SUBS:
        assert f'href="submissions/{f.name}"' in text
    assert not re.search(r'(src|href)="(https?:)?//', text)  # nothing fetched from elsewhere
    assert 'src="data:image/png;base64,' in text


def test_cards_show_optional_run_fields_or_a_dash():
    subs = _subs()
    text = _page(subs)
    card = text[text.index('id="model-linear-mamba"'):]
    card = card[:card.index("</article>")]
    for label in ("provenance", "lr search", "steps to"):
        assert re.search(rf"<dt>{label}</dt><dd>—</dd>", card), label
    assert "<dt>convergence</dt><dd>0 of 16 runs converged" in card
    assert "<dt>chosen lr</dt><dd>D32-N8: N_f=4: 0.01" in card

    sub = next(s for f, s in subs if f.name == "linear-mamba.yaml")
    sub["model"]["provenance"] = {"distribution": "recallbench", "version": "9.9",
                                  "source_sha256": "ab" * 32}
    p = sub["budgets"][0]["points"][0]
    p["lr_search"] = [{"lr": 0.003, "val_accuracy": 0.41, "steps": 800, "converged": True,
                       "error": None},
                      {"lr": 0.01, "val_accuracy": None, "steps": 12, "converged": False,
                       "error": "diverged"}]
    p["steps_to"] = {"0.5": 50, "0.9": None}
    text = _page(subs)
    assert "distribution: recallbench, version: 9.9" in text
    assert ("D32-N8 N_f=4: lr 0.003: val 0.41, 800 steps, converged / lr 0.01: val —, "
            "12 steps, error diverged") in text
    assert "D32-N8 N_f=4: 0.5: 50, 0.9: —" in text


def test_long_or_nested_values_are_cut():
    assert len(page.plain("x" * 10_000)) == page.TEXT_LIMIT
    assert page.plain({"a": {"b": {"c": {"d": 1}}}}) == "a: b: …"
    assert page.plain(list(range(100))).endswith("… (92 more)")


# -- render writes it; --check compares it ------------------------------------------------

@pytest.fixture
def board(tmp_path, monkeypatch):
    """A copy of cpu-small whose board is read without validation, and a stub PNG writer:
    what these tests check is render's writing and comparing, not the validation."""
    d = tmp_path / "cpu-small"
    shutil.copytree(SUITE, d, ignore=shutil.ignore_patterns(page.PAGE))
    monkeypatch.setattr(render_mod, "valid_board",
                        lambda s, **kw: [(Path(s) / "submissions" / f.name, sub) for f, sub in _subs()])
    monkeypatch.setattr(grid_readme, "render_plot",
                        lambda suite, rows, path: Path(path).write_bytes(b"\x89PNG fake"))
    return d


def test_render_writes_the_page_and_check_compares_it(board, cli):
    rc, out, _ = cli("leaderboard", "render", str(board), "--check")
    assert rc == 1 and f"{board / page.PAGE} is missing" in out
    rc, out, err = cli("leaderboard", "render", str(board))
    assert rc == 0 and f"wrote {board / page.PAGE}" in out, err
    text = (board / page.PAGE).read_text()
    assert base64.b64encode(b"\x89PNG fake").decode() in text
    rc, out, _ = cli("leaderboard", "render", str(board), "--check")
    assert rc == 0, out
    (board / page.PAGE).write_text(text.replace("<h1>", "<h1>edited "))
    rc, out, _ = cli("leaderboard", "render", str(board), "--check")
    assert rc == 1 and f"{board / page.PAGE} is stale" in out
    rc, out, _ = cli("leaderboard", "render", str(board), "--no-plot")
    assert rc == 0 and "The figure was not rendered" in (board / page.PAGE).read_text()
    rc, out, _ = cli("leaderboard", "render", str(board), "--check")
    assert rc == 1 and "is stale" in out  # a page without its figure is not up to date


def test_a_refused_submission_means_no_page(tmp_path, cli):
    d = tmp_path / "cpu-small"
    (d / "submissions").mkdir(parents=True)
    shutil.copy(SUITE / "suite.yaml", d)
    f = SUITE / "submissions" / "designed.yaml"
    (d / "submissions" / f.name).write_text(f.read_text().replace("name: designed", "name: better", 1))
    rc, _, err = cli("leaderboard", "render", str(d))
    assert rc == 2 and "designed.yaml" in err and "nothing rendered" in err
    assert not (d / page.PAGE).exists() and not (d / lb.README).exists()


# -- the figure ---------------------------------------------------------------------------

def _bits(sub) -> float:
    b = sub["budgets"][0]
    return b["state_size"] * b["state_bits"]


def test_figure_axes_cover_every_model_and_the_bound_and_legends_are_apart():
    suite = _suite()
    subs = _subs()
    big = copy.deepcopy(next(s for f, s in subs if f.name == "designed.yaml"))
    big["model"]["name"] = "huge"
    big["budgets"][0]["state_size"] = 10**7  # far right of everything else
    rows = lb.leaderboard_rows(suite, subs + [(Path("huge.yaml"), big)])
    fig = plot.build_figure(suite, rows)
    log2vv = math.log2(suite.data["task"]["vocab_size"] / 2)
    models = {r["model"] for r in rows if r["state_size"]}
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == len(suite.num_facts)
    for ax, nf in zip(panels, suite.num_facts):
        lo, hi = ax.get_xlim()
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        assert models <= set(lines)
        for m in models:
            assert all(lo < x < hi for x in lines[m].get_xdata()), (nf, m)
        bound = next(ln for ln in ax.get_lines() if ln.get_linestyle() == "--")
        bx, by = bound.get_xdata(), bound.get_ydata()
        assert bx.min() <= lo * 1.0001 and bx.max() >= hi * 0.9999  # drawn across the range
        assert lo < nf * log2vv - 1 < hi and by.min() < 0.5 and by.max() == 1.0  # its rise
        assert lo <= 1.0 and hi >= 10**7 * 32
        assert ax.get_legend() is None
    legends = {lg.get_title().get_text(): {t.get_text() for t in lg.get_texts()} for lg in fig.legends}
    assert legends == {"models": models, "bound": {"Fano bound (Lem 4.5)", "impossible"}}


def test_figure_of_an_empty_board_still_shows_the_bound():
    suite = lb.load_suite(REPO / "leaderboards" / "gpu-standard")
    fig = plot.build_figure(suite, [])
    lo, hi = fig.axes[0].get_xlim()
    full = max(suite.num_facts) * math.log2(256) - 1
    assert lo <= 1 and hi >= full and [lg.get_title().get_text() for lg in fig.legends] == ["bound"]


# -- in a browser ---------------------------------------------------------------------------

class _Table(HTMLParser):
    """The board table's rows from a dumped DOM: [(data-file, [(data-sort, text)])]."""

    def __init__(self):
        super().__init__()
        self.rows, self.cell, self.scripts, self.images = [], None, 0, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-file" in a:
            self.rows.append((a["data-file"], []))
        elif tag == "td" and self.rows:
            self.cell = [a.get("data-sort"), ""]
        self.scripts += tag == "script"
        if tag == "img":
            self.images.append(a)

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[1] += data

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.rows[-1][1].append(tuple(self.cell))
            self.cell = None


def _chromium(tmp_path: Path, url: str, *args: str) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=5000",
           *args, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _dom(tmp_path: Path, path: Path, fragment: str = "") -> _Table:
    parsed = _Table()
    parsed.feed(_chromium(tmp_path, path.as_uri() + fragment, "--dump-dom"))
    return parsed


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """A copy of cpu-small rendered by `leaderboard render` (every submission validated)."""
    d = tmp_path_factory.mktemp("page") / "cpu-small"
    shutil.copytree(SUITE, d, ignore=shutil.ignore_patterns(page.PAGE))
    fresh, msgs = lb.render(d)
    assert fresh and (d / page.PAGE).is_file(), msgs
    return d


def _column(key: str, text: str) -> int:
    return re.findall(r'data-key="([^"]+)"', text).index(key)


@pytest.mark.slow
@needs_chromium
def test_browser_shows_a_row_per_submission_and_sorts_numerically(rendered, tmp_path):
    text = (rendered / page.PAGE).read_text()
    table = _dom(tmp_path, rendered / page.PAGE)
    assert sorted(f for f, _ in table.rows) == sorted(f.name for f, _ in SUBS)
    assert table.scripts == 1
    plot_img = next(a for a in table.images if a.get("id") == "plot")
    png = base64.b64decode(plot_img["src"].split(",", 1)[1])
    assert png == (rendered / lb.PLOT).read_bytes()

    i = _column("s_eff", text)
    table = _dom(tmp_path, rendered / page.PAGE, "#sort=s_eff&dir=asc")
    values = [float(cells[i][0]) for _, cells in table.rows]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert [c[i][1] for _, c in table.rows] != sorted(c[i][1] for _, c in table.rows)  # not as text

    i = _column("per_kbit", text)
    table = _dom(tmp_path, rendered / page.PAGE, "#sort=per_kbit&dir=desc")
    raw = [cells[i][0] for _, cells in table.rows]
    known = [float(v) for v in raw if v]
    assert known == sorted(known, reverse=True) and raw[len(known):] == [""] * (len(raw) - len(known))
    assert table.rows[-1][0] == "attention.yaml"  # no finite state: missing value, last


@pytest.mark.slow
@needs_chromium
def test_browser_screenshot_is_not_blank(rendered, tmp_path):
    from PIL import Image
    import numpy as np

    shot = tmp_path / "page.png"
    _chromium(tmp_path, (rendered / page.PAGE).as_uri(), f"--screenshot={shot}",
              "--window-size=1400,2000")
    rgb = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(np.uint32)
    colours, counts = np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2], return_counts=True)
    assert len(colours) > 100  # text, the table's rules, the figure's lines and shading
    assert counts.max() / len(rgb) < 0.95  # more than a few pixels off the background


@pytest.mark.slow
@needs_chromium
def test_browser_runs_no_script_from_a_submission(tmp_path):
    path = tmp_path / page.PAGE
    path.write_text(_page(_evil_subs()))
    out = _chromium(tmp_path, path.as_uri(), "--dump-dom")
    table = _Table()
    table.feed(out)
    assert table.scripts == 1 and "pwned" not in re.search(r"<title>(.*?)</title>", out).group(1)
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in out  # shown as text
