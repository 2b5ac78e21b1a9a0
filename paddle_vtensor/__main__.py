"""``python -m paddle_vtensor demo|bench``."""
import sys

from .tools.cli import main

sys.exit(main())
