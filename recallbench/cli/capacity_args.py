"""What ``recallbench capacity`` parses beside its flags: ``--state-size`` and ``--factory``.

``state_size(text)``: an integer S in [1, 10^15] (argparse type); ``factory(spec, S, name)``:
MODULE:CALLABLE imported and registered as the run's mixer factory, (adapter, options).
Every bad value is refused in one line naming the flag.
"""
from __future__ import annotations

import argparse
import importlib

from recallbench.api.errors import ConfigError

#: the largest --state-size, 10^15 (beyond any model's: 2^16 D x 2^16 N x 1024 layers x 64)
MAX_STATE_SIZE = 10**15


def state_size(text: str) -> int:
    """--state-size: a positive integer (written 512 or 5e5), at most MAX_STATE_SIZE."""
    try:
        value = int(text)
    except ValueError:
        try:
            x = float(text)
            value = int(x) if x.is_integer() else None  # not nan, inf or 2.5
        except ValueError:
            value = None
    if value is None or not 1 <= value <= MAX_STATE_SIZE:
        raise argparse.ArgumentTypeError(  # argparse cuts its error to about 100 characters
            f"{text[:24]!r} is not allowed: an integer in [1, 10^15]")
    return value



def factory(spec: str, state_size: int | None, name: str | None = None):
    """Import MODULE:CALLABLE and register it as the run's mixer factory; (adapter, options),
    the options naming the layer ``name`` (default: the callable's name)."""
    from recallbench.pytest_plugin.factory import FACTORY_ADAPTER, check_name, register_factory

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ConfigError(f"--factory {spec[:80]!r} is not allowed: MODULE:CALLABLE")
    try:
        obj = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise ConfigError(f"--factory {spec[:80]!r}: cannot import it: no module named "
                              f"{exc.name[:80]!r} on the import path; add the folder that "
                              "holds it to PYTHONPATH (PYTHONPATH=. for the current folder) "
                              "or install its package") from None
        raise ConfigError(f"--factory {spec[:80]!r}: cannot import it ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - the module's own error at import, in one line
        why = (str(exc).splitlines() or [""])[0][:200]
        raise ConfigError(f"--factory {spec[:80]!r}: cannot import it "
                          f"({type(exc).__name__}: {why})") from None
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise ConfigError(f"--factory {spec[:80]!r}: cannot import it ({exc})") from None
    if not callable(obj):
        raise ConfigError(f"--factory {spec[:80]!r} is not callable")
    if name is None:
        name = attr
        check_name(name, f"--factory {spec[:80]!r}: give --name, its callable's name")
    check_name(name, "--name")
    return FACTORY_ADAPTER, {"factory": register_factory(obj), "state_size": state_size,
                             "name": name}


def add_executor(p: argparse.ArgumentParser) -> None:
    """--executor and --address: where a card's runs train."""
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: --workers processes here (default); ray: each run a task of "
                        "one CPU on a Ray cluster (--address), a lost node's runs retried")
    p.add_argument("--address", help="--executor ray: the cluster's head, host:port or auto "
                   "(default: RAY_ADDRESS if set, else a local instance of --workers CPUs)")


def executor(args, workers: int):
    """The executor of --executor ray (its caller closes it), or None (the runs train here);
    a flag that does not go with it is refused in one line, before any connection."""
    if args.address is not None and args.executor != "ray":
        raise ConfigError("--address is for --executor ray")
    if args.executor != "ray":
        return None
    if args.factory:
        raise ConfigError("--executor ray is not for --factory: its mixer is registered in "
                          "this process, which the cluster's workers are not")
    if getattr(args, "shapes", None):
        raise ConfigError("--executor ray is for one card, not --shapes")
    if args.dry_run:
        return None  # a plan: nothing trains, no cluster is needed
    from recallbench.runs.executors import make_executor

    return make_executor("ray", workers=workers, address=args.address, threads=1)
