"""The project's experiments: scripts that measure autotune (efficiency tables, real-server
sweeps, overheads) and write what they measured under `results/`. Their own tests are in
`tests/` here; the suite under the top-level `tests/` never imports them."""
