"""ModelSaver, MinSaver and MaxSaver: checkpoints written atomically under the checkpoint directory."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from towerkit.callbacks._background_save import (
    SaveInFlight,
    Snapshot,
    build_snapshot,
    register_saver,
)
from towerkit.callbacks._base import Callback
from towerkit.callbacks._errors import CallbackError
from towerkit.callbacks._graph import _numerics_op, numerics_report
from towerkit.callbacks._positions import (
    POSITIONS_FILENAME,
    SavedPosition,
    merge_positions,
    position_now,
    read_positions,
    write_positions,
)
from towerkit.callbacks._pruning import (
    SaverState,
    after_save,
    plan_inherited,
    start_saver_state,
)
from towerkit.callbacks._stats import is_real_number
from towerkit.callbacks._timer import TimerState, WallClockInterval, advance_timer
from towerkit.callbacks._writers import require_logdir
from towerkit.sessinit import (
    atomic_save_checkpoint,
    checkpoint_step,
    move_checkpoints_aside,
    remove_stale_temporaries,
    require_globless,
    state_entry_inside,
    write_checkpoint_state,
)
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")

_CKPT_FILE = re.compile(r"\.(index|data-\d+-of-\d+)$")
_MODEL_FILE = re.compile(r"model-\d+(\..*)?")
_MODEL_STEM = re.compile(r"\.(index|meta|data-\d+-of-\d+)$")
_STATE_ENTRY = re.compile(
    r'^\s*all_model_checkpoint_paths\s*:\s*"((?:[^"\\]|\\.)*)"\s*$', re.MULTILINE
)


def _is_saver_file(name: str) -> bool:
    return name in ("checkpoint", POSITIONS_FILENAME) or _MODEL_FILE.fullmatch(name) is not None


def _collections(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return (tf1.GraphKeys.GLOBAL_VARIABLES,)
    if isinstance(value, str):
        return (value,)
    out = tuple(value)
    bad = [c for c in out if not isinstance(c, str)]
    if bad or not out:
        msg = f"'var_collections' must be a collection name or a non-empty list of names; got {value!r}"
        raise TypeError(msg)
    return out


class ModelSaver(Callback):
    """Save the model to ``<checkpoint_dir>/model-<global_step>`` when triggered (every epoch).

    A ``tf.compat.v1.train.Saver`` (format V2, one data shard, paths relative to the
    directory) is built in ``setup_graph`` over the variables of ``var_collections``.
    Each checkpoint is written under a temporary name and published whole, and the
    ``checkpoint`` state file is replaced atomically, so a crash never leaves a
    half-written checkpoint or a state file naming one.

    At ``after_train`` it also saves the final state when training stopped at an epoch
    boundary after the last save (for instance when the saver is triggered every few
    epochs, or a callback stopped training at the end of an epoch); a run stopped in
    the middle of an epoch is not saved there.

    Whatever the schedule of the saves, the newest two checkpoints saved at the end of
    an epoch are never pruned, on top of the ``max_to_keep`` newest ones: a resumed run
    (`AutoResumeTrainConfig`) restarts from the newest epoch-end checkpoint that
    ``stats.json`` recorded, so it ends at exactly the step count of an uninterrupted
    run. Checkpoints that the directory's state file lists count towards
    ``max_to_keep`` when a run resumes, as older than every checkpoint this run saves:
    pruning never deletes this run's newest checkpoint, whatever the steps of the
    others.

    Checkpoints of the directory saved at a later global step than the run starts
    from (another run's, copied in, or an epoch that a crash abandoned) are moved aside
    at ``before_train``, never deleted: into a new ``superseded-<timestamp>`` folder of
    the directory, with a copy of the state file (so ``SmartInit(folder)`` loads them),
    and a warning names them. The state file then names only the complete
    checkpoints left, and at every save only complete ones.

    After each save, ``positions.json`` in the directory (written atomically) records
    where in the loop each kept checkpoint was saved (`SavedPosition`: its epoch, the
    steps of it done, the steps of data the input gave), so `AutoResumeTrainConfig`
    can resume from one saved inside an epoch (every k steps, or by ``save_now`` when
    a preemption signal stops training) at exactly its step.

    **Every N minutes** (``every_n_minutes``): on top of its trigger (every epoch, or
    the schedule of a `PeriodicTrigger` around it), the saver saves after the step at
    which N minutes of wall clock (``time.monotonic``) have passed since its last save
    (whatever caused it) or since ``before_train``. On spot and preemptible machines
    this bounds what a kill without warning (SIGKILL, a machine reclaimed at once)
    loses to about N minutes of training plus one save; a preemption signal the
    trainer receives (SIGTERM) is no reason to wait for the timer: the trainer saves
    at once (`save_now`), and that save restarts the count too. A save inside an epoch
    records its position (below), so `AutoResumeTrainConfig` resumes at exactly that
    step; the count starts afresh in the resumed run. Timed saves count towards
    ``max_to_keep`` like the others (the newest two epoch-end checkpoints are kept
    whatever the timer saved since). The check costs one clock reading per step, and
    nothing when ``every_n_minutes`` is None. With K steps per session call
    (``steps_per_execution``) the clock is read after each call.

    **In the background** (``background=True``): at the step it saves, the saver
    copies the saved variables into snapshot variables of its own (one
    ``session.run`` of assignments on each variable's device: a memory copy of the
    model), and a writer thread writes and publishes the checkpoint from them while
    training goes on. The checkpoint is exactly that step's state, under the
    variables' own names, and is published as every other save is (whole, then the
    state file, ``positions.json`` and the pruning). One save is in flight at most: a
    save due while one is in flight waits for it first. A failed background save is
    raised (a `CallbackError` naming its step and cause) at the first step after it
    failed, or at the end of training, and never leaves a checkpoint that looks
    complete. The end of training, a preemption signal (``save_now``) and Ctrl-C
    wait for the save in flight; a `MinSaver`/`MaxSaver` waits for it before it
    copies the latest checkpoint. The snapshot doubles the memory the saved
    variables take; what the loop still spends per save is the copy (see
    ``benchmarks/bench_saving.py``). Variables must have static shapes and not be
    partitioned.

    The first save of a run is logged at INFO with the directory and what is kept; the
    later ones at DEBUG, so the console keeps one line per epoch.

    The saver reads, prunes and writes only inside its directory: a state file entry
    that points elsewhere (a copied log directory holds absolute paths into the
    original) is ignored with a warning, or taken as the checkpoint of the same name in
    this directory when there is one. Hidden temporaries that a killed save left in the
    directory are removed at ``before_train`` (logged).

    Args:
        max_to_keep: how many recent checkpoints to keep (older ones are deleted; 0
            keeps all), as in ``tf.compat.v1.train.Saver``, plus the newest two
            epoch-end checkpoints.
        keep_checkpoint_every_n_hours: additionally keep (never delete) one checkpoint
            per this many hours; "keep" does not mean "create".
        checkpoint_dir: where to save; the trainer's ``logdir`` by default.
        var_collections: the graph collection(s) whose variables to save; global
            variables by default.
        every_n_minutes: also save when this many minutes of wall clock have passed
            since the last save (see above); None: only when triggered.

            .. versionadded:: 0.2
        clock: the clock of ``every_n_minutes``, a function returning seconds
            (``time.monotonic`` by default; tests give a fake one).

            .. versionadded:: 0.2
        background: write each checkpoint on a thread while training goes on (see
            above); False (the default) saves inside the loop, as tensorpack does.

            .. versionadded:: 0.2

    Raises:
        GlobPathError: at ``setup_graph``, the directory's path holds a character
            TensorFlow reads as a glob pattern (checkpoints there could not be read back).
        ValueError: at ``setup_graph`` with ``background=True``, a saved variable is
            partitioned or has no static shape.
        CallbackError: a background save failed (raised at the next step, or at the end
            of training).
    """

    # with K steps per session call, the time trigger and a background save's outcome are
    # looked at once per call, after its last step
    accepts_coarse_steps = True

    def __init__(
        self,
        max_to_keep: int = 10,
        keep_checkpoint_every_n_hours: float = 0.5,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        var_collections: str | Sequence[str] | None = None,
        every_n_minutes: float | None = None,
        *,
        clock: Callable[[], float] | None = None,
        background: bool = False,
    ) -> None:
        if not isinstance(background, bool):
            msg = f"'background' must be True or False; got {background!r}"
            raise TypeError(msg)
        self._background = background
        self._snapshot: Snapshot | None = None
        self._flight = SaveInFlight("towerkit-save")
        if clock is not None and not callable(clock):
            msg = f"'clock' must be a function returning seconds; got {type(clock).__name__}"
            raise TypeError(msg)
        self._interval = (
            None if every_n_minutes is None else WallClockInterval.from_minutes(every_n_minutes)
        )
        self._clock = time.monotonic if clock is None else clock
        self._timer: TimerState | None = None
        if isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 0:
            msg = f"'max_to_keep' must be an int >= 0; got {max_to_keep!r}"
            raise ValueError(msg)
        hours = keep_checkpoint_every_n_hours
        if not is_real_number(hours) or not hours > 0:
            msg = f"'keep_checkpoint_every_n_hours' must be a number > 0; got {hours!r}"
            raise ValueError(msg)
        self._max_to_keep = max_to_keep
        self._hours = float(hours)
        self._dir_arg = None if checkpoint_dir is None else os.fspath(checkpoint_dir)
        self._collections = _collections(var_collections)
        self._dir: str | None = None
        self._saver: Any = None
        self._numerics: Any = None
        self._float_names: tuple[str, ...] = ()
        self._last_saved: int | None = None  # the last save started
        self._published: int | None = None  # the last one on disk
        self._start_step: int | None = None
        self._announced = False
        self._state = SaverState()

    @property
    def checkpoint_dir(self) -> str | None:
        """The directory checkpoints go to (known after ``setup_graph``)."""
        return self._dir if self._dir is not None else self._dir_arg

    @property
    def every_n_minutes(self) -> float | None:
        """The time trigger's period in minutes, or None.

        .. versionadded:: 0.2
        """
        return None if self._interval is None else self._interval.seconds / 60.0

    @property
    def background(self) -> bool:
        """Whether checkpoints are written on a thread while training goes on.

        .. versionadded:: 0.2
        """
        return self._background

    def has_hook(self, method: str) -> bool:
        if method == "_trigger_step":
            # the time trigger: one clock reading per step; a background save's
            # outcome: one look per step
            return self._interval is not None or self._background
        return super().has_hook(method)

    def _trigger_step(self) -> None:
        if self._flight.done():
            self._collect(self._flight.collect)
        if self._interval is None or self._timer is None:
            return
        due, self._timer = advance_timer(self._interval, self._timer, self._clock())
        if due:
            logger.debug(
                "ModelSaver: %g minutes since the last save at global step %d",
                self._interval.seconds / 60.0,
                self.trainer.global_step,
            )
            self._save()

    @property
    def saver(self) -> Any:
        """The ``tf.compat.v1.train.Saver`` (after ``setup_graph``)."""
        return self._saver

    def _setup_graph(self) -> None:
        self._dir = require_globless(
            require_logdir(self, self._dir_arg, "checkpoint_dir"), "checkpoint_dir"
        )
        seen, var_list = set(), []
        for name in self._collections:
            for v in self.graph.get_collection(name):
                if v.name not in seen:
                    seen.add(v.name)
                    var_list.append(v)
        if not var_list:
            msg = f"ModelSaver: the collections {list(self._collections)} hold no variables to save"
            raise ValueError(msg)
        floating = [v for v in var_list if v.dtype.base_dtype.is_floating]
        self._float_names = tuple(v.name for v in floating)
        self._numerics = _numerics_op(floating) if floating else None
        self._saver = tf1.train.Saver(
            var_list=var_list,
            max_to_keep=0,  # pruning is ModelSaver's (see plan_pruning)
            keep_checkpoint_every_n_hours=self._hours,
            write_version=tf1.train.SaverDef.V2,
            save_relative_paths=True,
            sharded=False,
        )
        if self._background:
            self._snapshot = build_snapshot(var_list, self._hours)
            register_saver(self)

    def wait(self) -> str | None:
        """Wait for the background save in flight; the checkpoint it published, or None.

        Raises:
            CallbackError: that save failed.

        .. versionadded:: 0.2
        """
        return self._collect(self._flight.wait)

    def settle(self) -> None:
        """Wait for the background save in flight, leaving its failure to the next step.

        .. versionadded:: 0.2
        """
        self._flight.settle()

    def _collect(self, outcome: Callable[[], str | None]) -> str | None:
        step = self._flight.step
        try:
            return outcome()
        except Exception as err:
            self._last_saved = self._published
            msg = (
                f"ModelSaver: the background save of global step {step} to {self._dir} "
                f"failed: {type(err).__name__}: {err}; nothing of it was published (the "
                f"latest checkpoint there is the one saved before it)"
            )
            raise CallbackError(msg) from err

    def _before_train(self) -> None:
        directory = str(self._dir)
        os.makedirs(directory, exist_ok=True)
        remove_stale_temporaries(directory, _is_saver_file, what="checkpoint")
        self._start_step = self.trainer.global_step
        self._announced = False
        self._timer = TimerState(self._clock())
        listed = self._listed_checkpoints(directory)
        on_disk = {
            _MODEL_STEM.sub("", n) for n in os.listdir(directory) if _MODEL_FILE.fullmatch(n)
        }
        found = [(n, s) for n in (*listed, *on_disk) if (s := checkpoint_step(n)) is not None]
        inherited = plan_inherited(found, self._start_step)
        if inherited.ahead:
            names = [n for n, _ in inherited.ahead]
            aside = move_checkpoints_aside(directory, names)
            logger.warning(
                "ModelSaver: %s holds checkpoints saved after global step %d, where this run "
                "starts (another run's, or an epoch a crash abandoned): %s; moved aside to %s "
                "(nothing deleted), so they are neither pruned nor overwritten by this run's",
                directory,
                self._start_step,
                names,
                aside,
            )
        kept: dict[int, float] = {}
        for name, step in inherited.kept:
            index = os.path.join(directory, name + ".index")
            if name in listed and os.path.isfile(index):
                kept[step] = os.path.getmtime(index)
        # a run resumed inside an epoch started its epoch that many steps earlier
        into_epoch = int(getattr(self.trainer, "resumed_steps_in_epoch", 0) or 0)
        self._state = start_saver_state(
            kept,
            start_step=self._start_step - into_epoch,
            steps_per_epoch=self.trainer.steps_per_epoch,
            next_preserve_time=time.time() + self._hours * 3600,
        )
        self._rewrite_state(directory, listed)

    def _rewrite_state(self, directory: str, listed: list[str]) -> None:
        """Make the state file name only the complete checkpoints kept (none: no state file)."""
        written = self._state.written
        kept = sorted(written)
        positions = read_positions(directory)
        if any(p.step not in written for p in positions):
            write_positions(directory, merge_positions(positions, None, kept))
        if [checkpoint_step(n) for n in listed] == kept:
            return
        state = os.path.join(directory, "checkpoint")
        if not kept:
            with contextlib.suppress(FileNotFoundError):
                os.remove(state)
            return
        paths = [os.path.join(directory, f"model-{s}") for s in kept]
        write_checkpoint_state(directory, paths[-1], paths, timestamps=[written[s] for s in kept])

    @staticmethod
    def _listed_checkpoints(directory: str) -> list[str]:
        """The base names of the checkpoints the state file lists, only those in `directory`."""
        try:
            with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as f:
                text = f.read()
        except (FileNotFoundError, UnicodeDecodeError):
            return []
        names, outside = [], []
        for entry in _STATE_ENTRY.findall(text):
            entry = re.sub(r"\\(.)", r"\1", entry)
            inside = state_entry_inside(directory, entry)
            if inside is None:
                outside.append(entry)
                inside = os.path.basename(entry)
            names.append(inside)
        if outside:
            logger.warning(
                "ModelSaver: the state file of %s lists checkpoints outside it (a copied "
                "directory?): %s; they are not read or deleted; the checkpoints of the same "
                "names in %s are used instead, and the state file is rewritten at the next save",
                directory,
                outside,
                directory,
            )
        return names

    def _trigger(self) -> None:
        self._save()

    def save_now(self) -> None:
        """Save at the current global step now (unless saved at it already), wherever the loop is.

        The trainer calls it when a preemption signal stops training inside an epoch:
        with the position recorded, `AutoResumeTrainConfig` resumes at exactly this step.
        """
        if self._start_step is None:
            return
        self._save()
        self.wait()

    def _after_train(self) -> None:
        if self._start_step is None:  # before_train never ran: the run failed before it
            return
        try:
            self._end_of_run()
        finally:
            self._flight.close()

    def _end_of_run(self) -> None:
        """Wait for the save in flight (its failure raised), then save the final state."""
        t = self.trainer
        failure = getattr(t, "run_failure", None)
        try:
            self.wait()
        except CallbackError as err:
            if failure is None:
                raise
            logger.warning("%s (while the run was ending by %s)", err, type(failure).__name__)
        at_boundary = t.local_step in (-1, t.steps_per_epoch - 1)
        if at_boundary and t.global_step != self._start_step and t.global_step != self._last_saved:
            failure = getattr(t, "run_failure", None)
            if failure is not None:
                logger.warning(
                    "ModelSaver: training ended by %s at global step %d: that state is not "
                    "saved (a failing run never writes the checkpoint that resuming, "
                    "SmartInit(logdir) and the exporters pick); the latest checkpoint in %s "
                    "stays %s",
                    type(failure).__name__,
                    t.global_step,
                    self._dir,
                    "none" if self._published is None else f"model-{self._published}",
                )
                return
            self._save()
            self.wait()

    def _nonfinite(self) -> list[str]:
        """The saved variables holding NaN or Inf now (each named, as `CheckNumerics` does)."""
        if self._numerics is None:
            return []
        return numerics_report(self._float_names, self.trainer.sess.run(self._numerics))

    def _save(self) -> None:
        step = int(self.trainer.global_step)
        if step == self._last_saved:
            return
        try:
            self._write(step)
        finally:
            # the time trigger counts from the end of the last save (or of a refused one:
            # never a numerics check at every step)
            self._timer = TimerState(self._clock())

    def _write(self, step: int) -> None:
        bad = self._nonfinite()
        if bad:
            logger.warning(
                "ModelSaver: not saved at global step %d: %d variable(s) hold NaN or Inf (%s); "
                "the latest checkpoint in %s stays %s",
                step,
                len(bad),
                ", ".join(bad),
                self._dir,
                "none" if self._published is None else f"model-{self._published}",
            )
            return
        t = self.trainer
        at_epoch_end = t.local_step in (-1, t.steps_per_epoch - 1)
        position = position_now(t)
        if self._snapshot is None:
            self._publish(self._saver, step, position, at_epoch_end)
        else:
            self.wait()  # one in flight at most; a failure of it is raised here
            t.sess.run(self._snapshot.copy_op)
            saver, graph = self._snapshot.saver, self.graph

            def write() -> str:
                # graph mode is per thread: the writer thread enters the model's graph
                with graph.as_default():
                    return self._publish(saver, step, position, at_epoch_end)

            self._flight.start(step, write)
        self._last_saved = step

    def _publish(
        self, saver: Any, step: int, position: SavedPosition | None, at_epoch_end: bool
    ) -> str:
        """Write the checkpoint of `step` with `saver`, then the state file, positions and pruning."""
        directory = str(self._dir)
        path = atomic_save_checkpoint(
            saver,
            self.trainer.sess,
            os.path.join(directory, "model"),
            global_step=step,
            write_meta_graph=False,
            write_state=False,
        )
        self._state, plan = after_save(
            self._state,
            step,
            os.path.getmtime(path + ".index"),
            at_epoch_end=at_epoch_end,
            max_to_keep=self._max_to_keep,
            preserve_every_s=self._hours * 3600,
        )
        written = self._state.written
        kept = [os.path.join(directory, f"model-{s}") for s in plan.keep]
        write_checkpoint_state(directory, path, kept, timestamps=[written[s] for s in plan.keep])
        write_positions(directory, merge_positions(read_positions(directory), position, plan.keep))
        for gone in plan.delete:
            _delete_checkpoint(directory, f"model-{gone}")
        self._published = step
        if not self._announced:
            self._announced = True
            policy = (
                "all kept" if self._max_to_keep == 0 else f"the newest {self._max_to_keep} kept"
            )
            logger.info(
                "model saved to %s; this run's checkpoints go to %s as model-<global step> "
                "(%s; each later save is logged at DEBUG)",
                path,
                directory,
                policy,
            )
        else:
            logger.debug("model saved to %s", path)
        return path


def _delete_checkpoint(directory: str, base: str) -> None:
    """Delete a checkpoint's files, its ``.index`` first (so it never looks complete)."""
    names = [n for n in os.listdir(directory) if n.startswith(base + ".")]
    for name in sorted(names, key=lambda n: not n.endswith(".index")):
        if (
            name[len(base) :] == ".index"
            or _CKPT_FILE.fullmatch(name[len(base) :])
            or name[len(base) :] == ".meta"
        ):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, name))
