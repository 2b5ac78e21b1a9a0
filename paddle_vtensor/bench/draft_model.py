"""A draft llama built from a target llama's own weights (no pretrained pair can be downloaded here):
the first `layers` decoder layers of the target (with its embeddings, final norm and lm_head), each
weight optionally perturbed by Gaussian noise of `noise` times that weight's standard deviation.
Fewer layers make it cheaper; noise lowers its agreement with the target."""
from __future__ import annotations

import copy

import numpy as np
import paddle


def draft_from_target(target, layers: int | None = None, noise: float = 0.0, seed: int = 0):
    """A LlamaForCausalLM in eval mode on the target's device, sharing nothing with the target."""
    from paddlenlp.transformers import LlamaForCausalLM

    total = int(target.config.num_hidden_layers)
    layers = total if layers is None else int(layers)
    if not 1 <= layers <= total:
        raise ValueError(f"draft_from_target: layers must be in [1, {total}], got {layers}")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = layers
    draft = LlamaForCausalLM(config)
    draft.eval()
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in target.state_dict().items():
        if ".layers." in name and int(name.split(".layers.")[1].split(".")[0]) >= layers:
            continue
        w = value.astype("float32").numpy()
        if noise > 0:
            w = w + rng.standard_normal(w.shape).astype("float32") * float(noise) * (float(w.std()) or 1.0)
        state[name] = paddle.to_tensor(w).astype(value.dtype)
    missing, unexpected = draft.set_state_dict(state) or ([], [])
    if missing or unexpected:
        raise RuntimeError(f"draft_from_target: weights did not match (missing {missing}, unexpected {unexpected})")
    return draft


def scale_deep_layers(target, first: int, scale: float) -> None:
    """In place: multiply the residual-branch outputs (o_proj, down_proj) of layers >= `first` by
    `scale`, so those layers refine rather than rewrite the residual stream. Trained llamas behave so
    (what early-exit / layer-skipping drafts rely on); a random-weight llama does not, and a draft made
    of its first layers would then almost never agree with it. Benchmarks say when they use this."""
    for i, layer in enumerate(target.llama.layers):
        if i < first:
            continue
        for proj in (layer.self_attn.o_proj, layer.mlp.down_proj):
            proj.weight.set_value(proj.weight * float(scale))
