"""Every lib's errors are named where users import them from: tracebacks and pickles."""

from __future__ import annotations

import importlib
import pickle
import traceback

import pytest

LIBS = ["sessinit", "towers", "callbacks", "trainers", "export", "conformance"]


def errors_of(lib: str) -> list[type]:
    module = importlib.import_module(f"towerkit.{lib}._errors")
    found = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Exception)]
    return [e for e in found if e.__module__.startswith("towerkit.")]


@pytest.mark.parametrize("lib", LIBS)
def test_errors_are_named_by_their_public_home(lib):
    """``towerkit.<lib>.SomeError``: the name resolves, a pickle round-trips, the traceback shows it."""
    errors = errors_of(lib)
    assert errors, lib
    package = importlib.import_module(f"towerkit.{lib}")
    for error in errors:
        assert error.__module__ == f"towerkit.{lib}", error
        assert getattr(package, error.__qualname__) is error
        assert error.__qualname__ in package.__all__
        try:
            instance = error("the message")
        except TypeError:  # takes more than a message
            continue
        again = pickle.loads(pickle.dumps(instance))
        assert type(again) is error
        assert str(again) == "the message"
        line = traceback.format_exception_only(instance)[-1]
        assert line == f"towerkit.{lib}.{error.__qualname__}: the message\n"
