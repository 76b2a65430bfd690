"""The call rewrites of towerkit-migrate: TensorFlow 1 calls, input specs, logdir, tf.contrib."""

from __future__ import annotations

from typing import Any

import libcst as cst
from libcst.metadata import PositionProvider

from towerkit.tools._migrate_api import contrib_fate
from towerkit.tools._migrate_scan import Scan
from towerkit.tools._migrate_syntax import Note, keywords_for_positions, parse_expr
from towerkit.tools._migrate_tf import load_rules
from towerkit.tools._migrate_tf1 import find_arg, upgrade_call


class CallRules(cst.CSTTransformer):
    """The rewrites of one call each, shared by the migrator (which reports through them)."""

    METADATA_DEPENDENCIES = (PositionProvider,)
    scan: Scan
    scopes: list[str]
    logdir_placed: bool
    notes: list[Note]

    def _line(self, node: cst.CSTNode) -> int:
        try:
            return self.get_metadata(PositionProvider, node).start.line
        except KeyError:
            return 0

    def change(self, node: cst.CSTNode, text: str) -> None:
        self.notes.append(Note(line=self._line(node), text=text))

    def manual(self, node: cst.CSTNode, text: str) -> None:
        self.notes.append(Note(line=self._line(node), text=text, manual=True))

    def _tf_call(self, original_node: cst.Call, updated_node: Any, name: str) -> Any:
        rewrite = upgrade_call(name, updated_node)
        if rewrite is not None:
            self.change(original_node, rewrite.note)
            if rewrite.final:
                return rewrite.node
            updated_node = rewrite.node
        if name.startswith("tf.contrib."):
            return self._contrib_call(original_node, updated_node, name)
        rules = load_rules()
        args = list(updated_node.args)
        positional = [a for a in args if a.keyword is None and not a.star]
        if name == "tf.nn.dropout" and (
            len(positional) > 1 or any(a.keyword and a.keyword.value == "keep_prob" for a in args)
        ):
            self.change(
                original_node,
                "tf.nn.dropout(x, keep_prob) -> tf.compat.v1.nn.dropout (keep_prob kept)",
            )
            return updated_node.with_changes(func=parse_expr("tf.compat.v1.nn.dropout"))
        order = rules.reorders.get(name)
        named = keywords_for_positions(order or (), len(positional))
        if named and not any(a.star for a in args):
            new_args = []
            for i, arg in enumerate(args):
                if arg.keyword is None and i < len(named) and named[i] is not None:
                    arg = arg.with_changes(
                        keyword=cst.Name(str(named[i])),
                        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                    )
                new_args.append(arg)
            args = new_args
            names = ", ".join(str(n) for n in named if n is not None)
            self.change(
                original_node,
                f"{name}: positional arguments named ({names}), whose order changed in TensorFlow 2",
            )
        renames = rules.keyword_renames.get(name, {})
        if renames:
            renamed = []
            for arg in args:
                if arg.keyword is not None and arg.keyword.value in renames:
                    self.change(
                        original_node,
                        f"{name}: keyword {arg.keyword.value} -> {renames[arg.keyword.value]}",
                    )
                    arg = arg.with_changes(keyword=cst.Name(renames[arg.keyword.value]))
                renamed.append(arg)
            args = renamed
        return updated_node.with_changes(args=args)

    def _spec_call(self, original_node: cst.Call, updated_node: Any, what: str) -> Any:
        params = ["dtype", "shape", "name"]
        values: dict[str, cst.BaseExpression] = {}
        for i, arg in enumerate(updated_node.args):
            key = arg.keyword.value if arg.keyword is not None else params[i] if i < 3 else "?"
            values[key] = arg.value
        if set(values) - set(params) or "dtype" not in values:
            self.manual(
                original_node, f"{what}(...): write tf.TensorSpec(shape, dtype, name) by hand"
            )
            return updated_node
        self.change(
            original_node, f"{what}(dtype, shape, name) -> tf.TensorSpec(shape, dtype, name)"
        )
        new_args = [
            cst.Arg(values.get("shape", cst.Name("None"))),
            cst.Arg(values["dtype"]),
        ]
        if "name" in values:
            new_args.append(cst.Arg(values["name"]))
        return cst.Call(func=parse_expr("tf.TensorSpec"), args=new_args)

    def _add_logdir(self, original_node: cst.Call, updated_node: Any, name: str) -> Any:
        if self.scan.logdir_calls == [] or any(
            a.keyword is not None and a.keyword.value == "logdir" for a in original_node.args
        ):
            return updated_node
        if self.scan.logdir is None:
            return updated_node
        expr, action, scope = self.scan.logdir
        literal = expr.startswith(("'", '"', "os.path.join('train_log'"))
        if not literal and scope != ".".join(self.scopes):
            self.manual(
                original_node, f"pass logdir={expr} to {name}(...) (set by the logger elsewhere)"
            )
            return updated_node
        equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
        extra = [cst.Arg(parse_expr(expr), keyword=cst.Name("logdir"), equal=equal)]
        if action:
            extra.append(
                cst.Arg(
                    cst.SimpleString(repr(action)), keyword=cst.Name("logdir_action"), equal=equal
                )
            )
        self.logdir_placed = True
        self.change(
            original_node,
            f"{name}(...): logdir={expr}" + (f", logdir_action={action!r}" if action else ""),
        )
        args = list(updated_node.args)
        if args and isinstance(args[-1].comma, cst.Comma):
            # A trailing comma (one argument a line): the new ones follow the layout.
            last = args[-1].comma
            inner = (
                args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else last
            )
            args[-1] = args[-1].with_changes(comma=inner)
            extra = [a.with_changes(comma=inner) for a in extra[:-1]] + [
                extra[-1].with_changes(comma=last)
            ]
        elif args:
            args[-1] = args[-1].with_changes(
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            )
        return updated_node.with_changes(args=[*args, *extra])

    def _contrib_call(self, original_node: cst.Call, updated_node: Any, name: str) -> Any:
        """The arguments of a tf.contrib call whose name the API record converted."""
        fate = contrib_fate(name)
        if fate is None or fate.kind != "convert":
            return updated_node
        last = name.rpartition(".")[2]
        code = cst.Module(body=[]).code_for_node
        if last in ("l1_regularizer", "l2_regularizer"):
            scope = find_arg(updated_node, "scope", 1)
            if scope is None:
                return updated_node
            self.change(original_node, f"{name}: scope= dropped (the loss is named by its weight)")
            return updated_node.with_changes(
                args=[
                    a.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    for a in updated_node.args
                    if a is not scope
                ]
            )
        if last == "apply_regularization":
            reg = find_arg(updated_node, "regularizer", 0)
            weights = find_arg(updated_node, "weights_list", 1)
            if reg is None:
                return updated_node
            listed = (
                code(weights.value)
                if weights is not None
                and not (isinstance(weights.value, cst.Name) and weights.value.value == "None")
                else "tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.WEIGHTS)"
            )
            self.change(
                original_node,
                f"{name}(reg, weights) -> tf.add_n([reg(w) for w in weights]) (not added to "
                "REGULARIZATION_LOSSES, as TensorFlow 1 did: add it to the cost yourself)",
            )
            func = code(reg.value)
            if not isinstance(reg.value, cst.Name | cst.Attribute | cst.Call):
                func = f"({func})"
            return parse_expr(f"tf.add_n([{func}(_w) for _w in {listed}])")
        if last in (
            "variance_scaling_initializer",
            "xavier_initializer",
            "xavier_initializer_conv2d",
        ):
            return self._initializer(original_node, updated_node, name, last)
        return updated_node

    def _initializer(self, original_node: cst.Call, updated_node: Any, name: str, last: str) -> Any:
        """Contrib's variance scaling initializers as tf.compat.v1.variance_scaling_initializer."""
        code = cst.Module(body=[]).code_for_node
        xavier = last.startswith("xavier")
        params = (
            ("uniform", "seed", "dtype")
            if xavier
            else ("factor", "mode", "uniform", "seed", "dtype")
        )
        given = {p: find_arg(updated_node, p, i) for i, p in enumerate(params)}
        known = {a.keyword.value for a in updated_node.args if a.keyword is not None}
        if known - set(params) or any(a.star for a in updated_node.args):
            self.manual(
                original_node,
                f"{name}(...): arguments not understood; write "
                "tf.compat.v1.variance_scaling_initializer(scale, mode, distribution) by hand",
            )
            return updated_node
        if xavier:
            scale, mode = "1.0", '"fan_avg"'
        else:
            factor, mode_arg = given["factor"], given["mode"]
            scale = code(factor.value) if factor is not None else "2.0"
            if mode_arg is None:
                mode = '"fan_in"'
            elif isinstance(mode_arg.value, cst.SimpleString):
                mode = repr(str(mode_arg.value.evaluated_value).lower())
            else:
                mode = f"({code(mode_arg.value)}).lower()"
        uniform = given["uniform"]
        default_uniform = xavier  # xavier_initializer: uniform=True; variance scaling: False
        if uniform is None:
            dist = '"uniform"' if default_uniform else '"truncated_normal"'
        elif isinstance(uniform.value, cst.Name) and uniform.value.value in ("True", "False"):
            dist = '"uniform"' if uniform.value.value == "True" else '"truncated_normal"'
        else:
            dist = f'("uniform" if {code(uniform.value)} else "truncated_normal")'
        extra = "".join(
            f", {p}={code(arg.value)}" for p in ("seed", "dtype") if (arg := given[p]) is not None
        )
        new = f"tf.compat.v1.variance_scaling_initializer(scale={scale}, mode={mode}, distribution={dist}{extra})"
        self.change(
            original_node, f"{name}(...) -> {new} (as tf_upgrade_v2 writes it, without Keras)"
        )
        return parse_expr(new)
