"""The simulated server process: startup as SGLang does it, then serve until stopped.

Startup order matters to a deployer and is kept: argument checks (instant
refusals), weight loading with nothing listening, KV allocation (out of
memory refusals), graph capture, the capacity line, then the port opens with
/health at 503 until a warmup generation succeeds.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import NoReturn

from autotune.engines import sglang_facts
from autotune.sim import adaptive, api, httpio, logs, model
from autotune.sim.app import SimServer
from autotune.sim.args import SimArgs
from autotune.sim.profiles import Profile, get_profile


class _Died(Exception):
    """The simulated process fails (a refusal or a fault): exit code 1 after the log."""


# -- process lifecycle --------------------------------------------------------------------
async def serve(args: SimArgs) -> int:
    """Run the simulated server until SIGTERM/SIGINT (0) or a simulated failure (1)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    life = asyncio.create_task(_life(args))
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({life, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if stopper in done:
        logs.info("INFO:     Shutting down")
        logs.info(f"INFO:     Finished server process [{os.getpid()}]")
        life.cancel()
        return 0
    stopper.cancel()
    try:
        return life.result()
    except _Died:
        return 1


async def _life(args: SimArgs) -> int:
    profile = get_profile(args.sim.profile)
    _warn_ignored(args)
    resolved = model.resolve(profile, args.launch)
    if isinstance(resolved, model.Refusal) and resolved.stage == "args":
        _refuse_args(resolved)
    if isinstance(resolved, model.Resolved):
        for w in resolved.warnings:
            logs.info(w)
    logs.info(_server_args_line(args, profile))
    fault = args.sim.fault
    total = args.sim.load_time + (fault.value if fault and fault.kind == "slow-start" else 0.0)
    total /= args.sim.speedup  # a sped-up rehearsal loads faster too
    await _load(profile, args, total, crash=bool(fault and fault.kind == "crash-on-start"))
    if isinstance(resolved, model.Refusal):
        _die(resolved)
    await _allocate_and_capture(profile, resolved, total)
    sim = SimServer(args, profile, resolved)
    try:
        server = await asyncio.start_server(
            sim.connection, args.host, args.port, limit=httpio.MAX_HEADER_BYTES, backlog=1024
        )
    except OSError as exc:
        logs.info(
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{args.host}', {args.port}): {exc.strerror}"
        )
        raise _Died from None
    scheduler_task = asyncio.create_task(sim.scheduler.run())
    logs.info(f"INFO:     Started server process [{os.getpid()}]")
    logs.info("INFO:     Waiting for application startup.")
    logs.info("INFO:     Application startup complete.")
    logs.info(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    async with server:
        if fault and fault.kind == "hang-on-start":
            # Warmup never returns: the port answers, /health stays 503, the log stops.
            await asyncio.Event().wait()
        await asyncio.sleep(min(3.0, 0.25 + 0.03 * total))  # warmup: port open, not ready
        await _warmup(sim)
        sim.ready = True
        logs.info("The server is fired up and ready to roll!")
        if sim.crash_after == 0:
            sim.crash()
        await scheduler_task
    return 0


def _warn_ignored(args: SimArgs) -> None:
    """What the simulator was given and does not model, said as SGLang's warnings are."""
    if args.ignored:
        logs.info(
            "WARNING: the simulated server does not model these flags and ignores them: "
            + ", ".join(args.ignored)
        )
    unmodelled = adaptive.ignored_keys(args.launch.adaptive_config_text)
    if args.launch.speculative_adaptive and unmodelled:
        logs.info(
            "WARNING: the simulated server reads these adaptive-config keys as 'ema' defaults "
            "and does not model them: " + ", ".join(unmodelled)
        )


def _refuse_args(refusal: model.Refusal) -> NoReturn:
    """An argument SGLang rejects before loading anything: its traceback, then exit."""
    logs.raw("Traceback (most recent call last):")
    logs.raw(
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", in <module>'
    )
    logs.raw("    server_args = prepare_server_args(sys.argv[1:])")
    for where, code in refusal.frames:
        path, _, func = where.partition(", in ")
        logs.raw(f'  File "/usr/local/lib/python3.12/dist-packages/{path}", in {func}')
        for line in code.splitlines():
            logs.raw("    " + line)
    logs.raw(refusal.reason)
    raise _Died


async def _allocate_and_capture(profile: Profile, resolved: model.Resolved, total: float) -> None:
    """The KV pool allocated and the CUDA graphs captured, with the lines SGLang logs (a
    capture that fails dies here, as SGLang's does)."""
    for w in resolved.pool_warnings:
        logs.sched(w)
    logs.sched("Using KV cache dtype: torch.bfloat16")
    logs.sched(
        f"KV Cache is allocated. #tokens: {resolved.max_total_num_tokens}, "
        f"K size: {resolved.kv_size_gb:.2f} GB, V size: {resolved.kv_size_gb:.2f} GB"
    )
    free = profile.gpu_mem_gb * (1 - resolved.mem_fraction_static) + 1.9
    logs.sched(f"Memory pool end. avail mem={free:.2f} GB")
    logs.sched(
        f"Capture cuda graph begin. This can take up to several minutes. avail mem={free:.2f} GB"
    )
    bs = list(
        sglang_facts.decode_capture_sizes(resolved.cuda_graph_max_bs, speculative=resolved.spec.on)
    )
    logs.sched(f"Capture cuda graph bs {bs}")
    await asyncio.sleep(total * 0.2)
    if resolved.late_failure is not None:
        _die(resolved.late_failure)
    if resolved.adaptive is not None:
        union = list(resolved.adaptive.union)
        logs.sched(
            f"AdaptiveSpeculativeParams initialized: steps={resolved.spec.steps}, "
            f"candidate_steps={union}"
        )
        for steps in union:
            logs.sched(
                f"Built adaptive runtime state steps={steps}: elapsed={total * 0.02:.2f}s, "
                f"mem={0.05 * (steps + 1):.2f}GB"
            )
    graph_gb = free - resolved.available_gpu_mem
    logs.sched(
        f"Capture cuda graph end. Time elapsed: {total * 0.2:.2f} s. mem usage={graph_gb:.2f} GB. "
        f"avail mem={resolved.available_gpu_mem:.2f} GB."
    )
    logs.sched(
        logs.capacity_line(
            resolved.max_total_num_tokens,
            model.CHUNKED_PREFILL_SIZE,
            model.MAX_PREFILL_TOKENS,
            resolved.max_running_requests,
            resolved.context_len,
            resolved.available_gpu_mem,
        )
    )


async def _load(profile: Profile, args: SimArgs, total: float, *, crash: bool) -> None:
    """Weight loading: progress lines, nothing listening; `crash` fails halfway."""
    logs.sched("Init torch distributed begin.")
    await asyncio.sleep(total * 0.05)
    logs.sched("Init torch distributed ends. mem usage=0.00 GB")
    logs.sched(f"Load weight begin. avail mem={profile.gpu_mem_gb - 1.37:.2f} GB")
    n = profile.shards
    marks = sorted({0, *(round(n * k / 8) for k in range(1, 9))})
    step = total * 0.6 / max(len(marks) - 1, 1)
    for i, done in enumerate(marks):
        if i:
            await asyncio.sleep(step)
        elapsed = step * i
        logs.raw(
            f"Loading safetensors checkpoint shards: {100 * done // n:3d}% Completed | "
            f"{done}/{n} [{_mmss(elapsed)}<{_mmss(step * (len(marks) - 1) - elapsed)}, "
            f"{(done / elapsed if elapsed else 0):.2f}it/s]"
        )
        if crash and done >= n // 2:
            logs.traceback(
                (
                    (
                        "sglang/srt/model_executor/model_runner.py, in load_model",
                        "self.model = get_model(",
                    ),
                    (
                        "torch/distributed/distributed_c10d.py, in all_reduce",
                        "work = group.allreduce([tensor], opts)",
                    ),
                ),
                "torch.distributed.DistBackendError",
                "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled "
                "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
            )
            logs.info("Received sigquit from a child process. It usually means the child failed.")
            raise _Died
    avail = profile.gpu_mem_gb - 1.37 - profile.weights_gb
    logs.sched(
        f"Load weight end. type={profile.architecture}, dtype=torch.bfloat16, "
        f"avail mem={avail:.2f} GB, mem usage={profile.weights_gb:.2f} GB."
    )
    await asyncio.sleep(total * 0.15)


def _mmss(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 60:02d}:{s % 60:02d}"


def _die(refusal: model.Refusal) -> NoReturn:
    logs.traceback(refusal.frames, refusal.exception, refusal.message)
    logs.info("Received sigquit from a child process. It usually means the child failed.")
    raise _Died


async def _warmup(sim: SimServer) -> None:
    """SGLang's warmup: one short generation through the real scheduler path."""
    sink = api.CollectSink()
    params = api.GenParams(7, 8, 0.0, True, False)
    r = api.make_request(sim.scheduler, params, sink, client=False)
    sim.scheduler.submit(r)
    await sink.done
    port = sim.rng.randrange(32768, 61000)
    logs.info(f'INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" 200 OK')


def _server_args_line(args: SimArgs, profile: Profile) -> str:
    la = args.launch
    fields = {
        "model_path": args.model_path or profile.model_path,
        "host": args.host,
        "port": args.port,
        "mem_fraction_static": la.mem_fraction_static,
        "max_running_requests": la.max_running_requests,
        "tp_size": profile.tp,
        "speculative_algorithm": la.speculative_algorithm,
        "speculative_num_steps": la.speculative_num_steps,
        "speculative_eagle_topk": la.speculative_eagle_topk,
        "speculative_num_draft_tokens": la.speculative_num_draft_tokens,
        "cuda_graph_max_bs": la.cuda_graph_max_bs,
        "enable_metrics": args.enable_metrics,
        # SGLang 0.5.23 logs every server arg, its API key in plain text (engine.py,
        # _server_args_for_logging masks only the watermark's).
        "api_key": args.api_key,
    }
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"


def run(args: SimArgs) -> int:
    try:
        return asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 0
