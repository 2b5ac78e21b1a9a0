"""Generation strategies over slot caches, above the API (they import it; nothing in the API imports
them): ``inflight.generate_inflight`` (continuous batching), ``speculative.speculative_generate``
with its accept op ``speculative_accept`` and its adaptive k (``speculation_policy``), ``model_runner.SlotModelRunner`` (a PaddleNLP model over a
model-wide slot cache), ``sampling.parallel_sample`` and ``beam_search.beam_search`` (slots forked by
``slot_fork`` instead of copied caches) and ``distributed`` (sequence-parallel decode; its packed
collective in ``sp_exchange``, the micro-batch overlap in ``sp_overlap``). ``paddle_vtensor`` exposes
``generate_inflight``, ``speculative_generate`` (``AdaptiveSpeculation``, ``StepCosts``), ``parallel_sample``, ``beam_search``,
``SlotModelRunner`` and ``distributed`` lazily."""
