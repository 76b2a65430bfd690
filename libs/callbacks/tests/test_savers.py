"""ModelSaver, MinSaver and MaxSaver with real checkpoints on disk."""

import os
import re
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    EPOCH_ENDS_KEPT,
    Callback,
    CallbackError,
    MaxSaver,
    MinSaver,
    MissingStatError,
    ModelSaver,
    PeriodicTrigger,
    ScheduledHyperParamSetter,
    StopTraining,
    plan_pruning,
)
from towerkit.callbacks.plumbing import read_positions
from towerkit.sessinit import SaverRestore
from towerkit.towers.compat import tf1


def train(callbacks, logdir, *, steps=2, max_epoch=3, starting=1, session_init=None):
    """w += 1 per step; a learning_rate variable for schedules; returns the trainer."""
    g = tf.Graph()
    with g.as_default():
        tf1.get_variable("learning_rate", initializer=1.0, trainable=False)
        w = tf1.get_variable("w", initializer=0.0)
        extra = tf1.get_variable("extra", initializer=5.0)
        tf1.add_to_collection("ONLY_W", w)
        del extra
        return LoopTrainer(
            g,
            tf1.assign_add(w, 1.0),
            callbacks,
            steps_per_epoch=steps,
            max_epoch=max_epoch,
            starting_epoch=starting,
            logdir=logdir,
            session_init=session_init,
        ).train()


def values(prefix):
    """The variables stored in a checkpoint."""
    reader = tf1.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name, _ in tf1.train.list_variables(str(prefix))}


def listing(d):
    return sorted(os.listdir(d))


class PutSeries(Callback):
    """Puts series[epoch - 1] as 'val-error' each epoch."""

    def __init__(self, series):
        self.series = series

    def _trigger(self):
        self.trainer.monitors.put_scalar("val-error", self.series[self.trainer.epoch_num - 1])


class StopAt(Callback):
    """Raises StopTraining after a given global step."""

    def __init__(self, step):
        self.step = step

    def _trigger_step(self):
        if self.trainer.global_step == self.step:
            raise StopTraining


class TestModelSaver:
    """Checkpoints named model-<global_step>, a consistent state file, nothing half-written."""

    def test_console_keeps_one_line_per_epoch(self, tmp_path, caplog):
        """The first save of a run is logged at INFO with the directory and the policy; the
        later ones at DEBUG only; a second run on the same directory announces itself again (a fresh directory)."""
        with caplog.at_level("DEBUG", logger="towerkit.callbacks"):
            train([ModelSaver(max_to_keep=2)], tmp_path)
        saved = [r for r in caplog.records if r.getMessage().startswith("model saved to")]
        assert [r.levelname for r in saved] == ["INFO", "DEBUG", "DEBUG"]
        first = saved[0].getMessage()
        assert os.path.join(str(tmp_path), "model-2") in first
        assert f"go to {tmp_path} as model-<global step> (the newest 2 kept;" in first
        assert saved[2].getMessage() == f"model saved to {os.path.join(str(tmp_path), 'model-6')}"
        caplog.clear()
        with caplog.at_level("INFO", logger="towerkit.callbacks"):
            train([ModelSaver(max_to_keep=0)], tmp_path / "again")
        saved = [r.getMessage() for r in caplog.records if "model saved to" in r.getMessage()]
        assert len(saved) == 1
        assert "(all kept;" in saved[0]

    def test_saves_every_epoch(self, tmp_path):
        """Each epoch leaves model-<step>; the state file names the last one, relatively."""
        train([ModelSaver()], tmp_path)
        assert listing(tmp_path) == [
            "checkpoint",
            *[f"model-{s}.{ext}" for s in (2, 4, 6) for ext in ("data-00000-of-00001", "index")],
            "positions.json",
        ]
        # where each was saved: at the end of epochs 1..3 of 2 steps
        positions = read_positions(str(tmp_path))
        assert [(p.step, p.epoch, p.done) for p in positions] == [(2, 1, 2), (4, 2, 2), (6, 3, 2)]
        state = tf1.train.get_checkpoint_state(str(tmp_path))
        assert os.path.basename(state.model_checkpoint_path) == "model-6"
        assert 'model_checkpoint_path: "model-6"' in (tmp_path / "checkpoint").read_text()
        v = values(tmp_path / "model-4")
        assert v["w"] == 4.0
        assert v["global_step"] == 4

    def test_max_to_keep_across_resume(self, tmp_path):
        """Old checkpoints are deleted, also those of an earlier run in the same directory."""
        train([ModelSaver(max_to_keep=2)], tmp_path, max_epoch=3)
        assert [n for n in listing(tmp_path) if n.endswith(".index")] == [
            "model-4.index",
            "model-6.index",
        ]
        train(
            [ModelSaver(max_to_keep=2)],
            tmp_path,
            starting=4,
            max_epoch=5,
            session_init=SaverRestore(str(tmp_path)),
        )
        assert [n for n in listing(tmp_path) if n.endswith(".index")] == [
            "model-10.index",
            "model-8.index",
        ]
        assert values(tmp_path / "model-10")["w"] == 10.0

    def test_final_save_at_epoch_boundary(self, tmp_path):
        """Saved every 2 epochs, a 3-epoch run also saves its final state at after_train."""
        train([PeriodicTrigger(ModelSaver(), every_k_epochs=2)], tmp_path, max_epoch=3)
        assert [n for n in listing(tmp_path) if n.endswith(".index")] == [
            "model-4.index",
            "model-6.index",
        ]

    def test_no_save_mid_epoch(self, tmp_path):
        """A run stopped in the middle of an epoch keeps its last epoch-end checkpoint as latest."""
        train([StopAt(5), ModelSaver()], tmp_path, max_epoch=3)
        assert tf1.train.latest_checkpoint(str(tmp_path)).endswith("model-4")

    def test_resume_keeps_hyper_parameters(self, tmp_path):
        """A resumed run continues from the checkpoint, and a schedule re-applies its value."""
        sched = [(1, 0.5), (3, 0.25)]
        train(
            [ScheduledHyperParamSetter("learning_rate", sched), ModelSaver()], tmp_path, max_epoch=2
        )
        assert values(tmp_path / "model-4")["learning_rate"] == 0.5
        seen = []

        class Look(Callback):
            def _setup_graph(self):
                (self.lr,) = [v for v in tf1.global_variables() if v.op.name == "learning_rate"]
                self.read = self.lr.read_value()

            def _before_train(self):
                seen.append((self.trainer.global_step, float(self.trainer.sess.run(self.read))))

        train(
            [ScheduledHyperParamSetter("learning_rate", sched), Look(), ModelSaver()],
            tmp_path,
            starting=3,
            max_epoch=3,
            session_init=SaverRestore(str(tmp_path)),
        )
        assert seen == [(4, 0.5)]
        assert values(tmp_path / "model-6")["learning_rate"] == 0.25
        assert values(tmp_path / "model-6")["w"] == 6.0

    def test_var_collections(self, tmp_path):
        """Only the variables of the given collections are saved."""
        train(
            [ModelSaver(checkpoint_dir=tmp_path / "ckpt", var_collections="ONLY_W")],
            None,
            max_epoch=1,
        )
        assert set(values(tmp_path / "ckpt" / "model-2")) == {"w"}

    def test_no_temporary_files(self, tmp_path):
        """Nothing hidden or temporary is left behind."""
        train([ModelSaver(), PutSeries([3.0, 2.0, 1.0]), MinSaver("val-error")], tmp_path)
        assert (tmp_path / "min-val-error.tfmodel.index").is_file()
        assert not [n for n in listing(tmp_path) if n.startswith(".") or "tmp" in n]

    def test_fail(self, tmp_path):
        """Bad arguments fail at construction; no directory fails at setup, naming the callback."""
        with pytest.raises(ValueError, match="'max_to_keep' must be an int >= 0; got -1"):
            ModelSaver(max_to_keep=-1)
        with pytest.raises(
            ValueError, match="'keep_checkpoint_every_n_hours' must be a number > 0; got 0"
        ):
            ModelSaver(keep_checkpoint_every_n_hours=0)
        with pytest.raises(TypeError, match="'var_collections' must be a collection name"):
            ModelSaver(var_collections=[1])
        with pytest.raises(
            CallbackError, match=r"ModelSaver writes files and needs a directory.*'checkpoint_dir'"
        ):
            train([ModelSaver()], None)
        with pytest.raises(ValueError, match=r"the collections \['EMPTY'\] hold no variables"):
            train([ModelSaver(var_collections=["EMPTY"])], tmp_path)


class TestMinMaxSaver:
    """The best checkpoint by a statistic is copied to min-/max-<stat>.tfmodel."""

    def test_min(self, tmp_path):
        """The copy holds the variables of the epoch with the lowest value."""
        saver = MinSaver("val-error")
        train([ModelSaver(), PutSeries([3.0, 1.0, 2.0]), saver], tmp_path)
        assert saver.best == 1.0
        copy = tmp_path / "min-val-error.tfmodel"
        assert values(copy)["w"] == 4.0
        assert (tmp_path / "min-val-error.tfmodel.index").is_file()
        assert (tmp_path / "min-val-error.tfmodel.data-00000-of-00001").is_file()
        # the copy restores like any checkpoint
        g = tf.Graph()
        with g.as_default(), tf1.Session(graph=g) as s:
            w = tf1.get_variable("w", initializer=0.0)
            tf1.train.Saver([w]).restore(s, str(copy))
            assert s.run(w) == 4.0

    def test_max(self, tmp_path):
        """MaxSaver keeps the highest value under max-<stat>.tfmodel."""
        train([ModelSaver(), PutSeries([3.0, 1.0, 5.0]), MaxSaver("val-error")], tmp_path)
        assert values(tmp_path / "max-val-error.tfmodel")["w"] == 6.0
        train(
            [
                ModelSaver(),
                PutSeries([3.0, 4.0]),
                MinSaver("val-error", reverse=True, filename="best"),
            ],
            tmp_path / "b",
            max_epoch=2,
        )
        assert values(tmp_path / "b" / "best")["w"] == 4.0

    def test_names(self):
        """Default file names follow the documentation; '/' in a statistic becomes '_'."""
        assert MinSaver("val-error").filename == "min-val-error.tfmodel"
        assert MaxSaver("validation/acc").filename == "max-validation_acc.tfmodel"
        assert MaxSaver("acc", filename="x").filename == "x"

    def test_missing_stat(self, tmp_path):
        """A statistic never put is an error naming those that exist."""
        with pytest.raises(
            MissingStatError, match=r"no statistic named 'val-acc' .* \['val-error'\]"
        ):
            train([ModelSaver(), PutSeries([1.0, 2.0, 3.0]), MinSaver("val-acc")], tmp_path)

    def test_needs_model_saver(self, tmp_path):
        """Without a checkpoint to copy, the error says to add a ModelSaver first."""
        with pytest.raises(CallbackError, match=r"found no checkpoint .* put a ModelSaver"):
            train([PutSeries([1.0, 2.0, 3.0]), MinSaver("val-error")], tmp_path)

    def test_fail(self):
        """Bad names fail at construction."""
        with pytest.raises(TypeError, match="'monitor_stat' must be a statistic's name"):
            MinSaver("")
        with pytest.raises(ValueError, match="'filename' must be a file name without directories"):
            MinSaver("a", filename="x/y")

    @pytest.mark.parametrize(
        ("filename", "why"),
        [
            ("..", r"got '\.\.': it is '\.\.', a directory"),
            ("../best", r"got '\.\./best': it holds a path separator \('/'\)"),
            ("/tmp/best", r"got '/tmp/best': it holds a path separator"),
            ("", r"got '': it is empty"),
        ],
    )
    def test_filename_stays_inside(self, tmp_path, filename, why):
        """A filename that would write outside the checkpoint directory is refused, named."""
        for cls in (MinSaver, MaxSaver):
            with pytest.raises(ValueError, match=r"'filename' must be a file name .*" + why):
                cls("val-error", filename=filename)
        with pytest.raises(ValueError, match=r"'filename' must be a file name .*got PosixPath"):
            MinSaver("val-error", filename=tmp_path / "best")

    def test_filename_not_model_saver_files(self):
        """The names of ModelSaver's own files are refused (it would prune or overwrite them)."""
        for name in ("model-3", "checkpoint"):
            with pytest.raises(
                ValueError, match=rf"must not be a name of ModelSaver's files .*{name!r}"
            ):
                MinSaver("val-error", filename=name)


class TestNonFiniteValues:
    """NaN and infinities never become the best: later finite values are still kept."""

    def test_nan_first(self, tmp_path, caplog):
        """A NaN first epoch does not stop the copies: the best epoch (4, step 16) is kept."""
        saver = MinSaver("val-error", filename="min-val.tfmodel")
        with caplog.at_level("WARNING", logger="towerkit.callbacks"):
            train(
                [ModelSaver(), PutSeries([float("nan"), 3.0, 2.0, 1.0]), saver],
                tmp_path,
                steps=4,
                max_epoch=4,
            )
        assert saver.best == 1.0
        assert values(tmp_path / "min-val.tfmodel")["w"] == 16.0
        assert "val-error = nan at global step 4 is not a candidate for the best" in caplog.text

    def test_infinities(self, tmp_path):
        """+Inf and -Inf are skipped by MaxSaver and MinSaver alike."""
        best_max = MaxSaver("val-error")
        train(
            [ModelSaver(), PutSeries([float("inf"), 5.0, float("-inf"), float("nan")]), best_max],
            tmp_path / "max",
            max_epoch=4,
        )
        assert best_max.best == 5.0
        assert values(tmp_path / "max" / "max-val-error.tfmodel")["w"] == 4.0
        best_min = MinSaver("val-error")
        train(
            [ModelSaver(), PutSeries([2.0, float("-inf"), 1.0]), best_min],
            tmp_path / "min",
            max_epoch=3,
        )
        assert best_min.best == 1.0
        assert values(tmp_path / "min" / "min-val-error.tfmodel")["w"] == 6.0

    def test_all_nan(self, tmp_path):
        """Only NaN: no best and no copy."""
        saver = MinSaver("val-error")
        train([ModelSaver(), PutSeries([float("nan")] * 2), saver], tmp_path, max_epoch=2)
        assert saver.best is None
        assert not (tmp_path / "min-val-error.tfmodel.index").exists()


class TestMinSaverResume:
    """A resumed run does not overwrite a better model from before the resume."""

    def test_best_survives_resume(self, tmp_path):
        """The best value is read back from stats.json; only a better one replaces the copy."""
        from towerkit.callbacks import JSONWriter, Monitors

        def run(series, starting, max_epoch, session_init=None):
            g = tf.Graph()
            with g.as_default():
                w = tf1.get_variable("w", initializer=0.0)
                saver = MinSaver("val-error")
                LoopTrainer(
                    g,
                    tf1.assign_add(w, 1.0),
                    [ModelSaver(), PutSeries(series), saver],
                    Monitors([JSONWriter()]),
                    steps_per_epoch=2,
                    max_epoch=max_epoch,
                    starting_epoch=starting,
                    logdir=tmp_path,
                    session_init=session_init,
                ).train()
            return saver

        run([3.0, 1.0], 1, 2)
        assert values(tmp_path / "min-val-error.tfmodel")["w"] == 4.0
        # epoch 3 (2.0) is worse than epoch 2 (1.0): the copy stays
        saver = run([3.0, 1.0, 2.0], 3, 3, session_init=SaverRestore(str(tmp_path)))
        assert saver.best == 1.0
        assert values(tmp_path / "min-val-error.tfmodel")["w"] == 4.0
        # epoch 4 (0.5) replaces it
        saver = run([3.0, 1.0, 2.0, 0.5], 4, 4, session_init=SaverRestore(str(tmp_path)))
        assert saver.best == 0.5
        assert values(tmp_path / "min-val-error.tfmodel")["w"] == 8.0

    def test_nan_in_stats_on_resume(self, tmp_path):
        """NaN read back from stats.json (as "NaN") is not the best: epoch 2's 3.0 is."""
        from towerkit.callbacks import JSONWriter, Monitors

        def run(series, starting, max_epoch, session_init=None):
            g = tf.Graph()
            with g.as_default():
                w = tf1.get_variable("w", initializer=0.0)
                saver = MinSaver("val-error")
                LoopTrainer(
                    g,
                    tf1.assign_add(w, 1.0),
                    [ModelSaver(), PutSeries(series), saver],
                    Monitors([JSONWriter()]),
                    steps_per_epoch=2,
                    max_epoch=max_epoch,
                    starting_epoch=starting,
                    logdir=tmp_path,
                    session_init=session_init,
                ).train()
            return saver

        nan = float("nan")
        run([nan, 3.0], 1, 2)
        assert '"val-error": "NaN"' in (tmp_path / "stats.json").read_text()
        saver = run([nan, 3.0, 4.0], 3, 3, session_init=SaverRestore(str(tmp_path)))
        assert saver.best == 3.0
        assert values(tmp_path / "min-val-error.tfmodel")["w"] == 4.0


def indexes(d):
    """The steps of the model-<step> checkpoints in `d`, ascending."""
    return sorted(
        int(n[6:-6]) for n in listing(d) if n.startswith("model-") and n.endswith(".index")
    )


def state_entries(d):
    """The checkpoints the state file of `d` lists."""
    text = (d / "checkpoint").read_text()
    return re.findall(r'all_model_checkpoint_paths: "([^"]*)"', text)


class TestPlanPruning:
    """`plan_pruning` keeps the newest max_to_keep and the newest two epoch ends."""

    @given(
        steps=st.sets(st.integers(0, 60), min_size=1, max_size=25),
        max_to_keep=st.integers(0, 6),
        spe=st.integers(1, 7),
        times=st.lists(st.floats(0, 1e4), min_size=25, max_size=25),
        every=st.floats(1, 1e4),
        next_time=st.floats(0, 2e4),
    )
    def test_properties(self, steps, max_to_keep, spe, times, every, next_time):
        """A partition of the input; the newest ones and the last two epoch ends are kept."""
        saved = list(zip(sorted(steps), times, strict=False))
        plan = plan_pruning(
            saved,
            max_to_keep=max_to_keep,
            epoch_ends={s for s in steps if s % spe == 0},
            preserve_every_s=every,
            next_preserve_time=next_time,
        )
        all_steps = sorted(s for s, _ in saved)
        assert sorted(plan.keep + plan.delete + plan.preserve) == all_steps
        assert plan.keep == tuple(sorted(plan.keep))
        newest = all_steps if max_to_keep == 0 else all_steps[-max_to_keep:]
        assert set(newest) <= set(plan.keep)
        ends = [s for s in all_steps if s % spe == 0]
        assert set(ends[-EPOCH_ENDS_KEPT:]) <= set(plan.keep)
        assert len(plan.keep) <= len(newest) + EPOCH_ENDS_KEPT
        assert plan.next_preserve_time >= next_time
        for step in plan.preserve:
            assert dict(saved)[step] >= next_time

    def test_preserve_spacing(self):
        """Checkpoints are kept for good at most once per interval, oldest first."""
        saved = [(s, float(s * 100)) for s in range(1, 11)]
        plan = plan_pruning(
            saved, max_to_keep=1, epoch_ends=(), preserve_every_s=250, next_preserve_time=100
        )
        assert plan.preserve == (1, 4, 7)
        assert plan.keep == (10,)
        assert plan.next_preserve_time == 950

    def test_repr(self):
        """The plan prints its fields."""
        plan = plan_pruning(
            [(3, 0.0)], max_to_keep=1, epoch_ends={3}, preserve_every_s=1, next_preserve_time=5
        )
        assert repr(plan) == "PrunePlan(keep=(3,), delete=(), preserve=(), next_preserve_time=5)"


@pytest.mark.procs
class TestModelSaverPruning:
    """Frequent saves with max_to_keep keep the epoch-end checkpoints a resume needs."""

    def test_every_step(self, tmp_path):
        """Saved every step, 3 steps an epoch, max_to_keep=2: the last two epoch ends stay."""
        train(
            [PeriodicTrigger(ModelSaver(max_to_keep=2), every_k_steps=1)],
            tmp_path,
            steps=3,
            max_epoch=3,
        )
        assert indexes(tmp_path) == [6, 8, 9]
        assert state_entries(tmp_path) == ["model-6", "model-8", "model-9"]
        for step in indexes(tmp_path):
            assert values(tmp_path / f"model-{step}")["w"] == step

    def test_stale_temporaries_removed(self, tmp_path, caplog):
        """Temporaries a killed save left are removed at the next run, with a warning."""
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        leftovers = [
            f".model-4.tmp-{proc.pid}-0123abcd.index",
            f".model-4.tmp-{proc.pid}-0123abcd.data-00000-of-00001",
            f".checkpoint.tmp-{proc.pid}-0123abcd",
            f".positions.tmp-{proc.pid}-0123abcd.json",
        ]
        foreign = f".notes.tmp-{proc.pid}-0123abcd.txt"
        for name in (*leftovers, foreign):
            (tmp_path / name).write_text("partial")
        with caplog.at_level("WARNING", logger="towerkit.sessinit"):
            train([ModelSaver()], tmp_path, max_epoch=1)
        assert [n for n in listing(tmp_path) if n.startswith(".")] == [foreign]
        assert "removed 4 stale temporary file(s) of checkpoint files" in caplog.text


class TestCopiedDirectory:
    """A copied directory's state file points into the original: nothing there is touched."""

    def test_copy_then_resume(self, tmp_path, caplog):
        """Resuming in the copy prunes the copy only; the original stays byte for byte."""
        a, b = tmp_path / "a", tmp_path / "b"
        train([ModelSaver(max_to_keep=2)], a, max_epoch=3)
        text = (a / "checkpoint").read_text()
        (a / "checkpoint").write_text(
            text.replace('"model-', f'"{a}{os.sep}model-')
        )  # what TensorFlow writes without relative paths
        shutil.copytree(a, b)
        before = {n: (a / n).read_bytes() for n in listing(a)}
        with caplog.at_level("WARNING", logger="towerkit"):
            train(
                [ModelSaver(max_to_keep=2)],
                b,
                starting=4,
                max_epoch=6,
                session_init=SaverRestore(str(b)),
            )
        assert {n: (a / n).read_bytes() for n in listing(a)} == before
        assert indexes(b) == [10, 12]
        assert state_entries(b) == ["model-10", "model-12"]
        assert "outside" in caplog.text
        assert values(b / "model-12")["w"] == 12.0
