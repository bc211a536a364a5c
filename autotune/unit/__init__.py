"""The systemd unit: what systemd will run, how autotune patches it, what reaches the server.

    argv = unitfile.parse_exec_start(text, source=path).argv   # ExecStart as systemd splits it
    patched = unitfile.patch_unit(text, {"--speculative-num-steps": "3"})
    env = unitenv.effective(patched)                           # Environment= as systemd merges it
    reach.check_environment_files(...)                         # flags / variables that never arrive
    secrets.remember_unit(text); secrets.text(log)             # its API key never stored

The rule that matters most: every question is "what will systemd run", answered by
systemd's own parsing rules (unitfile.py cites them), never by a regex over the text.
Nothing here knows about Optuna, engines or HTTP.
"""
