"""Installers of the real servers the suite runs on this machine (no GPU): not engine
adapters (those are `engines/`), but what puts a llama-server and a CPU vLLM here.

    python -m autotune.testservers.llamacpp     # make llamacpp-install: binary and model paths
    python -m autotune.testservers.vllm         # make vllm-install: vLLM's Python, tiny model

Each prints the paths it installed, or one line saying what is missing, and exits 2.
"""
