"""The committed study reports are what `recallbench score` writes from their stores today:
a refactor of the law, the scorer or the store that changes a number or a line fails here.

Each study's README states its score command; the reports are compared byte for byte
(the figures are PNGs whose bytes follow matplotlib's version, so only their links are)."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
#: study -> the flags its README's score command adds
STUDIES = {"dn_ar": [], "dn_mqar": [], "heads_mqar": [], "layers_mqar": [],
           "layers_paper_points": [], "repeated_keys": [], "dn_mamba": ["--collapse", "always"]}


@pytest.mark.slow
@pytest.mark.parametrize("study", sorted(STUDIES))
def test_a_study_report_is_what_score_writes_from_its_store(cli, tmp_path, study):
    here = RESULTS / study
    assert f"recallbench score docs/results/{study}/store" in (here / "README.md").read_text()
    out = tmp_path / study
    rc, _, err = cli("score", str(here / "store"), *STUDIES[study], "--out", str(out))
    assert rc == 0, err
    for name in ("report.md", "report.json"):
        assert (out / name).read_bytes() == (here / name).read_bytes(), f"{study}/{name}"
