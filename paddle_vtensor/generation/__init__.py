"""Generation strategies over slot caches, above the API (they import it; nothing in the API imports
them): ``inflight.generate_inflight`` (continuous batching), ``speculative.speculative_generate``
with its accept op ``speculative_accept``, ``model_runner.SlotModelRunner`` (a PaddleNLP model over a
model-wide slot cache) and ``distributed`` (sequence-parallel decode). ``paddle_vtensor`` exposes
``generate_inflight``, ``speculative_generate``, ``SlotModelRunner`` and ``distributed`` lazily."""
