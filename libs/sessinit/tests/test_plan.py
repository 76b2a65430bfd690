"""The pure restore plan: records, pairing by name, mismatch classification and messages."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sessinit_strategies import DTYPES, restore_cases, shapes, var_sets

from towerkit.sessinit import (
    Assignment,
    RestorePlan,
    VarInfo,
    describe_unused,
    plan_restore,
    unused_kinds,
)
from towerkit.sessinit._plan import (
    can_reshape,
    can_upcast,
    normalize_name,
    render_mismatches,
    render_names,
    render_nothing_restored,
    restores_nothing,
    target_name,
)


def vi(name: str, shape=(), dtype="float32") -> VarInfo:
    return VarInfo(name=name, shape=shape, dtype=dtype)


class TestNormalizeName:
    """`normalize_name` drops the ``:0`` of a variable's tensor name."""

    def test_strips(self):
        """``x:0`` becomes ``x``; other names stay."""
        assert normalize_name("scope/x:0") == "scope/x"
        assert normalize_name("scope/x") == "scope/x"
        assert normalize_name("x:1") == "x:1"

    def test_fail(self):
        """A name that is not a string is a TypeError."""
        with pytest.raises(TypeError, match=r"variable name 3 is a int: expected a str"):
            normalize_name(3)

    @given(name=st.text(min_size=1))
    def test_idempotent(self, name):
        """Appending ``:0`` to a normalized name normalizes back to that name."""
        once = normalize_name(name)
        assert normalize_name(once + ":0") == once


class TestVarInfo:
    """`VarInfo` describes a variable without values."""

    def test_repr(self):
        """The repr shows the normalized fields."""
        assert repr(vi("a:0", [2, 3], np.float16)) == (
            "VarInfo(name='a', shape=(2, 3), dtype='float16')"
        )

    def test_dtypes(self):
        """NumPy, TensorFlow-style and reference dtype names are canonicalized."""
        assert vi("a", dtype=np.dtype("float64")).dtype == "float64"
        assert vi("a", dtype="float32_ref").dtype == "float32"
        assert vi("a", dtype="bfloat16").dtype == "bfloat16"
        assert vi("a", dtype=np.dtype("S3")).dtype == "string"

    def test_fail(self):
        """Empty names, negative sizes and string shapes are rejected."""
        with pytest.raises(ValueError, match=r"variable name '' is empty"):
            vi("")
        with pytest.raises(ValueError, match=r"shape \(2, -1\) has negative dimensions \[-1\]"):
            vi("a", (2, -1))
        with pytest.raises(TypeError, match=r"shape '12' is a str"):
            vi("a", "12")

    def test_describe(self):
        """`describe` gives dtype and shape, with ``?`` for unknown sizes."""
        assert vi("a", (None, 3), "int64").describe() == "int64 (?, 3)"
        assert vi("a", (None, 3)).size is None
        assert vi("a", (2, 3)).size == 6

    @given(shape=shapes, dtype=st.sampled_from(DTYPES))
    def test_frozen_roundtrip(self, shape, dtype):
        """`attrs.evolve` re-validates and keeps equal records equal."""
        v = vi("x:0", shape, dtype)
        assert attrs.evolve(v, name="x") == v
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            v.name = "y"


class TestUpcastReshape:
    """`can_upcast` and `can_reshape` decide what relaxed restores repair."""

    def test_upcast_examples(self):
        """Widening is fixable; narrowing and int-to-float are not."""
        assert can_upcast("float16", "float32")
        assert can_upcast("bfloat16", "float64")
        assert can_upcast("uint8", "int16")
        assert not can_upcast("float64", "float32")
        assert not can_upcast("int32", "float32")
        assert not can_upcast("float32", "float32")

    @given(a=st.sampled_from(DTYPES), b=st.sampled_from(DTYPES), c=st.sampled_from(DTYPES))
    def test_upcast_is_strict_order(self, a, b, c):
        """Upcasting is irreflexive, antisymmetric and transitive."""
        assert not can_upcast(a, a)
        assert not (can_upcast(a, b) and can_upcast(b, a))
        if can_upcast(a, b) and can_upcast(b, c):
            assert can_upcast(a, c)

    @given(a=st.sampled_from(DTYPES), b=st.sampled_from(DTYPES))
    def test_upcast_is_lossless(self, a, b):
        """Every NumPy-representable upcast is safe by NumPy's casting rules."""
        if can_upcast(a, b) and "bfloat16" not in (a, b):
            assert np.can_cast(a, b, casting="safe")

    @given(a=shapes, b=shapes)
    def test_reshape_symmetric(self, a, b):
        """Reshape fixability is symmetric and means equal element counts."""
        assert can_reshape(a, b) == can_reshape(b, a)
        assert can_reshape(a, b) == (int(np.prod(a)) == int(np.prod(b)))

    def test_reshape_unknown(self):
        """An unknown size makes a reshape unfixable."""
        assert not can_reshape((3,), (None,))


class TestAssignment:
    """`Assignment` pairs a source entry with its graph variable."""

    def test_repr(self):
        """The repr shows both records."""
        a = Assignment(source=vi("W"), target=vi("net/W"))
        assert repr(a) == (
            "Assignment(source=VarInfo(name='W', shape=(), dtype='float32'), "
            "target=VarInfo(name='net/W', shape=(), dtype='float32'))"
        )

    def test_fail(self):
        """Both sides must be VarInfo records."""
        with pytest.raises(TypeError, match=r"'source' must be <class"):
            Assignment(source="W", target=vi("W"))

    def test_fixes(self):
        """Fixes list the conversions; unknown graph sizes match any size."""
        a = Assignment(source=vi("a", (3,), "float16"), target=vi("a", (1, 3), "float32"))
        assert (a.cast, a.reshape, a.fixable, a.fixes) == (True, True, True, ("upcast", "reshape"))
        b = Assignment(source=vi("a", (3, 4)), target=vi("a", (None, 4)))
        assert b.exact
        assert b.fixes == ()
        c = Assignment(source=vi("a", (3,), "float64"), target=vi("a", (3,), "float32"))
        assert not c.fixable

    def test_describe(self):
        """The description names both sides, with the graph name only when it differs."""
        a = Assignment(source=vi("W", (2,)), target=vi("p/W", (3,)))
        assert a.describe() == "'W' -> 'p/W': source float32 (2,), graph float32 (3,)"
        b = Assignment(source=vi("W", (2,)), target=vi("W", (3,)))
        assert b.describe() == "'W': source float32 (2,), graph float32 (3,)"


class TestRestorePlan:
    """`RestorePlan` holds the outcome of `plan_restore`."""

    def test_repr(self):
        """An empty plan prints all its fields."""
        assert repr(RestorePlan()) == (
            "RestorePlan(matched=(), mismatches=(), missing=(), unused=(), ignored=(), "
            "relaxed=False)"
        )

    def test_fail(self):
        """Matched pairs must agree and mismatched pairs must differ."""
        bad = Assignment(source=vi("a", (2,)), target=vi("a", (3,)))
        good = Assignment(source=vi("a"), target=vi("a"))
        with pytest.raises(ValueError, match=r"'matched' holds pairs whose shape or dtype differ"):
            RestorePlan(matched=[bad])
        with pytest.raises(ValueError, match=r"'mismatches' holds pairs that agree"):
            RestorePlan(mismatches=[good])
        with pytest.raises(TypeError, match=r"'relaxed' must be <class 'bool'>"):
            RestorePlan(relaxed=1)

    def test_tuples(self):
        """Sequences become tuples sorted by name, so plans compare and hash."""
        plan = RestorePlan(missing=[vi("b"), vi("a")])
        assert plan.missing == (vi("a"), vi("b"))
        assert hash(plan) == hash(RestorePlan(missing=(vi("b"), vi("a"))))


class TestPlanRestore:
    """`plan_restore` pairs entries with variables by name."""

    def test_prefix_and_ignore(self):
        """Prefix maps source names into the graph; ignore skips by either name."""
        src = [vi("W"), vi("b"), vi("lr"), vi("extra")]
        graph = [vi("net/W:0"), vi("net/b:0"), vi("net/lr:0"), vi("net/new:0")]
        plan = plan_restore(src, graph, prefix="net/", ignore=["lr:0", "net/b"])
        assert [a.target.name for a in plan.restored] == ["net/W"]
        assert [v.name for v in plan.ignored] == ["b", "lr"]
        assert [v.name for v in plan.unused] == ["extra"]
        assert [v.name for v in plan.missing] == ["net/new"]

    def test_ignore_graph_only(self):
        """A graph variable named in `ignore` is not reported missing."""
        plan = plan_restore([], [vi("a"), vi("b")], ignore=("a",))
        assert [v.name for v in plan.missing] == ["b"]

    def test_relaxed(self):
        """Relaxed plans restore fixable mismatches; strict ones report them."""
        src = [vi("a", (3,), "float16"), vi("b", (2,)), vi("c", (4,), "float64")]
        graph = [vi("a", (3,)), vi("b", (1, 2)), vi("c", (4,))]
        strict = plan_restore(src, graph)
        relaxed = plan_restore(src, graph, relaxed=True)
        assert strict.restored == ()
        assert len(strict.at_fault) == 3
        assert [a.target.name for a in relaxed.restored] == ["a", "b"]
        assert [a.target.name for a in relaxed.at_fault] == ["c"]

    def test_fail(self):
        """Duplicate names, a single-string ignore and a bad prefix are rejected."""
        with pytest.raises(ValueError, match=r"source entries share names \['a'\]"):
            plan_restore([vi("a"), vi("a:0")], [])
        with pytest.raises(ValueError, match=r"graph variables share names \['g'\]"):
            plan_restore([], [vi("g:0"), vi("g")])
        with pytest.raises(TypeError, match=r"'ignore' is the string 'lr': expected a sequence"):
            plan_restore([], [], ignore="lr")
        with pytest.raises(TypeError, match=r"'prefix' 3 is a int"):
            plan_restore([], [], prefix=3)
        with pytest.raises(
            TypeError, match=r"source entries must be VarInfo records: got \['str'\]"
        ):
            plan_restore(["a"], [])

    @given(case=restore_cases(), relaxed=st.booleans())
    def test_partitions(self, case, relaxed):
        """Every source entry and every graph variable lands in exactly one place."""
        source, graph, prefix, ignore = case
        plan = plan_restore(source, graph, prefix, ignore, relaxed)
        pairs = plan.matched + plan.mismatches
        placed = [a.source.name for a in pairs] + [v.name for v in plan.unused + plan.ignored]
        assert sorted(placed) == sorted(v.name for v in source)
        skip = {normalize_name(n) for n in ignore}
        targets = [a.target.name for a in pairs]
        ignored_targets = {target_name(v.name, prefix) for v in plan.ignored}
        for var in graph:
            spots = [
                var.name in targets,
                var in plan.missing,
                var.name in skip or var.name in ignored_targets,
            ]
            assert sum(spots) == 1
        assert len(set(targets)) == len(targets)
        for a in pairs:
            assert a.target.name == target_name(a.source.name, prefix)
            assert a.source.name not in skip
            assert a.target.name not in skip

    @given(case=restore_cases())
    def test_relaxed_extends_strict(self, case):
        """Relaxing only moves fixable mismatches from at-fault to restored."""
        source, graph, prefix, ignore = case
        strict = plan_restore(source, graph, prefix, ignore, relaxed=False)
        relaxed = plan_restore(source, graph, prefix, ignore, relaxed=True)
        assert set(strict.restored) <= set(relaxed.restored)
        assert set(relaxed.at_fault) <= set(strict.at_fault)
        assert set(relaxed.restored) | set(relaxed.at_fault) == set(strict.restored) | set(
            strict.at_fault
        )
        assert all(a.fixable for a in relaxed.restored)
        assert not set(relaxed.restored) & set(relaxed.at_fault)

    @given(vars_=var_sets())
    def test_identity(self, vars_):
        """A source restoring into a graph of the same records matches everything."""
        plan = plan_restore(vars_, [attrs.evolve(v, name=v.name + ":0") for v in vars_])
        assert len(plan.matched) == len(vars_)
        assert plan.missing == plan.unused == plan.mismatches == plan.ignored == ()

    @given(case=restore_cases())
    def test_ignore_everything(self, case):
        """Ignoring every source name restores nothing and reports nothing unused."""
        source, graph, prefix, _ = case
        plan = plan_restore(source, graph, prefix, [v.name for v in source])
        assert plan.restored == plan.mismatches == plan.unused == ()


class TestRender:
    """Messages rendered from plans list every entry at fault."""

    def test_mismatches(self):
        """Each mismatch at fault appears with both shapes and dtypes, and its fix."""
        src = [vi("a", (3,), "float16"), vi("b", (2,), "int32")]
        graph = [vi("p/a", (3,)), vi("p/b", (5,), "int32")]
        text = render_mismatches(plan_restore(src, graph, prefix="p"), "'ckpt'")
        assert text.splitlines() == [
            "cannot restore 2 variables from 'ckpt': shapes or dtypes differ between the "
            "source and the graph:",
            "  'a' -> 'p/a': source float16 (3,), graph float32 (3,) (fixable by upcast)",
            "  'b' -> 'p/b': source int32 (2,), graph int32 (5,)",
        ]

    def test_names_limit(self):
        """`render_names` can cut a long list and say how many are left out."""
        text = render_names([vi(f"v{i}") for i in range(5)], limit=2)
        assert text.splitlines()[-1] == "  ... and 3 more"

    def test_summary(self):
        """The summary counts each category."""
        plan = plan_restore([vi("a"), vi("b", (2,)), vi("u")], [vi("a"), vi("b"), vi("m")])
        assert plan.summary() == (
            "1 restored, 1 mismatched, 1 missing in the source, 1 unused in the source"
        )


class TestRestoresNothing:
    """`restores_nothing`: a source with entries, a graph with variables, and no name in common."""

    @given(restore_cases())
    def test_definition(self, case):
        """Without `ignore`: true exactly when both sides have names and none pairs."""
        source, graph, prefix, _ = case
        plan = plan_restore(source, graph, prefix=prefix)
        paired = {target_name(v.name, prefix) for v in source} & {
            normalize_name(v.name) for v in graph
        }
        assert restores_nothing(plan) == (bool(source) and bool(graph) and not paired)

    @given(restore_cases())
    def test_ignored_entries_are_not_unused(self, case):
        """Ignoring every entry of the source is deliberate: never this error."""
        source, graph, prefix, _ = case
        plan = plan_restore(source, graph, prefix=prefix, ignore=[v.name for v in source])
        assert not restores_nothing(plan)

    @given(var_sets(), var_sets())
    def test_message_lists_both_sides(self, source, graph):
        """Every entry and every variable is named in the message."""
        names = {v.name for v in source}
        graph = [v for v in graph if v.name not in names]
        plan = plan_restore(source, graph)
        if not restores_nothing(plan):
            assert not source or not graph
            return
        message = render_nothing_restored(plan, "'ckpt'")
        assert message.startswith("nothing to restore from 'ckpt'")
        for v in (*source, *graph):
            assert repr(v.name) in message


class TestUnusedKinds:
    """Unused entries of a training checkpoint are named by kind in the summary."""

    @given(
        st.lists(
            st.from_regex(r"[a-z]{1,3}(/(Adam|Adam_1|Momentum|EMA|x))?(/average)?", fullmatch=True),
            max_size=20,
        )
    )
    def test_each_name_in_one_kind(self, names):
        """Every name lands in exactly one kind, in the order given; `describe_unused` is empty
        exactly when all are others."""
        kinds = unused_kinds(names)
        flat = [n for _, items in kinds for n in items]
        assert sorted(flat) == sorted(names)
        assert [k for k, _ in kinds] == [
            k for k in ("optimizer slots", "moving averages", "others") if k in dict(kinds)
        ]
        assert (describe_unused(names) == "") == all(k == "others" for k, _ in kinds)

    def test_training_checkpoint_summary(self):
        """A training checkpoint restored into its model: slots and moving averages are named."""
        model = [vi("fc/W", (2,)), vi("fc/b")]
        extra = [
            "fc/W/Adam",
            "fc/W/Adam_1",
            "fc/b/Adam",
            "fc/b/Adam_1",
            "beta1_power",
            "beta2_power",
            "EMA/cost/average",
            "EMA/cost/started",
            "global_step",
        ]
        plan = plan_restore(model + [vi(n) for n in extra], model)
        assert plan.summary() == (
            "2 restored, 9 unused in the source (6 optimizer slots, 2 moving averages, "
            "1 other: global_step)"
        )
