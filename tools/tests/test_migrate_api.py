"""The account of tensorpack 0.11's public names and of the tf.contrib names its programs use
(``tensorpack_api.json``): every name has a fate, every target exists, the command does what
the record says, and (where tensorpack 0.11 is installed) the record lists its names."""

from __future__ import annotations

import importlib
import importlib.util
import json
import pkgutil

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import towerkit.tools
from towerkit.tools._migrate_api import (
    FATES,
    Fate,
    api_record,
    contrib_fates,
    fate_of,
    tensorpack_fates,
)
from towerkit.tools._migrate_cst import migrate_source

RECORD = api_record()

EXCLUDED_MODULES = ("tensorpack.tfutils.unit_tests",)
"""tensorpack's own tests, not its API."""


def entries() -> list[tuple[str, str, object]]:
    return [
        (module, name, entry)
        for module, names in RECORD["tensorpack"].items()
        for name, entry in names.items()
    ]


class TestRecord:
    """The record accounts for every name, and each fate is well formed."""

    def test_every_name_has_a_fate(self):
        """A name without a fate (null, or a malformed entry) fails, named."""
        bad = []
        for module, name, entry in entries():
            try:
                fate_of(entry)
            except ValueError as err:
                bad.append(f"{module}.{name}: {err}")
        for name, entry in RECORD["tf.contrib"].items():
            try:
                fate_of(entry)
            except ValueError as err:
                bad.append(f"{name}: {err}")
        assert not bad, "names not accounted for:\n" + "\n".join(bad)

    def test_every_documented_module(self):
        """The packages the issue names are all accounted for, with their names."""
        modules = set(RECORD["tensorpack"])
        for module in [
            "tensorpack",
            "tensorpack.tfutils",
            "tensorpack.callbacks",
            "tensorpack.train",
            "tensorpack.models",
            "tensorpack.predict",
            "tensorpack.graph_builder",
            "tensorpack.input_source",
            "tensorpack.dataflow",
            "tensorpack.utils",
            "tensorpack.tfutils.tower",
            "tensorpack.tfutils.varmanip",
        ]:
            assert module in modules
            assert RECORD["tensorpack"][module], module
        assert RECORD["tensorpack_version"] == "0.11"
        contrib = set(RECORD["tf.contrib"])
        for name in [
            "tf.contrib.rnn.LSTMBlockCell",
            "tf.contrib.rnn.LSTMBlockFusedCell",
            "tf.contrib.rnn.GRUBlockCell",
            "tf.contrib.layers.l2_regularizer",
            "tf.contrib.layers.apply_regularization",
            "tf.contrib.layers.variance_scaling_initializer",
            "tf.contrib.framework.nest",
        ]:
            assert name in contrib

    def test_convert_targets_exist(self):
        """Every converted name's target exists: a towerkit name, a TensorFlow one, a module."""
        missing = []
        fates = [f for names in tensorpack_fates().values() for f in names.values()]
        fates += list(contrib_fates().values())
        for fate in {f for f in fates if f.kind == "convert"}:
            target = fate.target
            if target == "tf_slim" or target == "logging.getLogger":
                continue
            if target.startswith("tf."):
                obj: object = tf
                for part in target.split(".")[1:]:
                    obj = getattr(obj, part, None)
                if obj is None:
                    missing.append(target)
            elif importlib.util.find_spec(target.split(".")[0]) is not None:
                try:
                    importlib.import_module(target)
                except ImportError:
                    module = importlib.import_module(fate.home)
                    if not hasattr(module, fate.new_name):
                        missing.append(target)
            else:
                missing.append(target)
        assert not missing, missing

    def test_record_is_shipped(self):
        """The record is a file of the towerkit.tools package (in its wheel)."""
        path = towerkit.tools.__path__[0] + "/tensorpack_api.json"
        with open(path, encoding="utf-8") as file:
            assert json.load(file) == RECORD


class TestFateOf:
    """fate_of: the pure reading of one entry."""

    @given(st.sampled_from(FATES), st.text(max_size=20))
    def test_two_parts(self, kind, text):
        """[kind, text]: a target for convert, the reason otherwise."""
        fate = fate_of([kind, text])
        assert fate.kind == kind
        assert (fate.target if kind == "convert" else fate.why) == text

    @pytest.mark.parametrize(
        "entry", [None, [], ["keep"], ["gone", "x"], ["keep", "a", "b"], "keep"]
    )
    def test_fail(self, entry):
        """Anything else is refused, naming the entry."""
        with pytest.raises(ValueError, match=r"fate|'kind' must be one of"):
            fate_of(entry)

    def test_repr(self):
        """A fate prints as its record."""
        assert repr(Fate(kind="convert", target="towerkit.towers.TowerFunc")) == (
            "Fate(kind='convert', target='towerkit.towers.TowerFunc', why='')"
        )


def migrated(source: str):
    done = migrate_source(source, "prog")
    return done.source, done.notes


class TestCommandFollowsRecord:
    """For every recorded name, the command does what the record says."""

    @pytest.mark.parametrize("module", sorted(RECORD["tensorpack"]))
    def test_imports(self, module):
        """``from <module> import <name>``: converted to the target, kept, reported, removed."""
        wrong = []
        for name, entry in RECORD["tensorpack"][module].items():
            fate = fate_of(entry)
            source, notes = migrated(f"from {module} import {name}\n")
            texts = " | ".join(n.text for n in notes)
            if fate.kind == "convert" and fate.target == "logging.getLogger":
                ok = "logging.getLogger(__name__)" in texts
            elif (
                fate.kind == "convert"
                and "." in fate.target
                and fate.target.startswith("towerkit.")
            ):
                home, new = fate.home, fate.new_name
                ok = f"from {home} import" in source and new in source
                if not ok and importlib.util.find_spec(home) and _is_module(fate.target):
                    ok = f"import {fate.target} as {name}" in source
            elif fate.kind == "convert" and fate.target == "tf.TensorSpec":
                ok = "InputDesc -> tf.TensorSpec" in texts
            elif fate.kind == "convert":
                ok = f"import {fate.target} as {name}" in source
            elif fate.kind == "keep":
                # stays on tensorpack, imported from the module that defines it
                ok = f"import {name}" in source and "from tensorpack" in source
                ok = ok and "stay on tensorpack" in texts
            elif fate.kind == "report":
                ok = any(n.manual and fate.why in n.text for n in notes)
            else:
                ok = "import dropped" in texts and name not in source
            if not ok:
                wrong.append(f"{module}.{name} ({fate.kind}): {source!r} {texts}")
        assert not wrong, "\n".join(wrong)

    def test_contrib(self):
        """``tf.contrib.<...>`` used in a program: converted or reported as recorded."""
        wrong = []
        for name, fate in contrib_fates().items():
            source, notes = migrated(f"import tensorflow as tf\n\nx = {name}\n")
            texts = " | ".join(n.text for n in notes)
            if fate.kind == "convert":
                ok = (
                    f"x = {fate.new_name if fate.target.startswith('towerkit.') else fate.target}"
                    in source
                )
                if name.startswith("tf.contrib.rnn."):
                    ok = f"x = rnn.{fate.new_name}" in source
            else:
                ok = any(
                    n.manual and (fate.why in n.text or "rewrite it with its cells" in n.text)
                    for n in notes
                )
            if not ok:
                wrong.append(f"{name} ({fate.kind}): {source!r} {texts}")
        assert not wrong, "\n".join(wrong)


def _is_module(dotted: str) -> bool:
    try:
        importlib.import_module(dotted)
    except ImportError:
        return False
    return True


def live_surface() -> dict[str, set[str]]:
    """Every public name of the installed tensorpack, as the record was built: each module's
    ``__all__``, or the names it defines where it has none (its callables where ``__all__``
    is empty); the package itself: every name its star imports bind."""
    import tensorpack
    import tensorpack.tfutils

    modules = [
        "tensorpack",
        *(
            f"tensorpack.{m}"
            for m in ("tfutils", "callbacks", "train", "models", "predict", "graph_builder")
        ),
        "tensorpack.input_source",
        "tensorpack.dataflow",
        "tensorpack.utils",
    ]
    modules += [
        f"tensorpack.tfutils.{m.name}"
        for m in pkgutil.iter_modules(tensorpack.tfutils.__path__)
        if not m.name.endswith("_test") and f"tensorpack.tfutils.{m.name}" not in EXCLUDED_MODULES
    ]
    surface = {}
    for name in modules:
        mod = importlib.import_module(name)
        defined = {
            n
            for n, o in vars(mod).items()
            if not n.startswith("_") and getattr(o, "__module__", None) == name
        }
        if name == "tensorpack":
            names = {n for n in vars(mod) if not n.startswith("_")}
        elif hasattr(mod, "__all__"):
            names = set(mod.__all__) or {n for n in defined if callable(getattr(mod, n))}
        else:
            names = defined
        surface[name] = names
    del tensorpack
    return surface


@pytest.mark.skipif(
    importlib.util.find_spec("tensorpack") is None, reason="tensorpack 0.11 is not installed"
)
class TestAgainstTensorpack:
    """Where tensorpack 0.11 is installed: the record lists exactly its names."""

    def test_same_names(self):
        """No name of tensorpack is missing from the record, none recorded is gone."""
        import tensorpack

        assert tensorpack.__version__ == RECORD["tensorpack_version"]
        live = live_surface()
        recorded = {m: set(names) for m, names in RECORD["tensorpack"].items()}
        missing = {m: sorted(live[m] - recorded.get(m, set())) for m in live}
        extra = {m: sorted(recorded[m] - live.get(m, set())) for m in recorded}
        assert not {m: n for m, n in missing.items() if n}, f"not accounted for: {missing}"
        assert not {m: n for m, n in extra.items() if n}, f"recorded, not in tensorpack: {extra}"
