"""Before a pool starts: the machine's limits on workers, and a main module that would re-run."""

from __future__ import annotations

import sys

from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks._parallel_start import (
    guarded_lines,
    machine_limits,
    unguarded_main_line,
)
from towerkit.callbacks.plumbing import StartLimit, timeout_message

GUARD = 'if __name__ == "__main__":'
statements = st.sampled_from(["x = 1", "import os", "print(x)", "def f():\n    return 1"])


class TestGuardedLines:
    """`guarded_lines` finds the lines under a top-level main guard."""

    @given(st.lists(statements, max_size=5), st.lists(statements, min_size=1, max_size=4))
    def test_the_guarded_block(self, before, inside):
        """The guard's lines are found, from the ``if`` to its last line, and only them."""
        head = "\n".join(before)
        body = "\n".join("    " + line for s in inside for line in s.splitlines())
        source = (head + "\n" if head else "") + GUARD + "\n" + body + "\n"
        first = len(head.splitlines()) + 1
        assert guarded_lines(source) == [(first, first + len(body.splitlines()))]

    @given(st.lists(statements, max_size=6))
    def test_no_guard(self, lines):
        """A script without the guard has no guarded line (a guard nested in a function
        or with another test does not count)."""
        other = 'if __name__ != "__main__":\n    pass\ndef g():\n    if __name__ == "__main__":\n        pass'
        assert guarded_lines("\n".join([*lines, other]) + "\n") == []

    def test_reversed_and_single_quotes(self):
        """``"__main__" == __name__`` and single quotes are guards too."""
        assert guarded_lines("if '__main__' == __name__:\n    main()\n") == [(1, 2)]


class TestUnguardedMainLine:
    """`unguarded_main_line` in this process (pytest's main module is guarded)."""

    def test_none_under_pytest_and_fork(self):
        """pytest runs its tests from inside its own main guard; ``fork`` re-imports nothing."""
        assert unguarded_main_line("fork") is None
        assert unguarded_main_line("forkserver") is None
        assert unguarded_main_line("spawn") is None


class TestMachineLimits:
    """`machine_limits` reads this machine's limits."""

    def test_limits(self):
        """Each limit names itself and leaves room for >= 0 workers; Linux has open files."""
        limits = machine_limits()
        assert all(isinstance(x, StartLimit) and x.workers >= 0 for x in limits)
        if sys.platform.startswith("linux"):
            assert any(x.what.startswith("open files: ulimit -n") for x in limits)


class TestTimeoutMessage:
    """`timeout_message`: one message for every bounded wait on an input."""

    @given(
        st.sampled_from(["IterableInput(Flow)", "ParallelIterable(Flow, workers=2)"]),
        st.floats(0.1, 1e5),
        st.integers(1, 10**6),
        st.integers(0, 10**6),
    )
    def test_names_what_and_how_long(self, name, timeout, passes, count):
        """It names the input, the datapoint waited for (or a pass's start), the timeout,
        and the option to raise on that input's own class."""
        msg = timeout_message(name, timeout + 0.04, timeout, passes, count)
        assert msg.startswith(f"{name}: the iterable gave no datapoint for ")
        assert f"(timeout={timeout:g} s)" in msg
        where = f"datapoint #{count} of pass {passes}" if count else f"the start of pass {passes}"
        assert f"waiting for {where};" in msg
        assert msg.endswith(f"give {name.split('(')[0]} a larger 'timeout'")
