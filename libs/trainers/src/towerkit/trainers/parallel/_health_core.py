"""A task's health as a cluster watch sees it: frozen records and one pure transition.

The watch probes each task (`Reach`: it answered, it only accepted the connection, or
nothing) and hears of tasks alive by other ways (a worker's check-in on a parameter
server, a session that reached it), and of tasks that were up although this watch never
reached them (word that the job went past its start: a chief only trains once every
parameter server serves). `advance_health` folds one such event into a
task's `TaskHealth`; the states and their edges are drawn in the trainers' README
("A task's health, as the watch sees it"): answers (or word) lead to ANSWERING,
accepts only to ACCEPTING, nothing to SILENT once seen (NEVER_SEEN before), and any
state past its bound (`lost_reason`) to LOST. A connection accepted and not answered
waits (the watch keeps it open) until the task answers: one that waits for longer than
the task may go unheard is a stopped or hung process.

LOST is final: a port that answers again after its task was lost (the task restarted,
or another server took the port) does not bring the task back.
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["Health", "Reach", "TaskHealth", "advance_health", "lost_reason", "start_health"]


class Reach(enum.Enum):
    """What one probe of a task's server found."""

    ANSWERS = "answers"
    """It accepted the connection and answered the HTTP/2 preface in time."""
    ACCEPTS = "accepts"
    """It accepted the connection but answered nothing in time (loaded, stopped, hung)."""
    NOTHING = "nothing"
    """No connection: refused, unreachable, or not accepted in time."""


class Health(enum.Enum):
    """Where a task stands, as the watch sees it."""

    NEVER_SEEN = "never seen"
    """No probe has reached it, and nothing told the watch it is alive."""
    ACCEPTING = "accepting"
    """The last probe was accepted but not answered."""
    ANSWERING = "answering"
    """The last probe was answered, or the task was just heard from."""
    SILENT = "silent"
    """Seen before; the last probe reached nothing."""
    LOST = "lost"
    """Past its bound: dead (final)."""


def _optional_time(value: float | None) -> float | None:
    return None if value is None else float(value)


@attrs.frozen(kw_only=True)
class TaskHealth:
    """One task's health: its state and the times that bound it (seconds, one monotonic clock).

    Attributes:
        status: the state (`Health`).
        since: when the watch began watching the task.
        alive_at: the last time the task was known alive: its server answered a probe,
            or the watch heard from it another way; None: never.
        answered: whether a probe was ever answered (word alone is not an answer).
        accepted_at: the last time its server accepted a probe's connection (answered
            or not); None: never.
        reason: why it is lost (empty unless LOST).
        vouched_at: the first time the watch had word that the task was up (the job
            went past its start) though it had not reached it; None: never.
        waiting_since: since when a connection it accepted has waited for its answer:
            the first probe accepted but not answered since the last answer; None: no
            probe waits. The watch keeps that connection open, so a server that answers
            late is still heard; a stopped one never answers it.

    Examples:
        >>> start_health(0.0)
        TaskHealth(status=<Health.NEVER_SEEN: 'never seen'>, since=0.0, alive_at=None, answered=False, accepted_at=None, reason='', vouched_at=None, waiting_since=None)
    """

    status: Health = attrs.field(validator=attrs.validators.instance_of(Health))
    since: float = attrs.field(converter=float)
    alive_at: float | None = attrs.field(default=None, converter=_optional_time)
    answered: bool = False
    accepted_at: float | None = attrs.field(default=None, converter=_optional_time)
    reason: str = ""
    vouched_at: float | None = attrs.field(default=None, converter=_optional_time)
    waiting_since: float | None = attrs.field(default=None, converter=_optional_time)


def start_health(now: float, *, alive: bool = False) -> TaskHealth:
    """A task as the watch first sees it at `now`: never seen, or known alive (`alive`).

    A task known alive when the watch starts (the session just reached it) is bound by
    ``dead_after`` from the start, as one seen answering.

    >>> start_health(5.0, alive=True).status
    <Health.ANSWERING: 'answering'>
    """
    if alive:
        return TaskHealth(status=Health.ANSWERING, since=now, alive_at=now, accepted_at=now)
    return TaskHealth(status=Health.NEVER_SEEN, since=now)


_LAST_FOUND = {
    Health.ACCEPTING: " (it accepts connections but answers nothing)",
    Health.SILENT: " (no connection)",
}
"""What a loss's reason adds about the last probe, when there was one since it was alive."""


def _quiet_since(health: TaskHealth) -> float:
    """Since when a task vouched for but never known alive has accepted nothing."""
    assert health.vouched_at is not None
    if health.accepted_at is None:
        return health.vouched_at
    return max(health.vouched_at, health.accepted_at)


def lost_reason(health: TaskHealth, now: float, dead_after: float, start_within: float) -> str:
    """Why `health` is past its bound at `now` (seconds), or ``""`` while it is not.

    Known alive once: lost more than `dead_after` seconds after it was last known alive
    (once a probe was answered, accepting a connection is not being alive: a stopped
    process's kernel accepts). A task known alive by word whose probes were never
    answered in time (a live server on a loaded machine answers late) is alive while it
    accepts, until `start_within` seconds have passed since the watch began: a task
    stopped before any probe of it was answered accepts forever, so from then on
    accepting no longer counts.
    Never known alive but seen accepting (a live server that answers late on a loaded
    machine): lost once it has accepted nothing for more than `dead_after` seconds, or
    once `start_within` seconds have passed since the watch began (a stopped process
    accepts forever). Never seen: lost once `start_within` seconds have passed since
    the watch began, or, once there was word that it was up (`vouched_at`), once it
    has accepted nothing for more than `dead_after` seconds since that word.
    In every state, a connection it accepted that has waited unanswered
    (`TaskHealth.waiting_since`) for more than `dead_after` seconds, with no word of
    the task since it was opened, makes it lost: a stopped process's kernel accepts,
    but nothing answers.

    >>> h = start_health(0.0, alive=True)
    >>> lost_reason(h, 4.0, 5.0, 600.0), lost_reason(h, 6.0, 5.0, 600.0)
    ('', 'unreachable for 6 s')
    """
    if health.status is Health.LOST:
        return health.reason
    why = _past_state_bound(health, now, dead_after, start_within)
    if why or health.waiting_since is None:
        return why
    # a connection accepted and never answered, and no word since it was opened: a
    # stopped or hung process (a live one answers, late on a loaded machine)
    words = (health.alive_at, health.vouched_at)
    quiet = max([health.waiting_since, *(w for w in words if w is not None)])
    if now - quiet > dead_after:
        return (
            f"accepted a connection {now - health.waiting_since:.0f} s ago and never "
            "answered it (stopped or hung)"
        )
    return ""


def _past_state_bound(
    health: TaskHealth, now: float, dead_after: float, start_within: float
) -> str:
    """`lost_reason`'s bound of each state, the waiting connection aside."""
    if health.alive_at is not None:
        # a task whose probes were never answered in time (a loaded machine) but that is
        # known alive otherwise lives on while it accepts connections, for start_within
        alive, accepted = health.alive_at, health.accepted_at
        lenient = not health.answered and accepted is not None
        past_start = now - health.since > start_within
        if accepted is not None and lenient and not past_start:
            alive = max(alive, accepted)
        if now - alive > dead_after:
            if lenient and past_start and health.status is Health.ACCEPTING:
                return (
                    f"unreachable for {now - alive:.0f} s (it accepts connections but "
                    f"never answered a probe within {start_within:g} s)"
                )
            last = _LAST_FOUND.get(health.status, "")
            return f"unreachable for {now - alive:.0f} s{last}"
    elif health.vouched_at is not None:
        # the word bounds it by dead_after from then on: an accept before the word does
        # not count against it (it is quiet since the later of the two)
        gone = now - _quiet_since(health)
        if gone > dead_after:
            return (
                f"unreachable for {gone:.0f} s after the job went past its start "
                "(it was up; this task never reached it)"
            )
        if now - health.since > start_within:
            if health.accepted_at is not None:
                return f"accepts connections but never answered within {start_within:g} s"
            return f"never came up within {start_within:g} s"
    elif health.accepted_at is not None:
        if now - health.accepted_at > dead_after:
            gone = now - health.accepted_at
            return f"accepts no connection for {gone:.0f} s (it never answered in time)"
        if now - health.since > start_within:
            return f"accepts connections but never answered within {start_within:g} s"
    elif now - health.since > start_within:
        return f"never came up within {start_within:g} s"
    return ""


def advance_health(
    health: TaskHealth,
    reach: Reach | None,
    now: float,
    *,
    dead_after: float,
    start_within: float,
    heard: bool = False,
    vouched: bool = False,
) -> TaskHealth:
    """The health after one event at `now`: a probe's `reach`, word that it is alive, or time.

    Args:
        health: the health before.
        reach: what a probe found at `now`; None: no probe (only time passed). ACCEPTS
            starts `TaskHealth.waiting_since` unless a connection already waits; only
            ANSWERS (the waiting connection's answer, or a new one's) ends it.
        now: seconds on the watch's clock (not before the events already folded in).
        dead_after: seconds a task known alive may go unheard before it is lost.
        start_within: seconds a task never seen may take to come up.
        heard: the watch heard at `now`, another way, that the task is alive.
        vouched: word at `now` that the task was up though the watch may never have
            reached it (the job went past its start); the first such word bounds a task
            never known alive by `dead_after` (`lost_reason`).

    Returns:
        The new health; LOST (with its reason) once past its bound (`lost_reason`).
        A LOST health is returned unchanged, whatever the event.

    Examples:
        >>> h = start_health(0.0)
        >>> h = advance_health(h, Reach.ACCEPTS, 1.0, dead_after=5, start_within=60)
        >>> h.status, h.accepted_at, h.alive_at
        (<Health.ACCEPTING: 'accepting'>, 1.0, None)
        >>> h = advance_health(h, Reach.NOTHING, 7.0, dead_after=5, start_within=60)
        >>> h.status, h.reason
        (<Health.LOST: 'lost'>, 'accepts no connection for 6 s (it never answered in time)')
    """
    if health.status is Health.LOST:
        return health
    alive_at, accepted_at, status = health.alive_at, health.accepted_at, health.status
    answered = health.answered or reach is Reach.ANSWERS
    waiting_since = None if reach is Reach.ANSWERS else health.waiting_since
    if reach is Reach.ACCEPTS and waiting_since is None:
        waiting_since = now
    if heard or reach is Reach.ANSWERS:
        alive_at, accepted_at, status = now, now, Health.ANSWERING
    elif reach is Reach.ACCEPTS:
        accepted_at, status = now, Health.ACCEPTING
    elif reach is Reach.NOTHING and status is not Health.NEVER_SEEN:
        status = Health.SILENT
    vouched_at = now if vouched and health.vouched_at is None else health.vouched_at
    health = attrs.evolve(
        health,
        status=status,
        alive_at=alive_at,
        answered=answered,
        accepted_at=accepted_at,
        vouched_at=vouched_at,
        waiting_since=waiting_since,
    )
    why = lost_reason(health, now, dead_after, start_within)
    return attrs.evolve(health, status=Health.LOST, reason=why) if why else health
