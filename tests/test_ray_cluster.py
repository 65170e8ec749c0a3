"""Sweeps on a Ray cluster started the way users start one: ``ray start`` on each node, token
authentication, several nodes, a node lost mid-sweep, GPUs asked for that are not there.

The cluster runs on this one machine: a head and a second node, each with its own ports,
temp dir and one CPU, each in its own process group, which is killed at the end whatever
happened (conftest.py checks that no raylet of this session survives it).
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from recallbench.runs.store import read_store

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'recallbench[ray]')")

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
RAY = str(Path(sys.executable).with_name("ray"))


def sweep_file(path: Path, seeds: int, max_steps: int = 5) -> str:
    train = {"max_steps": max_steps, "val_every": max(5, max_steps // 2), "val_size": 16,
             "test_size": 16, "batch_size": 16, "progress": False, "early_stop": None}
    path.write_text(yaml.safe_dump({
        "base": {"task": TASK, "model": {"adapter": "linear-mamba", "d_model": 8, "d_state": 4},
                 "train": train},
        "axes": {"train.seed": list(range(seeds))}}))
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_processes(sid: int) -> dict[int, str]:
    """pid → command line of the live processes in a session (a node started with
    start_new_session: Ray gives its workers process groups of their own, not sessions)."""
    out = subprocess.run(["ps", "-eo", "sid=,pid=,stat=,args="], capture_output=True,
                         text=True).stdout
    rows = [line.split(None, 3) for line in out.splitlines()]
    return {int(r[1]): r[3] if len(r) > 3 else "" for r in rows
            if r[0] == str(sid) and not r[2].startswith("Z")}


class Cluster:
    """A head node and named extra nodes, started with ``ray start`` under token auth.

    ``env``: what a driver needs to join (``RAY_AUTH_MODE=token``, the token's path, and
    ``RAY_TMPDIR`` so that ``--address auto`` finds this head).  ``kill(name)`` loses a node
    at once (SIGKILL to every process of its session); ``close()`` kills every node and waits
    until none of their processes is left.
    """

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="rbray", dir="/tmp"))  # short: socket paths
        (self.root / "token").write_text(secrets.token_hex(32))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.root / "token"),
                        RAY_TMPDIR=str(self.root))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.sessions: dict[str, int] = {}

    def start(self, name: str, *args: str) -> None:
        ports = {flag: free_port() for flag in (
            "--node-manager-port", "--object-manager-port", "--metrics-export-port",
            "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
            "--runtime-env-agent-port")}
        if name == "head":
            ports["--dashboard-port"] = free_port()
            where = ["--head", f"--port={self.port}", f"--temp-dir={self.root / 'ray'}",
                     "--include-dashboard=false"]
        else:
            where = [f"--address={self.address}", f"--temp-dir={self.root / name}"]
        log = open(self.root / f"{name}.log", "w")
        proc = subprocess.Popen(
            [RAY, "start", *where, "--num-cpus=1", "--object-store-memory=80000000",
             "--disable-usage-stats",
             *(f"{flag}={port}" for flag, port in ports.items()), *args],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.sessions[name] = proc.pid  # its own session: every process of the node
        if proc.wait(timeout=180) != 0:
            raise RuntimeError(f"ray start {name} failed: "
                               + (self.root / f"{name}.log").read_text()[-2000:])

    def nodes(self) -> dict[str, dict]:
        """Node id → {"head": bool, "alive": bool} as the head's GCS lists them."""
        code = ("import json, sys\nfrom ray._raylet import GcsClient\n"
                "nodes = GcsClient(address=sys.argv[1]).get_all_node_info(timeout=10)\n"
                "print(json.dumps({n.node_id.hex(): {'head': n.is_head_node, 'alive': n.state == 0}"
                " for n in nodes.values()}))")
        out = subprocess.run([sys.executable, "-c", code, self.address], env=self.env,
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return json.loads(out.splitlines()[-1])

    def kill(self, name: str) -> None:
        for pid in session_processes(self.sessions[name]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        deadline = time.monotonic() + 30
        while any(session_processes(sid) for sid in self.sessions.values()):
            for name in self.sessions:
                self.kill(name)
            assert time.monotonic() < deadline, "a node's processes would not die"
            time.sleep(0.2)
        shutil.rmtree(self.root, ignore_errors=True)

    def sweep(self, cwd: Path, *args: str, timeout: float = 300, drop: tuple[str, ...] = ()):
        """``recallbench sweep ARGS`` as a driver process: (returncode, stdout, stderr);
        ``drop``: variables of :attr:`env` the driver does not get."""
        env = {k: v for k, v in self.env.items() if k not in drop}
        proc = subprocess.run([sys.executable, "-m", "recallbench.cli.main", "sweep", *args],
                              cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        return proc.returncode, proc.stdout, proc.stderr


def start_cluster(**extra: tuple[str, ...]) -> Cluster:
    cluster = Cluster()
    try:
        cluster.start("head")
        for name, args in extra.items():
            cluster.start(name, *args)
        deadline = time.monotonic() + 60
        while sum(n["alive"] for n in cluster.nodes().values()) < 1 + len(extra):
            assert time.monotonic() < deadline, "the second node never joined"
            time.sleep(0.5)
    except BaseException:
        cluster.close()
        raise
    return cluster


@pytest.fixture(scope="module")
def cluster():
    """Head + a second node that says it has one GPU (this machine has none)."""
    c = start_cluster(second=("--num-gpus=1",))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def lossy_cluster():
    """A cluster of its own for a test that kills its second node."""
    c = start_cluster(second=())
    try:
        yield c
    finally:
        c.close()


def raw_records(store: Path) -> list[dict]:
    """Every record line in the store's files, duplicates included."""
    return [json.loads(line) for f in read_store(store).files
            for line in f.read_text().splitlines() if line.strip()]


def by_hash(records):
    return Counter(r["config_hash"] for r in records)


@pytest.mark.slow
def test_sweep_runs_on_both_nodes_with_token_auth(cluster, tmp_path):
    path = sweep_file(tmp_path / "s.yaml", seeds=4)
    rc, out, err = cluster.sweep(tmp_path, path, "--store", "st", "--executor", "ray",
                                 "--address", cluster.address)
    assert rc == 0, err + out
    assert f"[ray@{cluster.address} x2]" in out
    records = raw_records(tmp_path / "st")
    assert len(records) == 4 and all(r["status"] == "ok" for r in records)
    assert set(by_hash(records).values()) == {1}
    nodes = cluster.nodes()
    ran = Counter(r["node"]["ray_node_id"] for r in records)
    print("points per node:", {("head" if nodes[n]["head"] else "second") + f" {n[:8]}": k
                               for n, k in ran.items()})
    assert set(ran) == set(nodes)  # both nodes ran points
    assert all(r["node"]["host"] == socket.gethostname() for r in records)
    # the same sweep again through --address auto (the head's ray_current_cluster): all done
    rc, out, err = cluster.sweep(tmp_path, path, "--store", "st", "--executor", "ray",
                                 "--address", "auto")
    assert rc == 0, err + out
    assert "0 to run" in out and len(raw_records(tmp_path / "st")) == 4


@pytest.mark.slow
def test_without_address_a_local_instance_runs_beside_the_cluster(cluster, tmp_path):
    """A running cluster and its ray_current_cluster file (RAY_TMPDIR) are left alone."""
    path = sweep_file(tmp_path / "s.yaml", seeds=2)
    rc, out, err = cluster.sweep(tmp_path, path, "--store", "st", "--executor", "ray",
                                 "--workers", "1")
    assert rc == 0, err + out
    assert "[ray]" in out
    records = read_store(tmp_path / "st").records
    assert len(records) == 2 and all(r["status"] == "ok" for r in records)
    assert not {r["node"]["ray_node_id"] for r in records} & set(cluster.nodes())


@pytest.mark.slow
def test_a_driver_without_token_mode_uses_the_token_ray_keeps(cluster, tmp_path):
    """The issue's case: the cluster asks for a token, the driver set no RAY_AUTH_MODE, and
    the token is where Ray keeps it: the sweep runs in token mode and says so once."""
    path = sweep_file(tmp_path / "s.yaml", seeds=2)
    rc, out, err = cluster.sweep(tmp_path, path, "--store", "st", "--executor", "ray",
                                 "--address", cluster.address, drop=("RAY_AUTH_MODE",))
    assert rc == 0, err + out
    assert err.count("the cluster asks for a token; using the one in") == 1
    records = raw_records(tmp_path / "st")
    assert len(records) == 2 and all(r["status"] == "ok" for r in records)


@pytest.mark.slow
def test_refused_credentials_are_one_line(cluster, cli, tmp_path, monkeypatch):
    path = sweep_file(tmp_path / "s.yaml", seeds=2)
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    cases = [({}, "the Ray cluster there asks for a token; set RAY_AUTH_MODE=token"),
             ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64},
              "refused the token from RAY_AUTH_TOKEN; use the token of that cluster"),
             ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "none")},
              "RAY_AUTH_MODE=token but no token found")]
    for env, message in cases:
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            start = time.monotonic()
            rc, out, err = cli("sweep", path, "--store", "st", "--executor", "ray",
                               "--address", cluster.address)
        assert rc == 2 and f"--address {cluster.address!r}: " in err and message in err, err
        assert err.count("\n") == 1 and time.monotonic() - start < 15
    assert not read_store(tmp_path / "st").records


@pytest.mark.slow
def test_gpus_the_cluster_lacks_fail_in_one_line(cluster, tmp_path):
    path = sweep_file(tmp_path / "s.yaml", seeds=2)
    rc, out, err = cluster.sweep(tmp_path, path, "--store", "st", "--executor", "ray",
                                 "--address", cluster.address, "--gpus-per-worker", "2")
    assert rc == 2 and err.count("\n") == 1, err
    assert "--gpus-per-worker 2: the Ray cluster has 1 GPUs, at most 1 on one node" in err
    assert not read_store(tmp_path / "st").records
    # the second node says it has a GPU, but torch sees none there: each point fails, one line
    rc, out, err = cluster.sweep(tmp_path, path, "--store", "st", "--executor", "ray",
                                 "--address", cluster.address, "--gpus-per-worker", "0.5")
    assert rc == 1, err + out
    records = read_store(tmp_path / "st").records
    assert len(records) == 2 and all(r["status"] == "failed" for r in records)
    second = [n for n, info in cluster.nodes().items() if not info["head"]]
    for r in records:
        assert r["error"].startswith("--gpus-per-worker 0.5: Ray gave this task GPU [0] but ")
        assert "sees no CUDA device" in r["error"] and "\n" not in r["error"]
        assert [r["node"]["ray_node_id"]] == second


@pytest.mark.slow
def test_node_lost_mid_sweep_loses_and_doubles_nothing(lossy_cluster, tmp_path):
    """The second node is killed while it runs a point: that point is retried on the head
    (or recorded failed, then rerun); every point ends in the store once, ok."""
    c = lossy_cluster
    path = sweep_file(tmp_path / "s.yaml", seeds=6, max_steps=1000)
    second = [n for n, info in c.nodes().items() if not info["head"]][0]
    killed = threading.Event()

    def kill_when_busy():  # a worker of the second node shows ray::_ray_task while it runs one
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            running = session_processes(c.sessions["second"]).values()
            if any(cmd.startswith("ray::_ray_task") for cmd in running):
                c.kill("second")
                killed.set()
                return
            time.sleep(0.1)

    watcher = threading.Thread(target=kill_when_busy, daemon=True)
    watcher.start()
    rc, out, err = c.sweep(tmp_path, path, "--store", "st", "--executor", "ray",
                           "--address", c.address)
    watcher.join(timeout=5)
    assert killed.is_set(), "no point ever ran on the second node"
    records = raw_records(tmp_path / "st")
    assert set(by_hash(records).values()) == {1} and len(records) == 6
    print("after the loss:", [(r["status"], r["node"] and r["node"]["ray_node_id"][:8],
                               r["error"]) for r in records])
    assert rc == (1 if any(r["status"] == "failed" for r in records) else 0), err + out
    assert "lagging heartbeats" not in out  # Ray's messages on the lost node: one line each
    for r in records:
        assert r["status"] == "ok" or ("\n" not in r["error"] and r["node"] is None)
    assert not c.nodes()[second]["alive"]
    rc, out, err = c.sweep(tmp_path, path, "--store", "st", "--executor", "ray",
                           "--address", c.address)
    assert rc == 0, err + out
    final = raw_records(tmp_path / "st")
    assert set(by_hash(r for r in final if r["status"] == "ok").values()) == {1}
    assert len(by_hash(final)) == 6 and len(final) == 6 + sum(r["status"] == "failed"
                                                              for r in records)


# -- without a cluster ----------------------------------------------------------------------

def test_gpu_flag_is_checked_before_anything_runs(cli, tmp_path):
    path = sweep_file(tmp_path / "s.yaml", seeds=1)
    for bad in ("1.5", "0", "-1", "inf", "nan"):
        rc, out, err = cli("sweep", path, "--store", "st", "--executor", "ray",
                           "--gpus-per-worker", bad)
        assert rc == 2 and err.count("\n") == 1, err
        assert (f"--gpus-per-worker {float(bad):g} is not allowed: must be a fraction in (0, 1] "
                f"or a whole number of GPUs") in err
    rc, out, err = cli("sweep", path, "--store", "st", "--executor", "processes",
                       "--gpus-per-worker", "0.5")
    assert rc == 2 and "--gpus-per-worker is for --executor ray" in err
    assert not read_store(tmp_path / "st").records


def test_which_cluster_an_address_names(monkeypatch):
    from recallbench.api.errors import ConfigError
    from recallbench.runs.ray_connect import target

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert target(None).local and target("local").local  # never a cluster found by chance
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")  # as in a job of ray job submit
    t = target(None)
    assert (t.init, t.hostport, t.shown) == ("10.1.2.3:6379", "10.1.2.3:6379",
                                             "RAY_ADDRESS '10.1.2.3:6379'")
    assert target("ray://head:10001").hostport is None  # Ray Client: nothing to probe
    for bad in ("head:0", "head", "http://head:8265"):
        with pytest.raises(ConfigError, match=r"need host:port with a port in \[1, 65535\]"):
            target(bad)


def test_records_name_their_node():
    from recallbench.api.config import resolve
    from recallbench.api.record import failed_record

    rec = failed_record(resolve({"task": TASK, "model": {"adapter": "linear-mamba"}}), "x")
    assert rec["node"] == {"host": socket.gethostname(), "ray_node_id": None}


@pytest.mark.slow
def test_a_port_that_is_no_ray_head_is_one_line(cli, tmp_path):
    """Something listens, but not a GCS: one line within the connect timeout, not minutes."""
    from recallbench.runs.ray_connect import CONNECT_TIMEOUT_S

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    address = f"127.0.0.1:{server.getsockname()[1]}"

    def hang_up():
        while True:
            try:
                server.accept()[0].close()
            except OSError:  # closed at the end of the test
                return

    threading.Thread(target=hang_up, daemon=True).start()
    try:
        path = sweep_file(tmp_path / "s.yaml", seeds=1)
        start = time.monotonic()
        rc, out, err = cli("sweep", path, "--store", "st", "--executor", "ray",
                           "--address", address)
    finally:
        server.close()
    assert rc == 2 and err.count("\n") == 1, err
    assert f"--address {address!r}: something listens there but no Ray head node's GCS" in err
    assert time.monotonic() - start < CONNECT_TIMEOUT_S + 5


def test_points_no_live_node_can_run_fail_in_one_line(monkeypatch):
    """The only node with a GPU is lost: the tasks left would wait forever; they fail."""
    import types

    from recallbench.api.config import resolve
    from recallbench.runs import ray_executor

    cancelled = []

    class LostGpuNode:
        def wait(self, refs, num_returns, timeout):
            return [], refs

        def nodes(self):
            return [{"Alive": True, "Resources": {"CPU": 4.0}},
                    {"Alive": False, "Resources": {"CPU": 4.0, "GPU": 1.0}}]

        def cancel(self, ref, force):
            cancelled.append(ref)

    monkeypatch.setattr(ray_executor, "WAIT_S", 0.0)
    ex = object.__new__(ray_executor.Ray)
    ex.ray, ex.threads, ex.gpus, ex.ensemble = LostGpuNode(), 1, 0.5, False
    ex._remote = types.SimpleNamespace(remote=lambda *args: object())
    cfg = resolve({"task": TASK, "model": {"adapter": "linear-mamba"}}).to_dict()
    results = dict(ex.run([[cfg], [cfg]]))
    assert sorted(results) == [0, 1] and len(cancelled) == 2
    for records in results.values():
        assert [r["status"] for r in records] == ["failed"] and records[0]["node"] is None
        assert records[0]["error"] == ("no live node of the Ray cluster has the 1 CPUs and 0.5 "
                                       "GPUs this point asks for any more (a node was lost)")
