"""The command line (``python -m paddle_vtensor <command>``, cli.py), its benchmarks, measurement
code and demo models (tiny_llama.py, draft_model.py, sp_llama.py, sp_rank.py): not the library;
no library module imports this package (tests/test_layout.py)."""
