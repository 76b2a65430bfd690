"""Reading a pool's pipes: which of them have something to read, waiting a while."""

from __future__ import annotations

import select
from multiprocessing import connection
from typing import Any

__all__ = ["Poller"]


class Poller:
    """Which of some pipes have something to read (a message, or their end), waiting a while.

    One ``select.poll`` set up once, where the platform has it (a connection's own
    ``poll`` builds a selector on every call); ``multiprocessing.connection.wait`` elsewhere.
    """

    def __init__(self, conns: list[Any]) -> None:
        self._conns = conns
        self._fds = [c.fileno() for c in conns]
        self._polls: list[Any] = []
        if hasattr(select, "poll"):
            for fd in self._fds:
                one = select.poll()
                one.register(fd, select.POLLIN)
                self._polls.append(one)
            self._all = select.poll()
            for fd in self._fds:
                self._all.register(fd, select.POLLIN)

    def ready(self, wanted: Any, timeout_s: float) -> list[int]:
        """The indices among `wanted` whose pipe is readable (or ended) within `timeout_s`."""
        wanted = list(wanted)
        if not self._polls:
            found = connection.wait([self._conns[k] for k in wanted], timeout_s)
            return [k for k in wanted if self._conns[k] in found]
        poll = self._polls[wanted[0]] if len(wanted) == 1 else self._all
        events = poll.poll(int(timeout_s * 1000))
        fds = {fd for fd, _ in events}
        return [k for k in wanted if self._fds[k] in fds]
