"""Sample efficiency of autotune's own study code on the simulator's model.

The entry point is experiments/sample_efficiency.py; docs/sample-efficiency.md explains the results.
"""
