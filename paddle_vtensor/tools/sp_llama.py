"""A PaddleNLP llama decoding with its KV cache split across ranks (sequence parallelism).

The model's own modules and weights run unchanged (embeddings, RMSNorms, q/k/v/o projections, rotary,
MLP, lm_head); only the attention is replaced by ``SequenceParallelKVCache.attention``, which keeps
this rank's part of every layer's cache and merges the ranks' partial attention. Every rank runs the
same tokens. Why not ``LlamaAttention.forward``: it concatenates the cache and calls the attention on
the whole of it, and its rotary table is cut at the new tokens' count when no cache is passed in, so
a step whose cache lives elsewhere needs the layer written out: the 15 lines of ``forward`` below.
"""
from __future__ import annotations

import paddle

from ..distributed import SequenceParallelKVCache


def check_supported(model) -> None:
    """The llama configurations the layer loop below reproduces exactly."""
    from ..integration import UnsupportedModelError

    cfg = model.config
    if type(model).__name__ != "LlamaForCausalLM":
        raise UnsupportedModelError(f"sequence-parallel decode runs PaddleNLP's LlamaForCausalLM, got {type(model).__name__}")
    for flag in ("fuse_attention_qkv", "use_fused_rope", "use_long_sequence_strategies", "sequence_parallel",
                 "alibi"):
        if getattr(cfg, flag, False):
            raise UnsupportedModelError(f"sequence-parallel decode: llama with {flag}=True is not supported")
    if not getattr(cfg, "rope", True) or getattr(cfg, "tensor_parallel_degree", 1) > 1:
        raise UnsupportedModelError("sequence-parallel decode: llama needs rope and no tensor parallelism")


@paddle.no_grad()
def forward(model, sp: SequenceParallelKVCache, input_ids: paddle.Tensor, start: int) -> paddle.Tensor:
    """Runs ``input_ids [B, T]`` at positions ``start .. start+T-1`` (the tokens before live in the
    ranks' caches), appends their K/V to the caches (on the ranks the plan picks) and returns the
    last position's logits ``[B, vocab]`` float32."""
    from paddlenlp.transformers.llama.modeling import apply_rotary_pos_emb

    llama = model.llama
    b, t = input_ids.shape
    positions = paddle.arange(start, start + t, dtype="int64").expand([b, t])
    x = llama.embed_tokens(input_ids)
    sp.begin_step(t)
    for i, layer in enumerate(llama.layers):
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        q = attn.q_proj(h).reshape([b, t, attn.num_heads, attn.head_dim])
        k = attn.k_proj(h).reshape([b, t, attn.num_key_value_heads, attn.head_dim])
        v = attn.v_proj(h).reshape([b, t, attn.num_key_value_heads, attn.head_dim])
        cos, sin = attn.rotary_emb(v, seq_len=start + t)
        q, k = apply_rotary_pos_emb(q, k, cos, sin, positions)
        o = sp.attention(i, q, k, v)
        x = x + attn.o_proj(o.reshape([b, t, attn.num_heads * attn.head_dim]))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    sp.end_step()
    return model.lm_head(llama.norm(x[:, -1:]))[:, -1].astype("float32")


@paddle.no_grad()
def greedy(model, sp: SequenceParallelKVCache, prompt: paddle.Tensor, new_tokens: int, on_step=None) -> paddle.Tensor:
    """Greedy decoding of ``new_tokens`` after ``prompt [B, S]`` (prefill through the ranks, then one
    token per step). Returns the new token ids ``[B, new_tokens]`` int64, the same on every rank.
    ``on_step(i)`` is called after each generated token (timing)."""
    check_supported(model)
    ids = []
    logits = forward(model, sp, prompt, 0)
    pos = prompt.shape[1]
    for i in range(new_tokens):
        token = paddle.argmax(logits, axis=-1, keepdim=True).astype("int64")  # [B, 1]
        ids.append(token)
        if on_step is not None:
            on_step(i)
        if i + 1 < new_tokens:
            logits = forward(model, sp, token, pos)
            pos += 1
    return paddle.concat(ids, axis=1)


__all__ = ["check_supported", "forward", "greedy"]
