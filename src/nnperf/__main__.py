"""`python -m nnperf` is the same as the `nnperf` command."""

from nnperf.cli import main

raise SystemExit(main())
