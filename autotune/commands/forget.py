"""`autotune forget`: take back trials recorded wrongly, so the study measures them again.

A night on a broken host (the module missing, the port held by another server) could
record good configs as infeasible before autotune told host failures apart; a trial
measured on the wrong server is false too. Forgotten trials turn FAIL with a `forgotten`
record (what they were, when, why): they count against no budget, no sampler learns from
them, status, the report and the dashboard show them as forgotten, and their configs are
queued again for the next `autotune start`.
"""

from __future__ import annotations

import datetime as dt

from autotune.config import Config
from autotune.errors import AutotuneError
from autotune.search import study as st


def parse_time(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """`HH:MM` (today, local time) or an ISO date-time, as the naive local time Optuna's
    trials carry."""
    now = now or dt.datetime.now()
    try:
        clock = dt.datetime.strptime(text, "%H:%M")
        return now.replace(hour=clock.hour, minute=clock.minute, second=0, microsecond=0)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise AutotuneError(
            f"--failed-since: {text!r} is not HH:MM or a date-time like 2026-12-03T22:00"
        ) from None
    return when.astimezone().replace(tzinfo=None) if when.tzinfo else when


def forget(
    cfg: Config, trials: list[int], *, kind: str | None, failed_since: str | None
) -> list[int]:
    """Forget `trials` and those matching `kind` / `failed_since`; the numbers forgotten."""
    since = parse_time(failed_since) if failed_since is not None else None
    study = st.open_study(cfg, create=False)
    return st.forget(study, trials, kind=kind, failed_since=since)
