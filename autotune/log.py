"""structlog setup: readable on a terminal, JSON lines under systemd or when asked."""

from __future__ import annotations

import logging
import os
import sys
import warnings

import structlog


def _want_json() -> bool:
    forced = os.environ.get("AUTOTUNE_LOG_FORMAT", "").lower()
    if forced in ("json", "console"):
        return forced == "json"
    # journald sets JOURNAL_STREAM for services whose stdout/stderr it captures.
    return "JOURNAL_STREAM" in os.environ or not sys.stderr.isatty()


_json = False


def is_json() -> bool:
    """Whether lines go out as JSON (under systemd, or --log-format json)."""
    return _json


def setup(level: str | int = "INFO", json: bool | None = None) -> None:
    """Route structlog, stdlib logging, Optuna and warnings through one renderer."""
    global _json
    use_json = _want_json() if json is None else json
    _json = use_json
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso" if use_json else "%H:%M:%S", utc=use_json),
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
    handler = logging.StreamHandler(sys.stderr)
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
    # autotune records heartbeats itself around each trial (study.heartbeat).
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


def get(name: str = "autotune") -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
