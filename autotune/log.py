"""structlog setup: readable on a terminal, JSON lines under systemd or when asked.

On a terminal a running study also keeps one live status line under the log (`progress`):
trial i of N, its config, the level being measured and its running tok/s, time left.
Log lines print above it; anywhere else (a pipe, the journal) there is no status line and
the periodic log lines say the same.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import threading
import warnings
from typing import TextIO

import structlog

from autotune.unit import secrets

#: The parts of the status line, in the order shown.
PROGRESS_PARTS = ("trial", "config", "level", "tok_s", "left")


class _LiveHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record above the live status line, then draws the line again."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.drawn = False
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self.guard:
            self._erase()
            super().emit(record)
            self._draw()

    def redraw(self) -> None:
        with self.guard:
            self._erase()
            self._draw()

    def _erase(self) -> None:
        if self.drawn:
            self.stream.write("\r\033[K")
            self.drawn = False

    def _draw(self) -> None:
        text = progress_text()
        if text:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write(text[:width])
            self.stream.flush()
            self.drawn = True


def _want_json() -> bool:
    forced = os.environ.get("AUTOTUNE_LOG_FORMAT", "").lower()
    if forced in ("json", "console"):
        return forced == "json"
    # journald sets JOURNAL_STREAM for services whose stdout/stderr it captures.
    return "JOURNAL_STREAM" in os.environ or not sys.stderr.isatty()


_json = False
_live: _LiveHandler | None = None
_parts: dict[str, str] = {}


def is_json() -> bool:
    """Whether lines go out as JSON (under systemd, or --log-format json)."""
    return _json


def setup(level: str | int = "INFO", json: bool | None = None) -> None:
    """Route structlog, stdlib logging, Optuna and warnings through one renderer."""
    global _json, _live
    use_json = _want_json() if json is None else json
    _json = use_json
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso" if use_json else "%H:%M:%S", utc=use_json),
        # A server's log line quoted in autotune's (SGLang prints its API key at startup).
        secrets.log_processor,
    ]
    renderer: structlog.types.Processor
    if use_json:
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )

    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    tty = not use_json and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    handler = _LiveHandler(sys.stderr) if tty else logging.StreamHandler(sys.stderr)
    _live = handler if isinstance(handler, _LiveHandler) else None
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info if use_json else (lambda _l, _m, e: e),
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)

    import optuna

    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()
    # Optuna logs every trial at INFO; autotune reports trials itself.
    logging.getLogger("optuna").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    logging.captureWarnings(True)
    warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")
    # set_metric_names and friends are stable enough for autotune's use.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # autotune records heartbeats itself around each trial (search/workers.heartbeat).
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


def live() -> bool:
    """Whether a live status line is shown (a terminal, console logs)."""
    return _live is not None


def progress(**parts: str | None) -> None:
    """Set parts of the status line (PROGRESS_PARTS; None clears one). Kept also without a
    terminal, for `progress_text` (the study's record of the running trial)."""
    for key, value in parts.items():
        if value:
            _parts[key] = value
        else:
            _parts.pop(key, None)
    if _live is not None:
        _live.redraw()


def clear_progress() -> None:
    """No study runs any more: the status line goes."""
    progress(**dict.fromkeys(PROGRESS_PARTS))


atexit.register(clear_progress)


def progress_text() -> str:
    """The status line as it stands (empty when nothing runs)."""
    return " · ".join(_parts[k] for k in PROGRESS_PARTS if _parts.get(k))


def get(name: str = "autotune") -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
