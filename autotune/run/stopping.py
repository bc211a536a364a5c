"""Stopping a study cleanly: signals and deadlines set a flag that the trial loop reads.

First SIGINT/SIGTERM (or the deadline): the running level finishes, the trial
is not recorded as a success, the end-of-study action runs, exit 0. A second
signal aborts at once (KeyboardInterrupt); the daemon then only puts a known
unit in place, without waiting for it.
"""

from __future__ import annotations

import signal
import threading
import time
from datetime import datetime, timedelta
from types import FrameType

from autotune.log import get

log = get("autotune")


class TrialInterrupted(Exception):
    """The study is stopping: the trial in progress must not be recorded as measured."""


class StopRequest:
    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None
        self._timer: threading.Timer | None = None

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()
            log.warning("stopping after the current benchmark level", reason=reason)

    def check(self) -> None:
        """Raise TrialInterrupted once a stop was requested."""
        if self._event.is_set():
            raise TrialInterrupted(self.reason or "stop requested")

    def install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if self._event.is_set():
                raise KeyboardInterrupt(f"second {name}")
            self.request(f"{name} received (send it again to abort at once)")

        signal.signal(signal.SIGINT, handle)
        signal.signal(signal.SIGTERM, handle)

    def stop_at(self, deadline: float, why: str) -> None:
        """Request a stop at wall-clock time `deadline` (seconds since the epoch)."""
        delay = max(0.0, deadline - time.time())
        self._timer = threading.Timer(delay, self.request, args=(why,))
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def deadline_from(
    until: str | None, max_hours: float | None, now: datetime | None = None
) -> float | None:
    """The earlier of `--until HH:MM` (next occurrence, local time) and now + `--max-hours`."""
    now = now or datetime.now()
    candidates: list[datetime] = []
    if until is not None:
        try:
            hh, mm = (int(x) for x in until.split(":"))
            target = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        except ValueError:
            raise ValueError(f"--until must be HH:MM (24-hour clock), got {until!r}") from None
        if target <= now:
            target += timedelta(days=1)
        candidates.append(target)
    if max_hours is not None:
        if max_hours <= 0:
            raise ValueError(f"--max-hours must be positive, got {max_hours}")
        candidates.append(now + timedelta(hours=max_hours))
    return min(candidates).timestamp() if candidates else None
