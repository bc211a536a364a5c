"""The simulated server's HTTP API: routes, auth, and the JSON SGLang answers with.

Generation requests become scheduler requests (see api.py); everything else is
read from the resolved configuration and the scheduler's counters.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs

from autotune import __version__
from autotune.engines import sglang_facts
from autotune.sim import api, httpio, logs, metrics, model
from autotune.sim.args import SimArgs
from autotune.sim.profiles import Profile
from autotune.sim.scheduler import Req, Scheduler

SGLANG_VERSION = sglang_facts.SIMULATED
#: What `--api-key` leaves open, as SGLang 0.5.23 decides it (sglang/srt/utils/auth.py,
#: decide_request_auth): any OPTIONS, and every path starting with one of these.
PUBLIC_PREFIXES = ("/health", "/ready", "/metrics")


class _Status:
    """A handler's answer with a status other than 200."""

    __slots__ = ("body", "status")

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body


Reply = bytes | _Status | None  # None: the handler wrote a stream itself
Handler = Callable[[httpio.Request, asyncio.StreamWriter], Awaitable[Reply]]


class SimServer:
    #: (method, path) -> handler: SGLang 0.5.23's paths (tests/conformance checks them).
    ROUTES: ClassVar[dict[tuple[str, str], str]] = {
        ("GET", "/health"): "health",
        ("GET", "/health_generate"): "health",
        ("GET", "/ready"): "health",
        ("GET", "/v1/models"): "models",
        ("GET", "/get_model_info"): "model_info",
        ("GET", "/model_info"): "model_info",
        ("GET", "/get_server_info"): "deprecated_server_info",
        ("GET", "/server_info"): "server_info",
        ("GET", "/metrics"): "metrics",
        ("GET", "/sim/stats"): "sim_stats",
        ("POST", "/flush_cache"): "flush_cache",
        ("POST", "/generate"): "generate",
        ("POST", "/v1/completions"): "completions",
        ("POST", "/v1/chat/completions"): "chat",
    }

    def __init__(self, args: SimArgs, profile: Profile, resolved: model.Resolved) -> None:
        self.args = args
        self.profile = profile
        self.resolved = resolved
        seed = args.sim.seed if args.sim.seed is not None else int.from_bytes(os.urandom(8))
        self.rng = random.Random(seed)
        noise = args.sim.noise
        # A restart of a real GPU server is never exactly as fast as the last one.
        factor = min(1.25, max(0.8, self.rng.gauss(1.0, noise))) if noise > 0 else 1.0
        self.scheduler = Scheduler(
            profile,
            resolved,
            rng=self.rng,
            noise=noise,
            speed_factor=factor,
            time_scale=args.sim.speedup,
        )
        self.scheduler.loop_share = args.sim.loop_share
        self.model_name = args.served_model_name or args.model_path or profile.model_path
        self.ready = False
        self.created = int(time.time())
        self.served = 0
        fault = args.sim.fault
        self.crash_after = int(fault.value) if fault and fault.kind == "crash-after" else None
        if fault and fault.kind == "crash-once-after" and fault.path:
            # A transient fault: the first start that finds no marker crashes, and leaves
            # the marker so that every later start runs through.
            marker = Path(fault.path)
            if not marker.exists():
                marker.touch()
                self.crash_after = int(fault.value)
        self.routes: dict[tuple[str, str], Handler] = {
            key: getattr(self, name) for key, name in self.ROUTES.items()
        }
        self.paths = {p for _, p in self.routes}

    # -- connections ----------------------------------------------------------------
    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("127.0.0.1", 0)
        try:
            while True:
                try:
                    req = await httpio.read_request(reader, writer)
                except httpio.BadRequest as exc:
                    writer.write(httpio.response(400, api.error_body(str(exc)), keep_alive=False))
                    break
                if req is None:
                    break
                status = await self.dispatch(req, writer)
                logs.info(
                    f'INFO:     {peer[0]}:{peer[1]} - "{req.method} {req.path} {req.version}" '
                    f"{status} {httpio.REASONS.get(status, '')}"
                )
                if not req.keep_alive or writer.transport.is_closing():
                    break
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def dispatch(self, req: httpio.Request, writer: asyncio.StreamWriter) -> int:
        """Answer one request; returns the status for the access log."""
        handler = self.routes.get((req.method, req.path))
        status, body = 200, None
        if handler is None:
            status = 405 if req.path in self.paths else 404
            detail = "Method Not Allowed" if status == 405 else "Not Found"
            body = json.dumps({"detail": detail}).encode()
        elif self.args.api_key and not self._open(req) and not self._authorized(req):
            status, body = 401, b'{"error":"Unauthorized"}'
        else:
            try:
                body = await handler(req, writer)
            except api.ApiError as exc:
                status, body = exc.status, api.error_body(exc.message, exc.status)
            if isinstance(body, _Status):
                status, body = body.status, body.body
        if body is not None:
            ctype = (
                "text/plain; version=0.0.4"
                if req.path == "/metrics" and status == 200
                else ("application/json")
            )
            writer.write(httpio.response(status, body, ctype, keep_alive=req.keep_alive))
        return status

    @staticmethod
    def _open(req: httpio.Request) -> bool:
        return req.method == "OPTIONS" or req.path.startswith(PUBLIC_PREFIXES)

    def _authorized(self, req: httpio.Request) -> bool:
        # "<scheme> <token>", the scheme `bearer` in any case (auth.py, decide_request_auth).
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and token == self.args.api_key

    # -- plain endpoints ----------------------------------------------------------------
    async def health(self, req: httpio.Request, writer: asyncio.StreamWriter) -> Reply:
        return b"" if self.ready else _Status(503, b"")

    async def models(self, req: httpio.Request, writer: asyncio.StreamWriter) -> bytes:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "sglang",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.profile.context_len,
        }
        return json.dumps({"object": "list", "data": [card]}).encode()

    async def model_info(self, req: httpio.Request, writer: asyncio.StreamWriter) -> bytes:
        path = self.args.model_path or self.profile.model_path
        return json.dumps(
            {
                "model_path": path,
                "tokenizer_path": path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": self.profile.model_type,
                "architectures": [self.profile.architecture],
            }
        ).encode()

    def server_args(self) -> dict[str, Any]:
        """The resolved launch arguments, as SGLang's ServerArgs names them."""
        r, a, s = self.resolved, self.args, self.resolved.spec
        return {
            "model_path": a.model_path or self.profile.model_path,
            "tokenizer_path": a.model_path or self.profile.model_path,
            "served_model_name": self.model_name,
            "host": a.host,
            "port": a.port,
            "tp_size": self.profile.tp,
            "mem_fraction_static": r.mem_fraction_static,
            "max_running_requests": r.max_running_requests,
            "max_total_tokens": None,
            "chunked_prefill_size": model.CHUNKED_PREFILL_SIZE,
            "max_prefill_tokens": model.MAX_PREFILL_TOKENS,
            "context_length": None,
            "cuda_graph_max_bs": r.cuda_graph_max_bs,
            "enable_metrics": a.enable_metrics,
            "api_key": a.api_key,  # in plain text, as 0.5.23's server_info answers it
            "speculative_algorithm": r.algorithm,
            "speculative_num_steps": s.steps if s.on else a.launch.speculative_num_steps,
            "speculative_eagle_topk": s.topk if s.on else a.launch.speculative_eagle_topk,
            "speculative_num_draft_tokens": s.draft
            if s.on
            else (a.launch.speculative_num_draft_tokens),
            "disable_overlap_schedule": a.launch.disable_overlap_schedule,
            "speculative_adaptive": a.launch.speculative_adaptive and r.adaptive is not None,
            "speculative_adaptive_config": a.launch.speculative_adaptive_config,
            **_ngram_args(r.ngram),
        }

    async def server_info(self, req: httpio.Request, writer: asyncio.StreamWriter) -> bytes:
        r, st = self.resolved, self.scheduler.stats
        state: dict[str, Any] = {
            "last_gen_throughput": round(st.last_gen_throughput, 4),
            "memory_usage": {
                "weight": self.profile.weights_gb,
                "kvcache": round(2 * r.kv_size_gb, 2),
                "token_capacity": r.max_total_num_tokens,
            },
            "effective_max_running_requests_per_dp": r.max_running_requests,
        }
        avg = self.scheduler.avg_accept_length()
        if avg is not None:
            state["avg_spec_accept_length"] = round(avg, 6)
        if r.adaptive is not None:
            # The tier the controller runs now; the top-level value is the launch's.
            state["speculative_num_steps"] = self.scheduler.live_steps
            state["speculative_num_draft_tokens"] = self.scheduler.live_steps + 1
        info = {
            **self.server_args(),
            "max_total_num_tokens": r.max_total_num_tokens,
            "max_req_input_len": min(r.context_len, r.max_total_num_tokens) - 1,
            "internal_states": [state],
            "version": SGLANG_VERSION,
            # 0.5.20 on: the argv the server was given, joined by spaces (server_args.py).
            # 0.5.23 masks only its watermark settings here: the API key comes back as given.
            "launch_command": " ".join(self.args.argv),
            "status": "ready" if self.ready else "starting",
            "startup_time": self.created,
            "frontend": "python",
        }
        if self.args.sim.speedup != 1.0:
            # Not SGLang's: the simulator's own word that it is a rehearsal, sped up.
            info["sim_speedup"] = self.args.sim.speedup
        return json.dumps(info).encode()

    async def deprecated_server_info(
        self, req: httpio.Request, writer: asyncio.StreamWriter
    ) -> bytes:
        # SGLang logs this on every call (entrypoints/http_server.py, get_server_info).
        logs.info(sglang_facts.DEPRECATED_SERVER_INFO_WARNING.text)
        return await self.server_info(req, writer)

    async def metrics(self, req: httpio.Request, writer: asyncio.StreamWriter) -> Reply:
        if not self.args.enable_metrics:
            return _Status(404, json.dumps({"detail": "Not Found"}).encode())
        return metrics.render(self.scheduler, self.model_name).encode()

    async def sim_stats(self, req: httpio.Request, writer: asyncio.StreamWriter) -> bytes:
        snap = self.scheduler.snapshot()
        snap.update(
            ready=self.ready,
            profile=self.profile.name,
            fault=str(self.args.sim.fault) if self.args.sim.fault else None,
            simulator_version=__version__,
            resolved={
                "speculative_algorithm": self.resolved.algorithm,
                "speculative_num_steps": self.resolved.spec.steps,
                "speculative_eagle_topk": self.resolved.spec.topk,
                "speculative_num_draft_tokens": self.resolved.spec.draft,
                "max_running_requests": self.resolved.max_running_requests,
                "max_total_num_tokens": self.resolved.max_total_num_tokens,
                "overlap": self.resolved.overlap,
                "adaptive": None
                if self.resolved.adaptive is None
                else self.resolved.adaptive.as_json(),
                "adaptive_steps": {
                    str(k): v.steps for k, v in sorted(self.scheduler.slots.items())
                },
            },
        )
        return json.dumps(snap).encode()

    async def flush_cache(self, req: httpio.Request, writer: asyncio.StreamWriter) -> Reply:
        # As SGLang: refused while requests run or wait, unless `?timeout=` lets it wait.
        deadline = time.monotonic() + _query_float(req, "timeout")
        while not self.scheduler.idle():
            if time.monotonic() >= deadline:
                return _Status(400, b"Flush cache failed.\n")
            await asyncio.sleep(0.05)
        self.scheduler.flush()
        return _Status(
            200,
            b"Cache flushed.\nPlease check backend logs for more details. "
            b"(When there are running or waiting requests, the operation will not "
            b"be performed.)\n",
        )

    # -- generation ---------------------------------------------------------------------
    async def chat(self, req: httpio.Request, writer: asyncio.StreamWriter) -> bytes | None:
        return await self._openai(req, writer, chat=True)

    async def completions(self, req: httpio.Request, writer: asyncio.StreamWriter) -> bytes | None:
        return await self._openai(req, writer, chat=False)

    async def _openai(
        self, req: httpio.Request, writer: asyncio.StreamWriter, *, chat: bool
    ) -> bytes | None:
        body = _json_body(req)
        params = api.parse_chat(body) if chat else api.parse_completion(body)
        eos = self.profile.eos_token_id
        if params.stream:
            # The chunks carry the request id, so the request exists before its sink.
            r = api.make_request(self.scheduler, params, None)
            stream = api.OpenAIStreamSink(
                self.scheduler,
                writer,
                chat=chat,
                model_name=self.model_name,
                include_usage=params.include_usage,
                eos_token_id=eos,
                rid=r.rid,
            )
            r.sink = stream
            writer.write(httpio.stream_head())
            await self._run(r, stream)
            return None
        sink = api.CollectSink()
        r = api.make_request(self.scheduler, params, sink)
        await self._run(r, sink)
        text = "".join(sink.parts)
        return api.openai_body(r, text, chat=chat, model_name=self.model_name, eos_token_id=eos)

    async def generate(self, req: httpio.Request, writer: asyncio.StreamWriter) -> bytes | None:
        params = api.parse_generate(_json_body(req))
        eos, spec = self.profile.eos_token_id, self.resolved.spec.on
        if params.stream:
            sink: Any = api.GenerateStreamSink(self.scheduler, writer, eos_token_id=eos)
            r = api.make_request(self.scheduler, params, sink)
            writer.write(httpio.stream_head())
            await self._run(r, sink)
            return None
        sink = api.CollectSink()
        r = api.make_request(self.scheduler, params, sink)
        await self._run(r, sink)
        return api.generate_body(r, "".join(sink.parts), spec=spec, eos_token_id=eos)

    async def _run(self, r: Req, sink: Any) -> None:
        self.scheduler.submit(r)
        try:
            await sink.done
        except asyncio.CancelledError:
            self.scheduler.abort(r)
            raise
        if r.state == "finished":
            self.served += 1
            if self.crash_after is not None and self.served >= self.crash_after:
                asyncio.get_running_loop().call_soon(self.crash)

    def crash(self) -> None:
        logs.traceback(
            (
                (
                    "sglang/srt/managers/scheduler.py, in run_scheduler_process",
                    "scheduler.event_loop_normal()",
                ),
                (
                    "sglang/srt/managers/scheduler.py, in event_loop_normal",
                    "result = self.run_batch(batch)",
                ),
            ),
            "RuntimeError",
            "CUDA error: an illegal memory access was encountered",
        )
        logs.info("Received sigquit from a child process. It usually means the child failed.")
        os._exit(1)


def _json_body(req: httpio.Request) -> dict[str, Any]:
    try:
        body = json.loads(req.body or b"null")
    except ValueError as exc:
        raise api.ApiError(f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise api.ApiError("the request body must be a JSON object")
    return body


def _ngram_args(ngram: model.Ngram | None) -> dict[str, Any]:
    """SGLang's speculative_ngram_* server args (its defaults when NGRAM is not in use)."""
    d = model.NGRAM_DEFAULTS
    n = ngram or model.Ngram(
        int(d["min_bfs_breadth"]),
        int(d["max_bfs_breadth"]),
        str(d["match_type"]),
        int(d["max_trie_depth"]),
        int(d["capacity"]),
    )
    return {
        "speculative_ngram_min_bfs_breadth": n.min_bfs_breadth,
        "speculative_ngram_max_bfs_breadth": n.max_bfs_breadth,
        "speculative_ngram_match_type": n.match_type,
        "speculative_ngram_max_trie_depth": n.max_trie_depth,
        "speculative_ngram_capacity": n.capacity,
    }


def _query_float(req: httpio.Request, name: str) -> float:
    """A non-negative number from the query string (0 when absent or not a number)."""
    for value in parse_qs(req.query).get(name, []):
        try:
            return max(0.0, float(value))
        except ValueError:
            return 0.0
    return 0.0
