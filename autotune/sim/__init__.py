"""A simulated SGLang server ("rehearsal mode") and the performance model behind it.

`python -m autotune.sim [SGLang flags] [--sim-* flags]` serves; `--predict`
prints the noise-free truth. See docs/rehearsal.md.
"""
