"""Reaching a Ray cluster for ``--executor ray``: which one, whether it answers, whether it
takes our credentials.  Each failure is one line that names the fix.

``--address``:

* left out: a local instance of our own (``ray.init(address="local")``), whatever else runs
  on this machine (a ``ray start`` cluster, a stale ``ray_current_cluster`` file), unless
  ``RAY_ADDRESS`` is set (as in a job started by ``ray job submit``): then that cluster,
  and the sweep's header names it;
* ``auto``: the cluster ``ray start`` last started on this machine, as ``ray.init("auto")``;
* ``host:port``: the GCS of a cluster's head node (``ray start --head --port P``);
  ``ray://host:port`` goes through Ray Client.

Token authentication, the way Ray documents it: a cluster started with ``RAY_AUTH_MODE=token``
(``ray start`` turns it on by itself when a token exists) takes only drivers that set
``RAY_AUTH_MODE=token`` and hold its token, in ``RAY_AUTH_TOKEN``, the file named by
``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token`` (``ray get-auth-token`` on the head node
prints it).  For ``auto`` Ray turns token mode on by itself when a token is found.  Before
``ray.init``, which on refused credentials logs a warning a second for 20 s and then calls
the cluster unreachable, the GCS is asked once for its cluster id with the same
credentials (in a separate process, whose warnings are not shown), so a refusal is
reported as one.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import sys
from pathlib import Path

from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.api.errors import reason

#: seconds to wait for a TCP connection to ``--address``, and for the GCS's answer
CONNECT_TIMEOUT_S = 10.0
TOKEN_HELP = ("the cluster's token (ray get-auth-token on its head node) in ~/.ray/auth_token, "
              "the file named by RAY_AUTH_TOKEN_PATH, or RAY_AUTH_TOKEN")


@dataclasses.dataclass
class Target:
    """Where to connect: ``init`` for ``ray.init``, ``shown`` for messages and headers,
    ``hostport`` to probe (None: nothing to probe, a local instance or Ray Client)."""

    init: str
    shown: str
    hostport: str | None = None

    @property
    def local(self) -> bool:
        return self.init == "local"


def target(address: str | None) -> Target:
    """The cluster ``--address`` names (see the module docstring)."""
    if not address:
        env = os.environ.get("RAY_ADDRESS", "").strip()
        if not env or env == "local":
            return Target("local", "a local Ray instance")
        return dataclasses.replace(target(env), shown=f"RAY_ADDRESS {env!r}")
    if address == "local":
        return Target("local", "a local Ray instance")
    if address == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address
        except ImportError:  # another Ray than this was written for: ray.init looks itself
            return Target("auto", "--address auto")
        try:
            found = canonicalize_bootstrap_address("auto")
        except (ConnectionError, ValueError):
            found = None
        if not found:
            raise UnavailableError("--address auto: no Ray cluster runs on this machine; start "
                                   "one (ray start --head) or leave out --address to run on "
                                   "a local instance")
        return Target("auto", f"--address auto (found {found})", found)
    hostport = address[len("ray://"):] if address.startswith("ray://") else address
    host, _, port = hostport.rpartition(":")
    if "://" in hostport or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--address {address[:80]!r} is not allowed: need host:port with a "
                          f"port in [1, 65535], ray://host:port, or auto")
    return Target(address, f"--address {address!r}",
                  None if address.startswith("ray://") else f"{host or '127.0.0.1'}:{port}")


def check(t: Target) -> None:
    """Fail in one line, within :data:`CONNECT_TIMEOUT_S`, when nothing answers at the target
    or its GCS refuses our credentials; Ray itself can wait for minutes."""
    if t.local or not (t.hostport or t.init.startswith("ray://")):
        return  # nothing to check before ray.init
    hostport = t.hostport or t.init[len("ray://"):]
    host, port = hostport.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise UnavailableError(f"{t.shown}: nothing answers there ({reason(exc)}); start the "
                               f"cluster (ray start --head) or leave out --address to run on "
                               f"a local instance") from None
    if t.hostport and os.environ.get("RAY_USE_TLS", "0").lower() not in ("1", "true"):
        _check_credentials(t)


def _token() -> tuple[str | None, str]:
    """The token Ray would send in token mode, and where it comes from."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return os.environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        text = path.expanduser().read_text().strip()
    except OSError:
        text = ""
    return text or None, str(path)


#: run in a fresh interpreter: the first call that needs credentials (it fetches the cluster
#: id), its Ray warnings captured instead of repeated on the terminal
PROBE = """
import sys
from ray._raylet import GcsClient
try:
    GcsClient(address=sys.argv[1])
except Exception as exc:
    print(type(exc).__name__, str(exc).strip().splitlines()[0][:150] if str(exc).strip() else "")
    sys.exit(3)
"""


def _probe(t: Target, env: dict) -> str | None:
    """None if the GCS at ``t`` takes these credentials, else the probe's one-line answer."""
    import subprocess
    import sys

    try:
        probe = subprocess.run([sys.executable, "-c", PROBE, t.hostport], env=env, text=True,
                               capture_output=True, timeout=CONNECT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UnavailableError(f"{t.shown}: something listens there but no Ray head node's "
                               f"GCS answered within {CONNECT_TIMEOUT_S:g} s; give the port of "
                               f"ray start --head --port (default 6379)") from None
    if probe.returncode == 0:
        return None
    return (probe.stdout.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]


def _enter_token_mode() -> None:
    """Put this driver in token mode: the variable ``ray.init`` reads and, where Ray has
    already loaded its config (importing ray does), that config re-read (private API, as
    Ray's own tests switch modes; skipped on a Ray without it)."""
    os.environ["RAY_AUTH_MODE"] = "token"
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:
        return
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _check_credentials(t: Target) -> None:
    """Connect to the GCS once with the credentials ``ray.init`` will use, in a separate
    process bounded by :data:`CONNECT_TIMEOUT_S`.

    A cluster that asks for a token while the driver set no ``RAY_AUTH_MODE`` is joined
    with the token Ray keeps on this machine (``~/.ray/auth_token``, where ``ray start``
    writes it), if there is one and the cluster takes it: the driver then runs in token
    mode, and says so in one line.
    """
    env = dict(os.environ)
    mode = env.get("RAY_AUTH_MODE", "").strip().lower()
    token, source = _token()
    if not mode and t.init == "auto" and token is not None:
        env["RAY_AUTH_MODE"] = mode = "token"  # what ray.init("auto") does
    if mode == "token" and token is None:
        raise UnavailableError(f"{t.shown}: RAY_AUTH_MODE=token but no token found: put "
                               f"{TOKEN_HELP}")
    said = _probe(t, env)
    if said is None:
        return
    if said.startswith("ModuleNotFoundError") or said.startswith("ImportError"):
        return  # another Ray than the one this probe was written for: let ray.init try
    if said.startswith("AuthenticationError") and not mode and token is not None \
            and _probe(t, {**env, "RAY_AUTH_MODE": "token"}) is None:
        _enter_token_mode()
        print(f"recallbench: {t.shown}: the cluster asks for a token; using the one in "
              f"{source} (RAY_AUTH_MODE=token)", file=sys.stderr)
        return
    if said.startswith("AuthenticationError") and mode == "token":
        raise UnavailableError(f"{t.shown}: the Ray cluster there refused the token from "
                               f"{source}; use the token of that cluster (ray get-auth-token "
                               f"on its head node)")
    if said.startswith("AuthenticationError"):
        raise UnavailableError(f"{t.shown}: the Ray cluster there asks for a token; set "
                               f"RAY_AUTH_MODE=token with {TOKEN_HELP}; or start the cluster "
                               f"with RAY_AUTH_MODE=disabled")
    raise UnavailableError(f"{t.shown}: something listens there but did not answer as a Ray "
                           f"head node's GCS ({said}); give the port of ray start --head "
                           f"--port (default 6379)")


def connect(ray, t: Target, cpus: int, **kwargs) -> None:
    """``ray.init`` on the target (checked first); a local instance gets ``cpus`` CPUs."""
    check(t)
    try:
        if t.local:
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, **kwargs)
        else:
            ray.init(address=t.init, **kwargs)
    except Exception as exc:  # ConnectionError, AuthenticationError, a timeout, ...
        what = "starting a local Ray instance failed" if t.local else "connecting failed"
        raise UnavailableError(f"{t.shown}: {what} ({reason(exc)[:300]})") from None
