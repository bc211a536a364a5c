"""SGLang's plain log lines, as a log parser sees them on stdout / in journald.

Every line is flushed at once: a deployer tails the log to learn the capacity
and readiness, and a line stuck in a buffer is a line it never sees.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import TextIO

_out: TextIO = sys.stdout


def set_stream(stream: TextIO) -> None:
    global _out
    _out = stream


def _stamp(tag: str) -> str:
    now = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    return f"[{now}{tag}] "


def info(msg: str) -> None:
    """A line from the HTTP/tokenizer process: `[YYYY-mm-dd HH:MM:SS] msg`."""
    _write(_stamp("") + msg)


def sched(msg: str) -> None:
    """A line from the scheduler process of TP rank 0: `[... TP0] msg`."""
    _write(_stamp(" TP0") + msg)


def raw(msg: str) -> None:
    """A line without prefix (uvicorn's banner, tqdm progress)."""
    _write(msg)


def _write(line: str) -> None:
    try:
        _out.write(line + "\n")
        _out.flush()
    except (BrokenPipeError, ValueError):
        pass  # nobody reads the log any more; the server keeps serving


def traceback(
    frames: Iterable[tuple[str, str]], exception: str, message: str, *, scheduler: bool = True
) -> None:
    """The tail of a Python traceback, as the failing SGLang process prints it."""
    head = "Scheduler hit an exception: " if scheduler else ""
    lines = [head + "Traceback (most recent call last):"]
    for where, code in frames:
        path, _, func = where.partition(", in ")
        lines.append(f'  File "/usr/local/lib/python3.12/dist-packages/{path}", in {func}')
        lines.extend("    " + c for c in code.splitlines())
    lines.append(f"{exception}: {message}" if message else exception)
    (sched if scheduler else info)(lines[0])
    for line in lines[1:]:
        raw(line)


def decode_line(
    running: int,
    tokens: int,
    usage: float,
    accept_len: float | None,
    accept_rate: float | None,
    cuda_graph: bool,
    throughput: float,
    queued: int,
) -> str:
    spec = ""
    if accept_len is not None and accept_rate is not None:
        spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
    return (
        f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
        f"{spec}cuda graph: {cuda_graph}, gen throughput (token/s): {throughput:.2f}, "
        f"#queue-req: {queued}, "
    )


def prefill_line(new_seq: int, new_tokens: int, usage: float, running: int, queued: int) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: 0, "
        f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queued}, "
    )


def capacity_line(
    max_total_num_tokens: int,
    chunked_prefill_size: int,
    max_prefill_tokens: int,
    max_running_requests: int,
    context_len: int,
    available_gpu_mem: float,
) -> str:
    return (
        f"max_total_num_tokens={max_total_num_tokens}, "
        f"chunked_prefill_size={chunked_prefill_size}, "
        f"max_prefill_tokens={max_prefill_tokens}, "
        f"max_running_requests={max_running_requests}, "
        f"context_len={context_len}, available_gpu_mem={available_gpu_mem:.2f} GB"
    )
