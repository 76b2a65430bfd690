"""Monitors and callbacks that send statistics elsewhere: shell commands, comet.ml."""

from __future__ import annotations

import logging
import math
import os
import signal
import string
import subprocess
from collections.abc import Iterable
from typing import Any

import numpy as np

from towerkit.callbacks._base import Callback
from towerkit.callbacks._monitor_hub import MonitorBase

logger = logging.getLogger("towerkit.callbacks")


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or not all(isinstance(n, str) and n for n in names):
        msg = f"'names' must be a statistic name or a non-empty list of names; got {value!r}"
        raise TypeError(msg)
    return names


def _check_command(command: str, names: tuple[str, ...]) -> None:
    if not isinstance(command, str) or not command.strip():
        msg = f"'command' must be a non-empty shell command; got {command!r}"
        raise TypeError(msg)
    try:
        parts = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(command)]
    except ValueError as err:
        msg = f"'command' is not a valid format string: {err}; command: {command!r}"
        raise ValueError(msg) from err
    fields = [f for f, _, _ in parts if f is not None]
    unknown = [f for f in fields if f not in names]
    if unknown:
        msg = f"'command' uses fields {unknown} that are not in 'names' {list(names)}"
        raise ValueError(msg)
    bad = []
    for field, spec, conv in parts:
        if field is None:
            continue
        if conv not in (None, "r", "s", "a"):
            bad.append(f"{{{field}!{conv}}}: unknown conversion {conv!r} (use !r, !s or !a)")
        elif spec and ("{" in spec or "}" in spec):
            bad.append(f"{{{field}:{spec}}}: nested fields in a format spec are not supported")
        else:
            try:
                fill_command(f"{{x{'!' + conv if conv else ''}:{spec or ''}}}", {"x": 0.5})
            except (ValueError, TypeError) as err:
                bad.append(
                    f"{{{field}:{spec}}}: {err} (statistics are floats: use a float format "
                    "such as '.3f', '.0f' or 'g')"
                )
    if bad:
        msg = f"'command' has fields that cannot format a statistic: {'; '.join(bad)}"
        raise ValueError(msg)


def fill_command(command: str, values: dict[str, Any]) -> str:
    """``command`` with each ``{name}`` (or ``{name:spec}``) replaced by ``values[name]``.

    Names may hold any character but braces and ``:``/``!`` (``{val/error}`` works).

    Examples:
        >>> fill_command("echo {val/error:.2f} {step}", {"val/error": 0.1234, "step": 7})
        'echo 0.12 7'
    """
    out = []
    for literal, field, spec, conv in string.Formatter().parse(command):
        out.append(literal)
        if field is None:
            continue
        v = values[field]
        if conv == "r":
            v = repr(v)
        elif conv == "s":
            v = str(v)
        elif conv == "a":
            v = ascii(v)
        out.append(format(v, spec or ""))
    return "".join(out)


DEFAULT_COMMAND_TIMEOUT_S = 60.0
"""How long `SendMonitorData` and `SendStat` let a command run by default, in seconds."""


def check_timeout(value: Any, what: str) -> float | None:
    """`value` as a timeout in seconds: a finite number > 0, or None (no limit).

    Examples:
        >>> check_timeout(5, "timeout")
        5.0
        >>> check_timeout(None, "timeout") is None
        True
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        msg = f"'{what}' must be a number of seconds > 0 or None; got {type(value).__name__}"
        raise TypeError(msg)
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        msg = f"'{what}' must be a number of seconds > 0 or None; got {value!r}"
        raise ValueError(msg)
    return seconds


def run_command(owner: object, command: str, timeout: float | None = None) -> int | None:
    """Run a shell command, at most `timeout` seconds; log a failure in one line, never raise.

    The command runs in a session (process group) of its own, so a Ctrl-C at the
    terminal goes to the training loop only, and a command still running after
    `timeout` seconds is killed with all its processes.

    Returns:
        The command's exit status, or None when it could not start or was killed
        after `timeout` seconds.
    """
    try:
        proc = subprocess.Popen(command, shell=True, start_new_session=True)
    except OSError as err:
        logger.error("%s: command could not start (%s): %s", owner, err, command)
        return None
    try:
        status = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        logger.error(
            "%s: command still running after %g s (timeout): killed; training goes on: %s",
            owner,
            timeout,
            command,
        )
        return None
    except BaseException:
        _kill_group(proc)
        raise
    if status != 0:
        logger.error("%s: command exited with status %d: %s", owner, status, command)
    return status


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """Kill the process group `proc` leads (the shell and what it started) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


class SendMonitorData(MonitorBase):
    """Run a shell command with some scalars once all of them have been put.

    The command is a format string whose fields are statistic names
    (``"notify {val-error}"``). Each time every one of ``names`` has received a value,
    the command runs with the latest values, and the collection starts over. Training
    waits for the command, at most `timeout` seconds: a command still running then is
    killed (with every process it started). A command that fails, cannot start or is
    killed is logged in one line naming it; training goes on.

    Args:
        command: the shell command, with ``{name}`` fields.
        names: the statistic name(s) to collect.
        timeout: seconds a command may run (> 0), or None to wait for it however long
            it takes. Default 60.

    Raises:
        ValueError: the command is not a valid template: a field that is not in
            ``names``, an unknown conversion, or a format spec that cannot format a
            float (``{x:d}``); checked here, not at the first send. Or a `timeout`
            that is not > 0.

    .. versionadded:: 0.2
        `timeout`.
    """

    def __init__(
        self,
        command: str,
        names: str | Iterable[str],
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT_S,
    ) -> None:
        self._names = _names(names)
        _check_command(command, self._names)
        self._timeout = check_timeout(timeout, "timeout")
        self._command = command
        self._wanted = frozenset(self._names)
        self._values: dict[str, Any] = {}

    def process_scalar(self, name: str, val: float) -> None:
        if name not in self._wanted:
            return
        self._values[name] = val
        if len(self._values) == len(self._wanted):
            values, self._values = self._values, {}
            run_command(self, fill_command(self._command, values), self._timeout)

    def __str__(self) -> str:
        return f"SendMonitorData({self._command!r})"


class SendStat(Callback):
    """Run a shell command with the latest values of some statistics, on each trigger.

    Like :class:`SendMonitorData`, as a plain callback: when triggered (every epoch by
    default) it reads the latest value of each of ``names`` from the monitors.

    Args:
        command: the shell command, with ``{name}`` fields.
        names: the statistic name(s) to send.
        timeout: seconds a command may run before it is killed and logged (> 0), or
            None for no limit. Default 60.

    Raises:
        MissingStatError: when triggered, a statistic was never put (the message
            lists those that were).

    .. versionadded:: 0.2
        `timeout`.
    """

    def __init__(
        self,
        command: str,
        names: str | Iterable[str],
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT_S,
    ) -> None:
        self._names = _names(names)
        _check_command(command, self._names)
        self._timeout = check_timeout(timeout, "timeout")
        self._command = command

    def _trigger(self) -> None:
        monitors = self.trainer.monitors
        values = {n: monitors.get_latest(n) for n in self._names}
        run_command(self, fill_command(self._command, values), self._timeout)

    def __str__(self) -> str:
        return f"SendStat({self._command!r})"


class CometMLMonitor(MonitorBase):
    """Send scalars, images and the graph to comet.ml (needs the optional ``comet_ml``).

    ``comet_ml`` likes to be imported before TensorFlow; import it first in the
    training script. Its automatic output logging (which makes a progress bar appear
    frozen) is off unless asked for in ``kwargs``.

    Args:
        experiment: a ``comet_ml.Experiment`` to use; then ``tags`` and ``kwargs``
            must be empty.
        tags: tags to add to a new experiment.
        kwargs: arguments of ``comet_ml.Experiment`` (project name, API key, ...).

    Raises:
        ImportError: ``comet_ml`` is not installed.
        ValueError: ``experiment`` given together with ``tags`` or ``kwargs``.
    """

    def __init__(
        self, experiment: Any = None, tags: Iterable[str] | None = None, **kwargs: Any
    ) -> None:
        try:
            import comet_ml
        except ImportError as err:
            msg = "CometMLMonitor needs comet_ml: pip install comet_ml"
            raise ImportError(msg) from err
        if experiment is not None:
            if tags or kwargs:
                msg = (
                    "CometMLMonitor: an 'experiment' was given, so 'tags' and the Experiment "
                    f"arguments would be ignored; got tags={tags!r}, kwargs={sorted(kwargs)}"
                )
                raise ValueError(msg)
            self._exp = experiment
        else:
            kwargs.setdefault("auto_output_logging", None)
            self._exp = comet_ml.Experiment(**kwargs)
            if tags:
                self._exp.add_tags(list(tags))

    @property
    def experiment(self) -> Any:
        """The ``comet_ml.Experiment``."""
        return self._exp

    def _before_train(self) -> None:
        self._exp.set_model_graph(self.graph)

    def process_scalar(self, name: str, val: float) -> None:
        self._exp.log_metric(name, val, step=self.trainer.global_step)

    def process_image(self, name: str, val: np.ndarray) -> None:
        step = self.trainer.global_step
        for i, img in enumerate(val):
            self._exp.log_image(
                np.clip(img, 0, 255).astype(np.uint8),
                name=name if len(val) == 1 else f"{name}_{i}",
                step=step,
            )

    def _trigger_epoch(self) -> None:
        self._exp.log_epoch_end(self.trainer.epoch_num)

    def _after_train(self) -> None:
        self._exp.end()
