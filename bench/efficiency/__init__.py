"""Sample efficiency of autotune's study code on the simulator's model (see bench/sample_efficiency.py)."""
