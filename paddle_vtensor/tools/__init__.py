"""Demo, benchmark and command-line machinery (``python -m paddle_vtensor <command>``); not the library."""
