"""MinSaver and MaxSaver keeping the best k, with real checkpoints on disk, and killed mid-save."""

import json
import os
import random
import signal
import sys
import time

import prefork
import pytest
import tensorflow as tf
from best_k_script import SPE, K, score
from loop import LoopTrainer
from test_savers import PutSeries, listing, train, values

from towerkit.callbacks import CallbackError, JSONWriter, MaxSaver, MinSaver, ModelSaver, Monitors
from towerkit.sessinit import SaverRestore
from towerkit.towers.compat import tf1

SCRIPT = os.path.join(os.path.dirname(__file__), "best_k_script.py")


def record(d, name="min-val-error.tfmodel"):
    return json.loads((d / f"{name}.json").read_text())


def copies(d, stem="min-val-error"):
    return sorted(n for n in listing(d) if n.startswith(stem + "-") and n.endswith(".index"))


class TestTopK:
    """The k best checkpoints under their own names, with their statistic recorded."""

    def test_min_top_2(self, tmp_path):
        """Of 1.0, 3.0, 0.5, 2.0 (epochs of 2 steps) the best 2 are epochs 3 and 1; the others are gone."""
        saver = MinSaver("val-error", top_k=2)
        train([ModelSaver(), PutSeries([1.0, 3.0, 0.5, 2.0]), saver], tmp_path, max_epoch=4)
        assert copies(tmp_path) == [
            "min-val-error-2.tfmodel.index",
            "min-val-error-6.tfmodel.index",
        ]
        assert [
            (e["name"], e["step"], e["epoch"], e["value"]) for e in record(tmp_path)["kept"]
        ] == [
            ("min-val-error-6.tfmodel", 6, 3, 0.5),
            ("min-val-error-2.tfmodel", 2, 1, 1.0),
        ]
        assert values(tmp_path / "min-val-error-6.tfmodel")["w"] == 6.0
        assert values(tmp_path / "min-val-error-2.tfmodel")["w"] == 2.0
        assert (saver.best, saver.best_epoch, saver.path) == (
            0.5,
            3,
            str(tmp_path / "min-val-error-6.tfmodel"),
        )
        assert [e.step for e in saver.kept] == [6, 2]
        assert not (tmp_path / "min-val-error.tfmodel.index").exists()
        # a copy restores like any checkpoint
        g = tf.Graph()
        with g.as_default(), tf1.Session(graph=g) as s:
            w = tf1.get_variable("w", initializer=0.0)
            SaverRestore(saver.path).init(s)
            assert s.run(w) == 6.0

    def test_max_and_ties(self, tmp_path):
        """MaxSaver keeps the highest; an equal value does not displace an earlier copy."""
        saver = MaxSaver("val-error", top_k=2, filename="best")
        train([ModelSaver(), PutSeries([2.0, 2.0, 1.0, 2.0, 3.0]), saver], tmp_path, max_epoch=5)
        assert [e.step for e in saver.kept] == [10, 2]
        assert copies(tmp_path, "best") == ["best-10.index", "best-2.index"]
        assert saver.record_path == str(tmp_path / "best.json")

    def test_default_stays_one_copy(self, tmp_path):
        """top_k=1 (the default) keeps tensorpack's single copy and writes no record."""
        saver = MinSaver("val-error")
        train([ModelSaver(), PutSeries([1.0, 0.5])], tmp_path, max_epoch=2)
        assert saver.top_k == 1
        assert saver.kept == ()
        assert saver.record_path is None
        train([ModelSaver(), PutSeries([1.0, 0.5]), saver], tmp_path / "b", max_epoch=2)
        assert "min-val-error.tfmodel.index" in listing(tmp_path / "b")
        assert not any(n.endswith(".json") and n.startswith("min") for n in listing(tmp_path / "b"))

    def test_nan_is_no_candidate(self, tmp_path, caplog):
        """A NaN epoch is logged and never kept."""
        saver = MinSaver("val-error", top_k=3)
        train([ModelSaver(), PutSeries([float("nan"), 2.0, 1.0])], tmp_path, max_epoch=3)
        train([ModelSaver(), PutSeries([float("nan"), 2.0, 1.0]), saver], tmp_path / "b")
        assert [e.epoch for e in saver.kept] == [3, 2]
        assert "is not a candidate for the best" in caplog.text

    def test_fail(self):
        """top_k must be an int >= 1; with top_k > 1 the copies must not be named model-<step>."""
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match=r"'top_k' must be an int >= 1 .*; got"):
                MinSaver("x", top_k=bad)
        with pytest.raises(ValueError, match=r"'filename' 'model': with top_k > 1 its copies"):
            MinSaver("x", filename="model", top_k=2)
        assert MinSaver("x", filename="model", top_k=1).filename == "model"
        assert MinSaver("val/err", top_k=2).copy_name(40) == "min-val_err-40.tfmodel"


def resume_run(tmp_path, series, starting, max_epoch, top_k, session_init=None):
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("w", initializer=0.0)
        saver = MinSaver("val-error", top_k=top_k)
        LoopTrainer(
            g,
            tf1.assign_add(w, 1.0),
            [ModelSaver(max_to_keep=0), PutSeries(series), saver],
            Monitors([JSONWriter()]),
            steps_per_epoch=2,
            max_epoch=max_epoch,
            starting_epoch=starting,
            logdir=tmp_path,
            session_init=session_init,
        ).train()
    return saver


class TestTopKResume:
    """A resumed run knows the k it kept."""

    def test_resume_continues(self, tmp_path):
        """The record is read back: a resumed epoch competes with the copies from before."""
        series = [3.0, 1.0, 2.0, 0.5, 4.0]
        resume_run(tmp_path, series, 1, 3, 2)
        saver = resume_run(
            tmp_path, series, 4, 5, 2, session_init=SaverRestore(str(tmp_path / "model-6"))
        )
        assert [(e.epoch, e.value) for e in saver.kept] == [(4, 0.5), (2, 1.0)]
        assert copies(tmp_path) == [
            "min-val-error-4.tfmodel.index",
            "min-val-error-8.tfmodel.index",
        ]

    def test_resume_from_earlier_moves_later_aside(self, tmp_path, caplog):
        """Copies saved after the resumed step are moved aside (not deleted); k lowered prunes."""
        series = [3.0, 1.0, 2.0, 0.5]
        resume_run(tmp_path, series, 1, 4, 3)
        saver = resume_run(
            tmp_path,
            [3.0, 1.0, 2.0, 9.0],
            4,
            4,
            2,
            session_init=SaverRestore(str(tmp_path / "model-6")),
        )
        assert [(e.epoch, e.value) for e in saver.kept] == [(2, 1.0), (3, 2.0)]
        assert copies(tmp_path) == [
            "min-val-error-4.tfmodel.index",
            "min-val-error-6.tfmodel.index",
        ]
        aside = [n for n in listing(tmp_path) if n.startswith("superseded-")]
        assert [a for a in aside if "min-val-error-8.tfmodel.index" in listing(tmp_path / a)]
        assert "moved aside" in caplog.text

    def test_record_of_another_saver(self, tmp_path):
        """A record for another mode or statistic under the same name is refused, naming both."""
        resume_run(tmp_path, [3.0, 1.0], 1, 2, 2)
        g = tf.Graph()
        with g.as_default():
            w = tf1.get_variable("w", initializer=0.0)
            trainer = LoopTrainer(
                g,
                tf1.assign_add(w, 1.0),
                [
                    ModelSaver(),
                    PutSeries([1.0]),
                    MaxSaver("val-error", filename="min-val-error.tfmodel", top_k=2),
                ],
                steps_per_epoch=2,
                max_epoch=3,
                starting_epoch=3,
                logdir=tmp_path,
                session_init=SaverRestore(str(tmp_path / "model-4")),
            )
            with pytest.raises(
                CallbackError, match=r"keeps the best by min of 'val-error', not by max"
            ):
                trainer.train()
        (tmp_path / "min-val-error.tfmodel.json").write_text("{")
        g = tf.Graph()
        with g.as_default():
            w = tf1.get_variable("w", initializer=0.0)
            with pytest.raises(CallbackError, match=r"of the best 2 is unreadable: not JSON"):
                resume_run(
                    tmp_path, [3.0, 1.0, 1.0], 3, 3, 2, SaverRestore(str(tmp_path / "model-4"))
                )


def consistent(d):
    """The record names at most K complete copies, each holding its step and its epoch's score."""
    path = d / "min-score.tfmodel.json"
    if not path.exists():
        return []
    kept = json.loads(path.read_text())["kept"]
    assert len(kept) <= K
    for e in kept:
        assert e["step"] == e["epoch"] * SPE
        assert e["value"] == score(e["epoch"])
        assert values(d / e["name"])["w"] == e["step"]
    ranks = [(e["value"], e["step"]) for e in kept]
    assert ranks == sorted(ranks)
    return kept


def run_script(d, *args, kill=None):
    out = prefork.run([sys.executable, SCRIPT, str(d), *map(str, args)], timeout=600)
    if kill is None:
        assert out.returncode == 0, out.stderr[-3000:]
    return out


def finished(d, epochs):
    """After a whole run: the exact top K over every epoch offered since the last restart, no strays."""
    kept = consistent(d)
    names = {e["name"] + ext for e in kept for ext in (".index", ".data-00000-of-00001")}
    assert {n for n in listing(d) if n.startswith("min-score-")} == names
    assert not [n for n in listing(d) if n.startswith(".")]
    return kept


@pytest.mark.procs
class TestTopKKilled:
    """SIGKILL at any moment of a save leaves a consistent best-k set and a resumable run."""

    @pytest.mark.parametrize("kill", ["copy:3", "publish:2", "publish:4", "record:4", "record:5"])
    def test_killed_at_each_step_of_a_save(self, tmp_path, kill):
        """Killed inside a copy, after a publish, or after the record: the record stays consistent;
        the resumed run cleans the strays and ends with the top K of its epochs."""
        out = run_script(tmp_path, 8, kill, kill=True)
        assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
        before = consistent(tmp_path)
        run_script(tmp_path, 8)
        kept = finished(tmp_path, 8)
        # nothing the record kept before the kill is lost unless something better displaced it
        worst = (kept[-1]["value"], kept[-1]["step"])
        for e in before:
            assert e in kept or (e["value"], e["step"]) > worst
        offered = {e["epoch"] for e in kept}
        assert len(kept) == K
        assert offered <= set(range(1, 9))

    def test_killed_at_random_moments(self, tmp_path):
        """Killed four times at random moments (a few MB a save), resumed each time: consistent
        after every kill, and the run ends with every epoch of its last part ranked right."""
        rng = random.Random(59)
        epochs = 30
        for _ in range(4):
            proc = prefork.popen(
                [sys.executable, SCRIPT, str(tmp_path), str(epochs)],
                stdout=open(os.devnull, "w"),  # noqa: SIM115
                stderr=open(os.devnull, "w"),  # noqa: SIM115
            )
            time.sleep(rng.uniform(0.5, 4.0))
            proc.kill()
            proc.wait()
            consistent(tmp_path)
        start = tf1.train.latest_checkpoint(str(tmp_path))
        first = 1 if start is None else int(start.rsplit("-", 1)[1]) // SPE + 1
        run_script(tmp_path, epochs)
        kept = finished(tmp_path, epochs)
        worst = (kept[-1]["value"], kept[-1]["step"])
        kept_epochs = {e["epoch"] for e in kept}
        for epoch in range(first, epochs + 1):
            assert epoch in kept_epochs or (score(epoch), epoch * SPE) > worst
