"""PredictConfig and its record: what is accepted, what is rejected, and why."""

from __future__ import annotations

import attrs
import pytest
import tensorflow as tf
from export_strategies import op_names
from hypothesis import given
from hypothesis import strategies as st
from models import SIGNATURE, convnet

from towerkit.export import PredictConfig, PredictSpec
from towerkit.sessinit import DictRestore, JustCurrentSession
from towerkit.towers import FLOAT32, POLICIES, Precision, TowerFunc, precision_policy


class Model:
    """A model description as a ModelDesc has it: `inputs()` and `build_graph(*inputs)`."""

    def inputs(self):
        return list(SIGNATURE)

    def build_graph(self, image, label):
        return convnet(image, label)


class TestPredictSpec:
    """`PredictSpec` holds the checked names."""

    def test_repr(self):
        """The repr shows every field."""
        spec = PredictSpec(input_signature=SIGNATURE, output_names=["prob"])
        assert repr(spec).startswith("PredictSpec(input_signature=(TensorSpec(")
        assert (
            "input_names=('image', 'label'), output_names=('prob',), return_input=False, precision='float32')"
            in repr(spec)
        )

    @given(st.sampled_from(sorted(POLICIES)), st.booleans())
    def test_precision_is_the_record(self, name, as_record):
        """A policy's name or record becomes the record, the config's too; the default is float32."""
        given_as = precision_policy(name) if as_record else name
        spec = PredictSpec(input_signature=SIGNATURE, output_names=["prob"], precision=given_as)
        assert isinstance(spec.precision, Precision)
        assert spec.precision == precision_policy(name)
        assert f"precision={name!r})" in repr(spec)
        config = PredictConfig(
            tower_func=convnet, input_signature=SIGNATURE, output_names=["prob"], precision=name
        )
        assert config.precision == precision_policy(name)
        assert PredictSpec(input_signature=SIGNATURE, output_names=["prob"]).precision is FLOAT32

    def test_unknown_precision(self):
        """An unknown policy is refused at the boundary, naming the valid ones."""
        with pytest.raises(ValueError, match="mixed_bfloat16"):
            PredictSpec(input_signature=SIGNATURE, output_names=["prob"], precision="half")

    def test_fail(self):
        """Bad names are rejected, also through `attrs.evolve`."""
        spec = PredictSpec(input_signature=SIGNATURE, output_names=["prob"])
        with pytest.raises(ValueError, match=r"'input_names' must not repeat a name"):
            attrs.evolve(spec, input_names=["image", "image"])
        with pytest.raises(ValueError, match=r"'output_names' is empty"):
            attrs.evolve(spec, output_names=[])
        with pytest.raises(
            TypeError,
            match=r"'input_signature' entries must be tf.TensorSpec; entries at fault: 0: str",
        ):
            PredictSpec(input_signature=["image"], output_names=["prob"])

    @given(st.lists(op_names, min_size=1, max_size=5, unique=True), st.data())
    def test_input_specs(self, names, data):
        """`input_specs` are the signature's specs of the input names, in input order."""
        signature = [tf.TensorSpec([None], tf.float32, n) for n in names]
        chosen = data.draw(st.permutations(names))[: data.draw(st.integers(1, len(names)))]
        spec = PredictSpec(input_signature=signature, input_names=chosen, output_names=["y"])
        assert [s.name for s in spec.input_specs] == list(chosen)
        assert spec.input_signature == tuple(signature)

    def test_other_tensor_names(self):
        """Names of other tensors of the tower are kept; they have no spec before building."""
        spec = PredictSpec(
            input_signature=SIGNATURE, input_names=["z", "image"], output_names=["p"]
        )
        assert spec.input_names == ("z", "image")
        assert [s.name for s in spec.input_specs] == ["image"]


class TestPredictConfig:
    """`PredictConfig` checks everything at construction."""

    def test_tower_func(self):
        """A callable with its signature: names default to the whole signature."""
        config = PredictConfig(tower_func=convnet, input_signature=SIGNATURE, output_names=["prob"])
        assert config.input_names == ("image", "label")
        assert config.output_names == ("prob",)
        assert isinstance(config.session_init, JustCurrentSession)
        assert config.tower_fn is convnet
        assert config.return_input is False
        assert repr(config) == (
            "PredictConfig(tower_fn=convnet, input_names=['image', 'label'], "
            "output_names=['prob'], session_init=JustCurrentSession())"
        )

    def test_towerfunc_object(self):
        """A TowerFunc brings its signature; each `tower_func` access is a new, empty one."""
        config = PredictConfig(
            tower_func=TowerFunc(convnet, SIGNATURE), input_names=["image"], output_names=["prob"]
        )
        assert config.input_signature == SIGNATURE
        assert config.tower_func is not config.tower_func
        assert len(config.tower_func.towers) == 0

    def test_model(self):
        """A model description gives the function and the signature."""
        model = Model()
        config = PredictConfig(model=model, input_names=["image"], output_names=["prob:0"])
        assert config.model is model
        assert config.input_signature == SIGNATURE
        assert config.tower_fn == model.build_graph

    def test_model_signature_preferred(self):
        """A model's validated `get_input_signature()` is used when it has one."""

        class Described(Model):
            def inputs(self):
                raise AssertionError("inputs() is reached through get_input_signature()")

            def get_input_signature(self):
                return SIGNATURE

        config = PredictConfig(model=Described(), output_names=["prob"])
        assert config.input_signature == SIGNATURE

    def test_fail(self):
        """Each wrong argument is named, with what was expected and what was received."""
        with pytest.raises(
            ValueError, match=r"exactly one of 'model' and 'tower_func'; got neither"
        ):
            PredictConfig(output_names=["prob"])
        with pytest.raises(ValueError, match=r"got both"):
            PredictConfig(model=Model(), tower_func=convnet, output_names=["prob"])
        with pytest.raises(
            TypeError,
            match=r"'model' must have `build_graph\(\*inputs\)` and `inputs\(\)`.*got int",
        ):
            PredictConfig(model=3, output_names=["prob"])
        with pytest.raises(ValueError, match=r"do not pass it with 'model'"):
            PredictConfig(model=Model(), input_signature=SIGNATURE, output_names=["prob"])
        with pytest.raises(
            ValueError, match=r"'input_signature' is required with a plain callable"
        ):
            PredictConfig(tower_func=convnet, output_names=["prob"])
        with pytest.raises(
            TypeError, match=r"'tower_func' must be a TowerFunc or a callable; got str"
        ):
            PredictConfig(tower_func="convnet", input_signature=SIGNATURE, output_names=["prob"])
        with pytest.raises(
            ValueError, match=r"'input_signature' differs from the one of 'tower_func'"
        ):
            PredictConfig(
                tower_func=TowerFunc(convnet, SIGNATURE),
                input_signature=SIGNATURE[:1],
                output_names=["prob"],
            )
        with pytest.raises(ValueError, match=r"'input_names' is empty"):
            PredictConfig(
                tower_func=convnet, input_signature=SIGNATURE, input_names=[], output_names=["p"]
            )
        with pytest.raises(ValueError, match=r"'output_names' is required"):
            PredictConfig(tower_func=convnet, input_signature=SIGNATURE)
        with pytest.raises(TypeError, match=r"'session_init' must be a SessionInit.*got str"):
            PredictConfig(
                tower_func=convnet,
                input_signature=SIGNATURE,
                output_names=["prob"],
                session_init="ckpt",
            )
        with pytest.raises(
            TypeError, match=r"'session_creator' must have a create_session\(\) method; got object"
        ):
            PredictConfig(
                tower_func=convnet,
                input_signature=SIGNATURE,
                output_names=["prob"],
                session_creator=object(),
            )

    def test_keeps_session_init(self):
        """The given SessionInit is kept as is."""
        init = DictRestore({})
        config = PredictConfig(
            tower_func=convnet, input_signature=SIGNATURE, output_names=["prob"], session_init=init
        )
        assert config.session_init is init
