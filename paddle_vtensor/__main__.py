"""``python -m paddle_vtensor demo|bench``."""
import sys

from .cli import main

sys.exit(main())
