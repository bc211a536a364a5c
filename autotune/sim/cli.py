"""`python -m autotune.sim` / `autotune sim`: serve, or print predictions with --predict."""

from __future__ import annotations

import sys

from autotune.sim import args as simargs
from autotune.sim import predict
from autotune.sim.profiles import get_profile


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parsed = simargs.parse(argv)
        if parsed.help:
            sys.stdout.write(simargs.USAGE % {"profile": simargs.SimOptions().profile})
            return 0
        profile = get_profile(parsed.sim.profile)
        if parsed.predict is not None:
            return predict.run(profile, parsed.launch, parsed.predict, sys.stdout)
    except simargs.ArgError as exc:
        # The prog SGLang's parser prints (sglang_facts.PARSER_PROG): one line, as it would.
        sys.stderr.write(f"sglang serve: error: {exc}\n")
        return 2
    from autotune.sim import server

    return server.run(parsed)
