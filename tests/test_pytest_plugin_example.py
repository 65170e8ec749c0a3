"""examples/ci runs: its workflow's pytest command, on its tests, against its baseline.

The example package is not installed: its folder goes on sys.path and its entry point
(read from its pyproject.toml) is declared by a throwaway dist-info folder
(``plugin_dist``), as pip would.  The run uses pytest-xdist, so it is marked slow.
"""
from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ci"
WORKFLOW = EXAMPLE / ".github" / "workflows" / "recall.yml"


def _steps() -> list[dict]:
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    return [step for job in jobs.values() for step in job["steps"]]


def _pytest_args() -> list[str]:
    """The workflow's pytest command, less the word pytest."""
    runs = [s["run"] for s in _steps() if "run" in s and s["run"].startswith("pytest ")]
    assert len(runs) == 1, "the workflow runs pytest once"
    return shlex.split(runs[0])[1:]


def _example_project(pytester) -> None:
    """The example's tests, baseline and pyproject.toml in the pytester folder."""
    shutil.copytree(EXAMPLE / "tests", pytester.path / "tests")
    shutil.copy(EXAMPLE / "pyproject.toml", pytester.path)


def test_workflow_caches_the_folder_it_passes_and_compares_with_the_baseline(pytester):
    args = _pytest_args()
    assert args[:2] == ["-n", "auto"]
    folder = args[args.index("--recall-cache") + 1]
    baseline = args[args.index("--recall-baseline") + 1]
    caches = [s for s in _steps() if s.get("uses", "").startswith("actions/cache@")]
    assert [c["with"]["path"] for c in caches] == [folder]
    assert "--recall-regen" not in args and (EXAMPLE / baseline).is_file()
    assert any('pip install -e ".[test]"' in s.get("run", "") for s in _steps())

    # the committed baseline holds exactly the example's recall tests
    _example_project(pytester)
    result = pytester.runpytest("--collect-only", "-q")
    ids = {line for line in result.stdout.lines if "::" in line}
    keys = json.loads((EXAMPLE / baseline).read_text())["tests"]
    assert {key.split("#")[0] for key in keys} == ids and len(ids) == 3


def _entry_points() -> dict[str, list[tuple[str, str]]]:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    return {group: list(items.items()) for group, items in project["entry-points"].items()}


@pytest.mark.slow
def test_example_passes_its_workflow_command_and_the_second_run_trains_nothing(
        pytester, plugin_dist, tmp_path):
    shutil.copytree(EXAMPLE / "tinyzoo", tmp_path / "tinyzoo")
    plugin_dist(_entry_points(), {}, dist="tinyzoo")
    _example_project(pytester)
    args = [("2" if a == "auto" else a) for a in _pytest_args()]  # two workers here
    args += ["--recall-device", "cpu"]  # the committed baseline is a CPU measurement
    for run in range(2):
        result = pytester.runpytest_subprocess(*args, timeout=600)
        result.assert_outcomes(passed=3)
        assert "REGRESSED" not in result.stdout.str()
    result.stdout.fnmatch_lines([
        "*/test_recall.py::test_full_state_recalls * cached * ok",
        "0 training run(s) for 4 measurement(s); cache .recall-cache: 0 trained, "
        "4 from cache; baseline tests/recall-baseline.json*"])
    report = json.loads((pytester.path / "recall-report.json").read_text())
    assert [t["baseline"]["status"] for t in report["tests"]] == ["ok"] * 4
    entry = json.loads(next((pytester.path / ".recall-cache").glob("*.json")).read_text())
    assert entry["material"]["adapter"]["distribution"] == "tinyzoo"
    assert (pytester.path / "junit.xml").read_text().count('name="effective_state"') == 3


@pytest.mark.slow
def test_example_passes_on_a_quarter_budget_against_the_baselines_quarter_numbers(
        pytester, plugin_dist, tmp_path):
    """The pull-request workflow: --recall-budget 0.25, compared with the numbers the
    baseline holds for that budget; min_accuracy gives way to min_accuracy_reduced."""
    shutil.copytree(EXAMPLE / "tinyzoo", tmp_path / "tinyzoo")
    plugin_dist(_entry_points(), {}, dist="tinyzoo")
    _example_project(pytester)
    result = pytester.runpytest_subprocess("--recall-baseline", "tests/recall-baseline.json",
                                           "--recall-budget", "0.25", "--recall-device", "cpu",
                                           "--recall-report", "report.json", timeout=600)
    result.assert_outcomes(passed=3)
    report = json.loads((pytester.path / "report.json").read_text())
    assert [t["baseline"]["status"] for t in report["tests"]] == ["ok"] * 4
    full = report["tests"][0]
    assert full["record"]["steps"] <= 150 // 4 + 1 and full["min_accuracy"] == 0.8
