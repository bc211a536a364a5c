"""The real servers the suite and the experiments run on this machine (no GPU): not engine
adapters (those are `engines/`), but what puts them here and starts them.

    python -m autotune.testservers.llamacpp     # make llamacpp-install: binary and model paths
    python -m autotune.testservers.vllm         # make vllm-install: vLLM's Python, tiny model
    sshd.SshServer(tmp)                         # a real OpenSSH sshd on 127.0.0.1
    postgres.PostgresServer(...)                # initdb + pg_ctl as the postgres user
    sim_unit.sim_unit(port)                     # a systemd unit that starts the simulator
    ports.free_port()                           # a loopback port nothing listens on

The installers print the paths they installed, or one line saying what is missing, and
exit 2. Tests and experiments share these; neither imports the other.
"""
