"""autotune: Bayesian tuning of speculative-decoding settings for LLM inference servers."""

__version__ = "0.1.0"
