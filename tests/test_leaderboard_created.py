"""A submission's ``created``: a real date ``YYYY-MM-DD`` no later than today (UTC),
refused otherwise by `leaderboard validate` in one line naming the file and the field."""
from __future__ import annotations

import copy
import datetime
from pathlib import Path

import pytest

from conftest import one_line_error

from recallbench import leaderboard as lb
from recallbench.api.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "leaderboards" / "cpu-small"
BASE = SUITE / "submissions" / "mamba.yaml"
ORIGINAL = lb.read_yaml_data(BASE)


def _today() -> datetime.date:
    return datetime.datetime.now(datetime.timezone.utc).date()


BAD_CREATED = ["2099-12-31 <script>alert(1)</script>", "2099-12-31", "tomorrow", "2026-02-30",
               "2026-1-05", "20260105", "2026-01-05T00:00:00", "２０２６-01-05", None, 20260105,
               "", "<script>"]


@pytest.mark.parametrize("value", BAD_CREATED, ids=range(len(BAD_CREATED)))
def test_created_must_be_a_date_no_later_than_today(board, cli, value):
    if value == "tomorrow":
        value = (_today() + datetime.timedelta(days=1)).isoformat()
    d = copy.deepcopy(ORIGINAL)
    d["created"] = value
    d["sha256"] = lb.content_sha256(d)
    path = board / "submissions" / "mamba.yaml"
    path.write_text(lb.dump_yaml(d))
    rc, _, err = cli("leaderboard", "validate", str(path))
    one_line_error(rc, err, str(path), "created: must be a date YYYY-MM-DD no later than today")


def test_an_unquoted_yaml_date_is_refused_inone_line_error(board, cli):
    text = BASE.read_text().replace(f"created: '{ORIGINAL['created']}'",
                                    f"created: {ORIGINAL['created']}")
    assert text != BASE.read_text()
    path = board / "submissions" / "mamba.yaml"
    path.write_text(text)
    rc, _, err = cli("leaderboard", "validate", str(path))
    one_line_error(rc, err, str(path), "created: must be a date YYYY-MM-DD")


@pytest.mark.parametrize("value", ["2024-02-29", ORIGINAL["created"], "today"])
def test_past_dates_and_today_pass(value):
    from recallbench.leaderboard.schema import check_created

    check_created(_today().isoformat() if value == "today" else value, "f")
    with pytest.raises(ConfigError, match="^f: created: "):
        check_created("2023-02-29", "f")
