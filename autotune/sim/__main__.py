import signal
import sys

# A stop while the modules still import (a second on a loaded host) is a clean exit, as
# it is for SGLang; the server's own handler replaces this one once it runs.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

from autotune.sim.cli import main  # noqa: E402

raise SystemExit(main())
