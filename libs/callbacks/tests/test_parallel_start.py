"""Before a pool starts: the machine's limits on workers, and a main module that would re-run."""

from __future__ import annotations

import sys

from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks._parallel_start import (
    guarded_offsets,
    machine_limits,
    unguarded_main_line,
)
from towerkit.callbacks.plumbing import StartLimit, timeout_message

GUARD = 'if __name__ == "__main__":'
statements = st.sampled_from(["x = 1", "import os", "y = [len(str(1))]", "def f():\n    return 1"])


def offsets_at_marks(source: str) -> dict[str, bool]:
    """Run `source` as a module; for each ``mark("name")`` call, whether it ran at an
    offset `guarded_offsets` counts as under the main guard."""
    code = compile(source, "<script>", "exec")
    ranges = guarded_offsets(code)
    seen: dict[str, bool] = {}

    def mark(name):
        at = sys._getframe(1).f_lasti
        seen[name] = any(start < at < end for start, end in ranges)

    exec(code, {"__name__": "__main__", "mark": mark})
    return seen


class TestGuardedOffsets:
    """`guarded_offsets` finds the bytecode under a top-level main guard."""

    @given(st.lists(statements, max_size=4), st.lists(statements, max_size=3), st.booleans())
    def test_marks_inside_and_outside(self, before, inside, reversed_test):
        """A call before the guard is outside it; a call in its body, after any statements,
        is inside; a call after the guard block is outside."""
        body = "\n".join("    " + line for s in inside for line in s.splitlines())
        test = '"__main__" == __name__' if reversed_test else '__name__ == "__main__"'
        source = "\n".join(
            [*before, 'mark("before")', f"if {test}:", body, '    mark("inside")', 'mark("after")']
        )
        assert offsets_at_marks(source + "\n") == {"before": False, "inside": True, "after": False}

    @given(st.lists(statements, max_size=6))
    def test_no_guard(self, lines):
        """A script without the guard has none (a guard nested in a function, or another
        test, does not count)."""
        other = 'if __name__ != "__main__":\n    pass\ndef g():\n    if __name__ == "__main__":\n        pass'
        code = compile("\n".join([*lines, other]) + "\n", "<script>", "exec")
        assert guarded_offsets(code) == []


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
