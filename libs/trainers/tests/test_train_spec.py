"""`TrainSpec`: the frozen, validated record of a run's options behind `TrainConfig`."""

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import LoopBounds
from towerkit.trainers._train_spec import TrainSpec

epochs = st.integers(min_value=1, max_value=50)
steps = st.integers(min_value=1, max_value=200)


class TestLoopBounds:
    """The one place the loop's bounds are made from the options."""

    @given(epochs, st.integers(min_value=0, max_value=20), steps)
    def test_given_steps(self, starting, extra, per_epoch):
        """Given steps per epoch win over the input's size; the record is a `LoopBounds`."""
        spec = TrainSpec(
            starting_epoch=starting, max_epoch=starting - 1 + extra, steps_per_epoch=per_epoch
        )
        want = LoopBounds(
            starting_epoch=starting, max_epoch=starting - 1 + extra, steps_per_epoch=per_epoch
        )
        assert spec.loop_bounds() == want
        assert spec.loop_bounds(input_size=per_epoch + 1) == want

    @given(steps, st.integers(min_value=1, max_value=8))
    def test_input_size_and_k(self, size, k):
        """Without steps per epoch, the input's size; K must divide it, checked then."""
        spec = TrainSpec(max_epoch=2, steps_per_execution=k)
        if size % k == 0:
            assert spec.loop_bounds(input_size=size).steps_per_epoch == size
        else:
            with pytest.raises(ValueError, match="must divide 'steps_per_epoch'"):
                spec.loop_bounds(input_size=size)

    def test_neither(self):
        """No steps per epoch and no input size: a ValueError saying so."""
        with pytest.raises(ValueError, match="'steps_per_epoch' is needed"):
            TrainSpec(max_epoch=2).loop_bounds()

    @given(steps, st.integers(min_value=2, max_value=9))
    def test_k_checked_at_construction(self, per_epoch, k):
        """With steps per epoch given, a K that does not divide it fails at construction."""
        if per_epoch % k:
            with pytest.raises(ValueError, match="must divide"):
                TrainSpec(max_epoch=1, steps_per_epoch=per_epoch, steps_per_execution=k)
        else:
            TrainSpec(max_epoch=1, steps_per_epoch=per_epoch, steps_per_execution=k)


class TestRecord:
    """Frozen, with its options converted and checked field by field."""

    def test_frozen(self):
        spec = TrainSpec(max_epoch=2)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            spec.max_epoch = 3

    def test_conversions(self, tmp_path):
        """Callback lists become tuples; the log directory an absolute path."""
        spec = TrainSpec(callbacks=None, logdir=tmp_path / "run")
        assert spec.callbacks == ()
        assert spec.extra_callbacks is None
        assert spec.logdir == str(tmp_path / "run")

    @pytest.mark.parametrize(
        ("options", "error", "match"),
        [
            ({"data": 3}, TypeError, "'data' must be an InputSource"),
            ({"model": object()}, TypeError, "'model' must be a ModelDesc; got object"),
            ({"session_creator": 1}, TypeError, "'session_creator' must have a create_session"),
            ({"session_init": "x"}, TypeError, "'session_init' must have an init"),
            ({"logdir": 3}, TypeError, "'logdir' must be a path or None; got int"),
            ({"logdir_action": "wipe"}, ValueError, "'logdir_action' must be one of"),
            ({"steps_per_execution": 0}, ValueError, "steps_per_execution"),
            ({"max_epoch": -5}, ValueError, "'max_epoch' must be >="),
            ({"dataflow": [1], "data": lambda: None}, ValueError, "'dataflow' or 'data', not both"),
            ({"session_creator": None, "session_config": 1}, None, None),
        ],
    )
    def test_faults_named(self, options, error, match):
        """Each bad option is named with what was expected."""
        if error is None:
            TrainSpec(**options)
            return
        with pytest.raises(error, match=match):
            TrainSpec(**options)
