"""``python -m paddle_vtensor <command>``: demo, bench, bench-attention, bench-host, bench-inflight,
bench-prefix, bench-speculative, sp-decode, doctor (paddle_vtensor/bench/cli.py; ``--help`` on each says what it measures)."""
import sys

from .bench.cli import main

sys.exit(main())
