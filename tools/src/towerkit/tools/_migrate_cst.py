"""The rewrite of one tensorpack module into a towerkit module, on libcst's concrete syntax tree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, ScopeProvider

from towerkit.tools._migrate_api import Fate, contrib_fate, tensorpack_fate
from towerkit.tools._migrate_calls import CallRules
from towerkit.tools._migrate_names import (
    GONE,
    KEEP_TENSORPACK,
    KEPT_MODULES,
    MODULE_HOMES,
    REMOVED,
    RENAMED,
    STAR_MODULES,
    STAR_ONLY,
    home_of,
)
from towerkit.tools._migrate_old import modernize
from towerkit.tools._migrate_rnn import LAYERS_MODULES, RNN_MODULES, rnn_move, tf_layers_move
from towerkit.tools._migrate_scan import CONFIG_CALLS, LOGDIR_CALLS, STAR_CANDIDATES, Scan
from towerkit.tools._migrate_syntax import (
    BASIC_CONFIG,
    Migrated,
    Note,
    after_imports,
    alias_name,
    call_name,
    configure_logging,
    dotted,
    imports_tensorpack,
    logdir_of,
    parse_expr,
)
from towerkit.tools._migrate_tf import compat_name
from towerkit.tools._migrate_tf1 import ITERATOR_METHODS, find_arg, upgrade_call


class Migrator(CallRules):
    """Rewrite tensorpack imports, the logger's log directory, inputs and TensorFlow 1 calls."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, scan: Scan, script_stem: str) -> None:
        super().__init__()
        self.scan = scan
        self.stem = script_stem
        self.notes: list[Note] = []
        self.imports: dict[str, set[str]] = {}
        self.need_logging = False
        self.tf_layers_line = 0  # the first tf.layers use, when the module has one
        self.scopes: list[str] = []
        self._tf = scan.tf_alias_is_v2
        self.kept: list[tuple[int, str]] = []  # (line, tensorpack module kept)
        self.logger_from_star = False
        self.module_aliases: dict[str, str] = {}  # bound name -> towerkit module
        self.removed: set[int] = set()  # ids of top-level statements removed
        self.logdir_placed = False
        self._tf_moves: dict[int, Note] = {}
        self.tf_layers_refs = 0  # expressions that became tf_layers (its import is needed)
        self.tf_layers_uses: dict[int, int] = {}  # id of a tf.layers name needing tf-keras -> line
        self.removed_calls: set[int] = set()  # ids of the names of removed wrappers' calls
        self.rnn_alias = False  # rnn is tensorflow.contrib.rnn, imported from towerkit.layers now  # id of a renamed tf attribute -> its note

    # -- reporting ------------------------------------------------------------------------
    def need(self, module: str, name: str) -> None:
        self.imports.setdefault(module, set()).add(name)

    def keep(self, node: cst.CSTNode, module: str) -> None:
        """Note an import that stays on tensorpack (reported with the install line)."""
        self.kept.append((self._line(node), module))

    # -- scopes ---------------------------------------------------------------------------
    # -- wrappers removed (PrintData): a use other than a call is left by hand -------------
    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value in REMOVED:
            self.removed_calls.add(id(node.func))

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        self.removed_calls.add(id(node.name))  # an imported name is not a use

    def leave_Name(self, original_node: cst.Name, updated_node: Any) -> Any:
        name = original_node.value
        if name in REMOVED and id(original_node) not in self.removed_calls:
            self.manual(original_node, f"{name} used other than called: {REMOVED[name]}")
        return updated_node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: Any) -> Any:
        self.scopes.pop()
        return updated_node

    # -- imports --------------------------------------------------------------------------
    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: Any) -> Any:
        if original_node.relative or original_node.module is None:
            return updated_node
        module = dotted(original_node.module) or ""
        if module == "tensorflow.contrib" and not isinstance(original_node.names, cst.ImportStar):
            names = [a.name.value for a in original_node.names if isinstance(a.name, cst.Name)]
            if names == ["slim"]:
                self.change(
                    original_node, "tensorflow.contrib.slim -> tf_slim (pip install tf-slim)"
                )
                return cst.Import(
                    names=[cst.ImportAlias(cst.Name("tf_slim"), cst.AsName(cst.Name("slim")))]
                )
            if names == ["rnn"] and alias_name(original_node.names[0]) is None:
                self.need("towerkit.layers", "rnn")
                self.rnn_alias = True
                self.change(original_node, "tensorflow.contrib.rnn -> rnn (from towerkit.layers)")
                return cst.RemovalSentinel.REMOVE
        if module != "tensorpack" and not module.startswith("tensorpack."):
            return updated_node
        if isinstance(original_node.names, cst.ImportStar):
            if module.startswith(KEPT_MODULES):
                self.keep(original_node, module)
                return updated_node
            wanted = self.scan.unresolved  # read in some scope, bound in none (scope analysis)
            names = sorted(wanted & STAR_CANDIDATES)
            for name in names:
                self._import_name(original_node, name, None, module, star=True)
            modules = sorted(wanted & set(STAR_MODULES)) if module == "tensorpack" else []
            for name in modules:
                self._star_module(original_node, name)
            self._star_leftovers(original_node, module, {*names, *modules})
            self.change(
                original_node,
                f"from {module} import * -> the names it used, each from its towerkit lib",
            )
            return cst.RemovalSentinel.REMOVE
        kept = []
        for alias in original_node.names:
            name = alias.name.value if isinstance(alias.name, cst.Name) else ""
            asname = alias_name(alias)
            home = MODULE_HOMES.get(f"{module}.{name}")
            if home is not None:
                bound = asname or name
                self.module_aliases[bound] = home
                self.need(f"{home} as {bound}", "")
                self.change(original_node, f"{module}.{name} -> {home} (as {bound})")
                continue
            if name == "logger" and (
                module == "tensorpack" or module.startswith("tensorpack.utils")
            ):
                self.need_logging = True
                self.change(original_node, "tensorpack's logger -> logging.getLogger(__name__)")
                continue
            if not self._import_name(original_node, name, asname, module, star=False):
                kept.append(alias.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        if not kept:
            return cst.RemovalSentinel.REMOVE
        if len(kept) == len(original_node.names):
            return updated_node
        return updated_node.with_changes(names=kept, lpar=None, rpar=None)

    def _import_name(
        self, node: cst.CSTNode, name: str, asname: str | None, module: str, *, star: bool
    ) -> bool:
        """Add the import of `name` at its new home; False when it stays (kept or by hand)."""
        if name == "InputDesc":
            self.change(node, "InputDesc -> tf.TensorSpec (the import is dropped)")
            return True
        if name in REMOVED:
            self.change(node, f"{name} (from {module}): import dropped; {REMOVED[name]}")
            return True
        home = home_of(name, module)
        if home is None:
            fate = tensorpack_fate(module, name)
            hint = fate.why if fate is not None and fate.why else GONE.get(name)
            self.manual(node, f"{name} (from {module}): {hint or 'no towerkit counterpart'}")
            return star
        if home == module:
            if star:
                self.need(home, name)
            self.keep(node, home)
            return False
        if home.startswith("tensorpack"):
            self.keep(node, home)
        target = RENAMED.get(name, name) if home.startswith("towerkit.") else name
        if name == "QueueInput":  # its calls are rewritten to IterableInput(...)
            self.need(home, target)
        elif target != name:  # an alias of tensorpack's (TowerFuncWrapper): the name stays bound
            self.need(home, f"{target} as {asname or name}")
        else:
            self.need(home, name if asname is None else f"{name} as {asname}")
        if not star:
            self.change(node, f"{module}.{name} -> {home}.{target}")
        return True

    def _star_module(self, node: cst.CSTNode, name: str) -> None:
        """A module the star import bound (``summary``): imported from its home by name."""
        home = STAR_MODULES[name]
        if home.startswith("tensorpack"):
            self.need("tensorpack", name)
            self.keep(node, home)
            return
        self.module_aliases[name] = home
        self.need(f"{home} as {name}", "")
        self.change(node, f"tensorpack.{name} (from the star import) -> {home} (as {name})")

    def _star_leftovers(self, node: cst.CSTNode, module: str, mapped: set[str]) -> None:
        """Report the names a star import gave that have no towerkit home; map its logger."""
        left = {n for n in self.scan.unresolved - mapped if not n.startswith("__")}
        if "logger" in left:
            left.discard("logger")
            if not self.logger_from_star:  # once, though two star imports may give it
                self.change(node, "tensorpack's logger -> logging.getLogger(__name__)")
            self.need_logging = self.logger_from_star = True
        if self.scan.other_star:
            return  # another star import may give these names
        for name in sorted(left):
            if name in GONE:
                hint = GONE[name]
            elif module == "tensorpack" and name not in STAR_CANDIDATES | STAR_ONLY:
                hint = "not defined in this module, and tensorpack's star import does not give it"
            else:
                hint = "no towerkit counterpart"
            self.manual(node, f"{name} (from {module} import *): {hint}")

    def leave_Import(self, original_node: cst.Import, updated_node: Any) -> Any:
        names = []
        for alias in original_node.names:
            name = dotted(alias.name) or ""
            if name == "tensorflow.contrib.slim":
                self.change(
                    original_node, "tensorflow.contrib.slim -> tf_slim (pip install tf-slim)"
                )
                names.append(alias.with_changes(name=parse_expr("tf_slim")))
            elif name == "tensorpack" and not self._tp_module_used(alias):
                self.change(
                    original_node, "import tensorpack dropped (its names now come from towerkit)"
                )
            else:
                names.append(alias)
        if not names:
            return cst.RemovalSentinel.REMOVE
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=names)

    def _tp_module_used(self, alias: cst.ImportAlias) -> bool:
        return self.scan.tp_left > 0

    # -- attributes: tensorpack.X and tf.X ------------------------------------------------
    def leave_Attribute(self, original_node: cst.Attribute, updated_node: Any) -> Any:
        name = dotted(original_node)
        if name is None:
            return updated_node
        head, _, rest = name.partition(".")
        if (
            head == "tf"
            and self.scan.tf_alias_is_v1
            and (tf_layers_move(name) or name in LAYERS_MODULES)
        ):  # tf is tf.compat.v1: its layers functions go to tf_layers all the same
            return self._tf_attribute(original_node, updated_node, name)
        if head in self.module_aliases and "." not in rest:
            target = self.module_aliases[head]
            if target.startswith("towerkit.") and home_of(rest) != target:
                self.manual(original_node, f"{name}: {target} has no {rest}")
            return updated_node
        if head in self.scan.tp_aliases:
            home = home_of(rest) if "." not in rest else None
            if home is not None and home.startswith("towerkit."):
                new = RENAMED.get(rest, rest)
                self.need(home, new)
                self.change(original_node, f"{name} -> {new} (from {home})")
                return cst.Name(new)
            return updated_node
        if head == "tf" and self._tf:
            return self._tf_attribute(original_node, updated_node, name)
        if (
            head == "tf"
            and self.scan.tf_alias_is_v1
            and (tf_layers_move(name) or name == "tf.layers")
        ):
            return self._tf_attribute(original_node, updated_node, name)
        if head == "rnn" and self.rnn_alias and "." not in rest:
            move = rnn_move(f"tf.contrib.rnn.{rest}")
            if move is not None and move.manual:
                self.manual(original_node, move.note.replace("tf.contrib.rnn.", "rnn.", 1))
        return updated_node

    def _tf_attribute(self, original_node: cst.Attribute, updated_node: Any, name: str) -> Any:
        move = rnn_move(name)
        if move is not None:
            if move.needs_rnn:
                self.need("towerkit.layers", "rnn")
            self._supersede(original_node)
            (self.manual if move.manual else self.change)(original_node, move.note)
            self._tf_moves[id(original_node)] = self.notes[-1]
            return parse_expr(move.new)
        fate = contrib_fate(name) if name.startswith("tf.contrib.") else None
        if fate is not None:
            return self._contrib(original_node, updated_node, name, fate)
        if name.startswith("tf.contrib.") and name.count(".") == 2:
            self.manual(
                original_node,
                f"{name}: tf.contrib is gone; find its TensorFlow 2 or add-on replacement",
            )
            self._tf_moves[id(original_node)] = self.notes[-1]
            return updated_node
        layer = "tf_layers" if name in LAYERS_MODULES else tf_layers_move(name)
        if layer is not None:
            self._supersede(original_node)
            self.tf_layers_uses.pop(id(original_node.value), None)
            self.need("towerkit.layers", "tf_layers")
            self.change(original_node, f"{name} -> {layer} (from towerkit.layers, no Keras)")
            self._tf_moves[id(original_node)] = self.notes[-1]
            self.tf_layers_refs += 1
            return parse_expr(layer)
        module, _, last = name.rpartition(".")
        if module in LAYERS_MODULES:  # a name tf_layers lacks (a Keras layer class): tf-keras's
            if self._tf_moves.get(id(original_node.value)) is not None:
                self.tf_layers_refs -= 1  # the tf.layers prefix is not tf_layers after all
            self._supersede(original_node)
            new = f"tf.compat.v1.layers.{last}"
            self.tf_layers_uses[id(original_node)] = self._line(original_node)
            self.change(original_node, f"{name} -> {new} (tf-keras's, once enable_tf_layers() ran)")
            self._tf_moves[id(original_node)] = self.notes[-1]
            return parse_expr(new)
        if name == "tf.placeholder" and self.scopes[-1:] == ["inputs"]:
            return updated_node  # becomes a tf.TensorSpec in leave_Call
        found = compat_name(name)
        if found is None:
            return updated_node
        new, why = found
        if new.startswith("tf.compat.v1.layers"):
            self._supersede(original_node)
            # tf.layers itself: needs tf-keras unless the whole name goes to tf_layers
            self.tf_layers_uses[id(original_node)] = self._line(original_node)
            self.change(original_node, f"{name} -> {new} (tf-keras's, once enable_tf_layers() ran)")
            self._tf_moves[id(original_node)] = self.notes[-1]
            return parse_expr(new)
        self._supersede(original_node)
        self.change(original_node, f"{name} -> {new} ({why})")
        self._tf_moves[id(original_node)] = self.notes[-1]
        return parse_expr(new)

    def _contrib(
        self, original_node: cst.Attribute, updated_node: Any, name: str, fate: Fate
    ) -> Any:
        """A tf.contrib name the API record accounts for: converted, or reported with its reason."""
        self._supersede(original_node)
        if fate.kind != "convert":
            self.manual(original_node, f"{name}: {fate.why}")
            self._tf_moves[id(original_node)] = self.notes[-1]
            return updated_node
        if fate.target.startswith("towerkit."):
            self.need(fate.home, fate.new_name)
            new = fate.new_name
        else:
            if "." not in fate.target:  # a module of its own: tf_slim
                self.need(fate.target, "")
            new = fate.target
        self.change(original_node, f"{name} -> {new}" + (f" ({fate.why})" if fate.why else ""))
        self._tf_moves[id(original_node)] = self.notes[-1]
        return parse_expr(new)

    def _supersede(self, original_node: cst.Attribute) -> None:
        """Drop the note of a renamed prefix: the whole name's change reports it.

        tf.distributions in tf.distributions.Normal, tf.nn.rnn_cell in tf.nn.rnn_cell.LSTMCell.
        """
        inner = self._tf_moves.pop(id(original_node.value), None)
        if inner is not None:
            self.notes.remove(inner)

    # -- calls ------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: Any) -> Any:
        name = call_name(original_node)
        last = name.split(".")[-1]
        if self._tf and name.startswith("tf."):
            updated_node = self._tf_call(original_node, updated_node, name)
        elif self._tf and last in ITERATOR_METHODS:
            rewrite = upgrade_call(name, updated_node)
            if rewrite is not None:
                self.change(original_node, rewrite.note)
                return rewrite.node
        if name in REMOVED:
            first = find_arg(updated_node, "ds", 0)
            if first is None or first.star:
                self.manual(original_node, f"{name}(...): {REMOVED[name]}: remove it by hand")
                return updated_node
            self.change(original_node, f"{name}(df, ...) -> df: {REMOVED[name]}")
            return first.value
        if name in ("tf.placeholder", "tf.compat.v1.placeholder") and self.scopes[-1:] == [
            "inputs"
        ]:
            return self._spec_call(original_node, updated_node, "tf.placeholder")
        if name == "InputDesc":
            return self._spec_call(original_node, updated_node, "InputDesc")
        if name == "QueueInput":
            self.change(original_node, "QueueInput(df) -> IterableInput(df)")
            if len(original_node.args) > 1:
                self.manual(
                    original_node,
                    "QueueInput's queue argument has no IterableInput counterpart (prefetch=n)",
                )
            return updated_node.with_changes(
                func=cst.Name("IterableInput"), args=updated_node.args[:1]
            )
        if name == "BatchQueueInput":
            self.need("tensorpack.dataflow", "BatchData")
            self.change(original_node, "BatchQueueInput(df, n) -> IterableInput(BatchData(df, n))")
            inner = updated_node.with_changes(
                func=cst.Name("BatchData"), args=updated_node.args[:2]
            )
            return cst.Call(func=cst.Name("IterableInput"), args=[cst.Arg(inner)])
        if name == "logger.get_logger_dir":
            self.manual(
                original_node,
                "logger.get_logger_dir(): use trainer.logdir (self.trainer.logdir in a callback)",
            )
        if last in ("load_existing_json", "load_existing_epoch_number") and not original_node.args:
            self.manual(
                original_node, f"JSONWriter.{last}() needs the log directory as its argument"
            )
        if last in CONFIG_CALLS:
            for arg in original_node.args:
                if arg.keyword is not None and arg.keyword.value == "data":
                    code = cst.Module(body=[]).code_for_node(arg.value)
                    if "Dataset" in code or "tf.data" in code:
                        self.manual(
                            original_node,
                            f"{last}(data={code[:40]}...): a dataset built outside the trainer's "
                            "graph is refused; pass a function building it: data=lambda: ...",
                        )
        if last in CONFIG_CALLS or name.endswith(".train_with_defaults"):
            return self._add_logdir(original_node, updated_node, name)
        return updated_node

    # -- statements: the logger's log directory -------------------------------------------
    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: Any
    ) -> Any:
        new = self._statement(original_node, updated_node)
        if new is cst.RemovalSentinel.REMOVE or not new.body:
            self.removed.add(id(original_node))
            return cst.RemovalSentinel.REMOVE
        return new

    def _statement(self, original_node: cst.SimpleStatementLine, updated_node: Any) -> Any:
        body = original_node.body
        if self._tf and len(body) == 1 and isinstance(body[0], cst.Assign) and _rnn_alias(body[0]):
            # rnn = tf.contrib.rnn: the added ``from towerkit.layers import rnn`` binds it
            self.notes.remove(self._tf_moves.pop(id(body[0].value)))
            self.change(original_node, f"{dotted(body[0].value)} alias removed: rnn is imported")
            return cst.RemovalSentinel.REMOVE
        if (
            len(body) != 1
            or not isinstance(body[0], cst.Expr)
            or not isinstance(body[0].value, cst.Call)
        ):
            return updated_node
        call = body[0].value
        name = dotted(call.func) or ""
        if name not in (f"logger.{c}" for c in LOGDIR_CALLS):
            return updated_node
        found = logdir_of(call, self.stem)
        if found is None:
            self.manual(original_node, f"{name}() without a directory: pass logdir= by hand")
            return updated_node
        if found[2]:
            self.need("os", "")
        self.change(
            original_node,
            f"{name}(...) removed: its directory goes to logdir= of the config or trainer",
        )
        return cst.RemovalSentinel.REMOVE

    # -- the module: new imports ----------------------------------------------------------
    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.scan.logdir is not None and not self.logdir_placed:
            self.notes.append(
                Note(
                    line=self.scan.logdir_calls[0][1],
                    text=f"logger's directory {self.scan.logdir[0]}: no TrainConfig(...) or "
                    "train_with_defaults(...) call took it: pass logdir= to the trainer by hand",
                    manual=True,
                )
            )
        self.tf_layers_line = min(self.tf_layers_uses.values(), default=0)
        if self.tf_layers_refs <= 0:
            self.imports.get("towerkit.layers", set()).discard("tf_layers")
            if self.imports.get("towerkit.layers") == set():
                del self.imports["towerkit.layers"]
        layers = self.tf_layers_line and not self.scan.enables_tf_layers
        if layers:
            self.need("towerkit.towers", "enable_tf_layers")
            self.notes.append(
                Note(
                    line=self.tf_layers_line,
                    text="tf.compat.v1.layers is tf-keras's: enable_tf_layers() goes after the "
                    "imports (pip install 'towerkit-towers[layers]')",
                )
            )
        lines = []
        for module in sorted(self.imports):
            names = sorted(n for n in self.imports[module] if n)
            if not names:
                lines.append(f"import {module}\n")
            else:
                lines.append(f"from {module} import {', '.join(names)}\n")
        logger = self.need_logging and self.scan.logger_uses > (0 if self.logger_from_star else 1)
        # tensorpack printed its INFO lines (describe_trainable_vars' table among them)
        info = logger or (self.scan.logs_info and self.scan.main_block)
        if info and not self.scan.imports_logging:
            lines.insert(0, "import logging\n")
        new: list[Any] = [cst.parse_statement(line) for line in lines]
        after: list[Any] = []
        if logger:
            after.append(cst.parse_statement("logger = logging.getLogger(__name__)\n"))
        if layers:
            after.append(cst.parse_statement("enable_tf_layers()\n"))
        body: list[Any] = list(updated_node.body)
        if info:
            body, placed = configure_logging(body)
            if logger and not placed and self.scan.config_scopes:
                after.append(cst.parse_statement(BASIC_CONFIG))
        if not new and not after:
            return updated_node.with_changes(body=body)
        at = self._anchor(original_node, body)
        end = max(at, after_imports(body))
        body = [*body[:at], *new, *body[at:end], *after, *body[end:]]
        return updated_node.with_changes(body=body)

    def _anchor(self, original_node: cst.Module, body: Sequence[cst.CSTNode]) -> int:
        """Where new imports go: where the first tensorpack import was, else after the imports.

        A star import of the program's own after tensorpack's then still wins, as before.
        """
        kept = 0
        for stmt in original_node.body:
            if imports_tensorpack(stmt):
                return kept
            kept += id(stmt) not in self.removed
        return after_imports(body)


def _rnn_alias(node: cst.Assign) -> bool:
    """``rnn = tf.contrib.rnn`` (or another cell module): the alias the import replaces."""
    target = node.targets[0].target if len(node.targets) == 1 else None
    named_rnn = isinstance(target, cst.Name) and target.value == "rnn"
    return named_rnn and dotted(node.value) in RNN_MODULES


def migrate_source(source: str, script_stem: str) -> Migrated:
    """Rewrite one module's source; `script_stem` names ``auto_set_dir``'s directory.

    Raises:
        libcst.ParserSyntaxError: the source is not valid Python.
    """
    old = modernize(source)  # tensorpack 0.8-0.10's ModelDesc first, at the original lines
    wrapper = MetadataWrapper(cst.parse_module(old.source))
    scan = Scan()
    scan.stem = script_stem
    wrapper.visit(scan)
    for scope in set(wrapper.resolve(ScopeProvider).values()):
        if scope is not None:
            scan.unresolved |= {
                a.node.value
                for a in scope.accesses
                if not a.referents and isinstance(a.node, cst.Name)
            }
    migrator = Migrator(scan, script_stem)
    new = wrapper.visit(migrator)
    notes: list[Note] = [*old.notes]
    notes += [attrs.evolve(n, line=old.original_line(n.line)) for n in migrator.notes]
    if migrator.kept:
        line = old.original_line(min(line for line, _ in migrator.kept))
        modules = ", ".join(sorted({m for _, m in migrator.kept}))
        notes.append(
            Note(
                line=line,
                text=f"{modules} stay on tensorpack: install it ({KEEP_TENSORPACK})",
                manual=True,
            )
        )
    notes.sort(key=lambda n: (n.line, n.manual))
    return Migrated(source=new.code, notes=notes, keeps_tensorpack=bool(migrator.kept))
