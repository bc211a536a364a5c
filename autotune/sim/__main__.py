from autotune.sim.cli import main

raise SystemExit(main())
