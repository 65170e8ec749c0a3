"""SIGTERM stops a driver the way Ctrl-C does: by unwinding.

Inside :func:`sigterm_unwinds`, SIGTERM raises :class:`Terminated` in the main thread, so
the executor's ``finally`` stops its workers at once, every record that finished is already
in the store (the driver appends each as it arrives), and the CLI prints one line and exits
with :attr:`Terminated.exit_status` (143, the shell's 128 + SIGTERM)::

    with sigterm_unwinds():
        drive(items, executor, store)

:func:`stopped` is that line and that status, for every driver's CLI.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class Terminated(BaseException):
    """SIGTERM arrived.  Not an ``Exception``, so no runner records it as a failed point."""

    exit_status = 143


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` inside the block (main thread only; elsewhere the
    block runs unchanged).  A second SIGTERM while unwinding is ignored, so the clean-up
    finishes; the previous handler is put back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stopped(exc: BaseException, store) -> tuple[str, int]:
    """The line a driver's CLI prints when Ctrl-C (KeyboardInterrupt) or SIGTERM
    (:class:`Terminated`) stopped it, and its exit status (130 or 143)."""
    term = isinstance(exc, Terminated)
    return (f"recallbench: {'terminated (SIGTERM)' if term else 'interrupted'}; the points that "
            f"finished are in {store}, and the same command resumes from there",
            Terminated.exit_status if term else 130)
