"""A systemd unit that starts the simulated SGLang server, for tests and experiments."""

from __future__ import annotations

import sys


def sim_unit(port: int, flags: str = "", sim_flags: str = "--sim-load-time 0.2") -> str:
    """A systemd unit whose ExecStart is the simulator, launched like sglang.launch_server."""
    return f"""[Unit]
Description=simulated SGLang for a test

[Service]
Type=simple
Environment=PYTHONUNBUFFERED=1
ExecStart={sys.executable} -m autotune.sim \\
    --model-path Qwen/Qwen3.5-122B-A10B \\
    --host 127.0.0.1 --port {port} \\
    --speculative-algorithm EAGLE {flags} \\
    {sim_flags}
Restart=no

[Install]
WantedBy=multi-user.target
"""
