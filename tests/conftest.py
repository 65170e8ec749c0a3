import os
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)  # tiny models: one thread is much faster (benchmarks/bench_train.py)


@pytest.fixture
def plugin_dist(tmp_path, monkeypatch):
    """A throwaway third-party distribution on sys.path, declaring entry points.

    ``plugin_dist(group, name, module_source)`` writes ``<module>.py`` and a
    ``.dist-info`` folder with ``entry_points.txt``, the way pip would install
    them, and returns the folder (also prepended to PYTHONPATH for subprocesses).
    """
    def make(entries: dict[str, list[tuple[str, str]]], modules: dict[str, str],
             dist: str = "rb_thirdparty"):
        for mod, src in modules.items():
            (tmp_path / f"{mod}.py").write_text(src)
        info = tmp_path / f"{dist}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        lines = []
        for group, items in entries.items():
            lines.append(f"[{group}]")
            lines += [f"{name} = {target}" for name, target in items]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
        return tmp_path

    return make


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """Run ``recallbench ARGS`` in-process from tmp_path: (returncode, stdout, stderr)."""
    from recallbench.cli.main import main

    def call(*args):
        monkeypatch.chdir(tmp_path)
        capsys.readouterr()
        rc = main(list(args))
        out, err = capsys.readouterr()
        return rc, out, err

    return call


@pytest.fixture
def cli_subprocess(tmp_path):
    """Run the ``recallbench`` command in a fresh interpreter: (returncode, stdout, stderr)."""
    import subprocess

    def call(*args, timeout=600):
        proc = subprocess.run([sys.executable, "-m", "recallbench.cli.main", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout, proc.stderr

    return call


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


#: set in this session's environment, so the Ray processes its tests start can be told apart
SESSION_MARK = "RECALLBENCH_TEST_SESSION"


def session_raylets() -> list[int]:
    """Live raylets (``pgrep -f raylet``) started by this test session (they carry its mark)."""
    import subprocess

    try:
        found = subprocess.run(["pgrep", "-f", "raylet"], capture_output=True, text=True,
                               timeout=10).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return []
    mark = f"{SESSION_MARK}={os.environ[SESSION_MARK]}".encode()
    mine = []
    for pid in map(int, found):
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                mine.append(pid)
        except OSError:  # gone already, or not ours to read
            pass
    return mine


@pytest.fixture(scope="session", autouse=True)
def no_ray_process_survives():
    """No Ray instance or cluster node a test started outlives the session: checked at its
    end (raylets stop a few seconds after ray.shutdown), and any left is killed and reported."""
    import signal
    import time

    os.environ[SESSION_MARK] = str(os.getpid())
    yield
    deadline = time.monotonic() + 20
    while (left := session_raylets()) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"Ray processes outlived their tests: raylet pids {left}"


@pytest.fixture
def board(tmp_path):
    """A copy of the cpu-small leaderboard suite, with no submissions yet."""
    import shutil

    suite = Path(__file__).resolve().parent.parent / "leaderboards" / "cpu-small"
    d = tmp_path / "leaderboards" / "cpu-small"
    (d / "submissions").mkdir(parents=True)
    shutil.copy(suite / "suite.yaml", d / "suite.yaml")
    return d


def one_line_error(rc: int, err: str, *names: str) -> None:
    """A user's mistake: exit 2, one line ``recallbench: error: ...`` naming ``names``, no
    traceback."""
    assert rc == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("recallbench: error: "), err
    for name in names:
        assert name in err, err


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
