"""The lib's version and public names: each declared once, in ``__init__.pyi``."""

import importlib
import importlib.metadata
from pathlib import Path

import pytest

import towerkit.callbacks as lib
from towerkit.callbacks._lazy import read_stub

STUB = Path(lib.__file__).with_suffix(".pyi")


class TestVersion:
    """`__version__` matches the installed distribution."""

    def test_matches_metadata(self):
        """The module's version is the distribution's version."""
        assert lib.__version__ == importlib.metadata.version("towerkit-callbacks")


class TestPublicNames:
    """``__all__`` is the stub's names; each resolves, on first use, to its module's object."""

    def test_all_is_the_stub(self):
        """``__all__`` lists the names the stub imports, in its order, each once."""
        homes = read_stub(STUB.read_text(encoding="utf-8"), str(STUB))
        assert lib.__all__ == list(homes)
        assert len(set(lib.__all__)) == len(lib.__all__) > 100
        assert all(module.startswith("towerkit.callbacks._") for module in homes.values())

    def test_each_resolves_to_its_module(self):
        """Each name is the object its module defines, and is kept on the package."""
        homes = read_stub(STUB.read_text(encoding="utf-8"), str(STUB))
        for name, module in homes.items():
            value = getattr(lib, name)
            assert value is getattr(importlib.import_module(module), name), name
            assert vars(lib)[name] is value
        assert set(lib.__all__) <= set(dir(lib))

    def test_star_import(self):
        """``from towerkit.callbacks import *`` binds every public name."""
        namespace: dict[str, object] = {}
        exec("from towerkit.callbacks import *", namespace)
        assert set(lib.__all__) <= set(namespace)
        assert namespace["ModelSaver"] is lib.ModelSaver

    def test_unknown_name(self):
        """An unknown attribute raises AttributeError naming the module and the name."""
        with pytest.raises(
            AttributeError, match=r"^module 'towerkit.callbacks' has no attribute 'Nope'$"
        ):
            lib.Nope  # noqa: B018


class TestMovedPlumbing:
    """Names moved to ``plumbing`` resolve at the old place, with a warning, for one release."""

    def test_moved_plumbing(self):
        """A moved name is plumbing's object, found at the old place with a DeprecationWarning."""
        import towerkit.callbacks.plumbing as plumbing

        assert set(lib._MOVED).isdisjoint(lib.__all__)
        for name in lib._MOVED:
            assert name in plumbing.__all__
            with pytest.warns(DeprecationWarning, match=f"towerkit.callbacks.{name} moved to "):
                old = getattr(lib, name)
            assert old is getattr(plumbing, name)
            assert name not in dir(lib)

    def test_plumbing_is_documented_as_such(self):
        """The module says whom it is for and that it promises no stability."""
        import towerkit.callbacks.plumbing as plumbing

        assert "for towerkit's own libs" in plumbing.__doc__
        assert "no stability promise" in plumbing.__doc__
        missing = [n for n in plumbing.__all__ if not hasattr(plumbing, n)]
        assert missing == []
