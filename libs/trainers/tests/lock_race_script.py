"""A process of the logdir-lock race test: it takes each trial's lock at the same instant as the others.

Usage: python lock_race_script.py CONTROL_DIR TRIALS

It prints ``READY`` once imported, then waits for ``CONTROL_DIR/go`` (which holds the
start time, a ``time.time()`` value). Trial ``i`` begins at ``start + i * SPACING``
seconds: every process tries to acquire the lock of ``CONTROL_DIR/log-<i>`` (a directory
whose lock file names a process that has ended) at once and keeps what it wins until
all trials are over. It prints one JSON line: ``{"won": [...], "refused": {i: message}}``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from towerkit.trainers import LogdirLock, LogdirLockedError

SPACING = 0.25
"""Seconds between the starts of two trials."""


def main() -> None:
    control, trials = sys.argv[1], int(sys.argv[2])
    print("READY", flush=True)
    go = os.path.join(control, "go")
    while not os.path.exists(go):
        time.sleep(0.005)
    time.sleep(0.05)
    with open(go, encoding="utf-8") as f:
        start = float(f.read())
    held, won, refused = [], [], {}
    for i in range(trials):
        time.sleep(max(0.0, start + i * SPACING - time.time()))
        lock = LogdirLock(os.path.join(control, f"log-{i}"))
        try:
            lock.acquire()
        except LogdirLockedError as err:
            refused[i] = str(err)
        else:
            held.append(lock)
            won.append(i)
    time.sleep(max(0.0, start + trials * SPACING - time.time()))
    print(json.dumps({"pid": os.getpid(), "won": won, "refused": refused}), flush=True)


if __name__ == "__main__":
    main()
