"""SlotModelRunner: an unmodified PaddleNLP causal LM run over the packed new tokens of many
sequences, each in its own slot of a model-wide slot cache (docs/SLOT_CACHE.md, RUNNER_API.md).

The runner calls the model's own modules (embedding, norms, projections, rotary tables and
``apply_rotary_pos_emb``, MLP, lm_head) on a ``[1, total_tokens, hidden]`` batch of packed tokens;
only attention is replaced, by :func:`paddle_vtensor.attention_with_kvcache` on the slot cache, so no
padding is computed. What it reproduces of PaddleNLP 2.8.1 exactly:

* llama: rotary position of a token = its index in its sequence (``generate()`` without padding
  passes ``arange``, then the last position + 1); scale ``1/sqrt(head_dim)``; causal attention.
* qwen: ``generate()`` passes no ``position_ids``, and ``QWenAttention`` then applies the rotary
  table from position 0 for the tokens of each forward call (``cos[:, :q_len]``), so a decoded
  token is rotated as position 0. The runner reproduces this (``rope_positions="per_call"``) so
  its ids equal qwen's own ``generate()``; pass ``positions`` to forward() to choose others.
  ``use_logn_attn`` scales queries by ``logn_tensor`` at their true positions, as qwen does.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

import numpy as np
import paddle

from ..api import _int
from ..errors import SlotError, UnsupportedModelError
from ..slots import (attention_with_kvcache, release_slot, reserve_slot, slot_kv_cache)


@dataclasses.dataclass
class AttentionContext:
    """What an attention callable gets besides q/k/v: everything to attend on the slot cache."""

    runner: "SlotModelRunner"
    cache_seqlens: paddle.Tensor   # int32 [num_slots], lengths before this step
    cu_seqlens_q: paddle.Tensor    # int32 [n + 1]
    slot_ids: paddle.Tensor        # int32 [n]
    max_seqlen_q: int
    max_seqlen_k: int


class _Llama:
    name = "llama"

    def __init__(self, model):
        cfg = model.config
        self.model, self.cfg = model, cfg
        self.body = model.llama
        self.layers = list(self.body.layers)
        attn = self.layers[0].self_attn
        self.num_heads, self.num_kv_heads, self.head_dim = attn.num_heads, attn.num_key_value_heads, attn.head_dim
        for name, bad in (("tensor_parallel_degree", getattr(cfg, "tensor_parallel_degree", 1) > 1),
                          ("sequence_parallel", bool(getattr(cfg, "sequence_parallel", False))),
                          ("alibi", bool(getattr(cfg, "alibi", False))),
                          ("use_long_sequence_strategies", bool(getattr(cfg, "use_long_sequence_strategies", False))),
                          ("rope_scaling_type=dynamic_ntk", getattr(cfg, "rope_scaling_type", None) == "dynamic_ntk")):
            if bad:
                raise UnsupportedModelError(f"SlotModelRunner: llama with {name} is not supported")
        self.modeling = importlib.import_module(type(attn).__module__)
        self.rope = bool(getattr(cfg, "rope", True))

    def embed(self, ids):
        return self.body.embed_tokens(ids)

    def vocab_size(self):
        return int(self.body.embed_tokens.weight.shape[0])

    def qkv(self, layer, h):
        attn = self.layers[layer].self_attn
        if attn.fuse_attention_qkv:
            mix = attn.qkv_proj(h).reshape([0, 0, self.num_kv_heads, (attn.num_key_value_groups + 2) * self.head_dim])
            q, k, v = paddle.split(mix, [attn.num_key_value_groups * self.head_dim, self.head_dim, self.head_dim], axis=-1)
            q = q.reshape([0, 0, self.num_heads, self.head_dim])
        else:
            q = attn.q_proj(h).reshape([0, 0, self.num_heads, self.head_dim])
            k = attn.k_proj(h).reshape([0, 0, self.num_kv_heads, self.head_dim])
            v = attn.v_proj(h).reshape([0, 0, self.num_kv_heads, self.head_dim])
        if self.rope:
            cos, sin = attn.rotary_emb(v, seq_len=attn.rotary_emb.max_seq_len_cached)
            q, k = self.modeling.apply_rotary_pos_emb(q, k, cos, sin, self.positions[None])
        return q, k, v

    def layer(self, i, h, attend):
        lay = self.layers[i]
        residual = h
        q, k, v = self.qkv(i, lay.input_layernorm(h))
        o = attend(i, q, k, v)
        h = residual + lay.self_attn.o_proj(o.reshape([1, o.shape[0], -1]))
        return h + lay.mlp(lay.post_attention_layernorm(h))

    def head(self, h):
        return self.model.lm_head(self.body.norm(h))

    def max_positions(self):
        return int(self.layers[0].self_attn.rotary_emb.max_seq_len_cached) if self.rope else None


class _QWen:
    name = "qwen"

    def __init__(self, model):
        cfg = model.config
        self.model, self.cfg = model, cfg
        self.body = model.qwen
        self.layers = list(self.body.h)
        attn = self.layers[0].attn
        self.num_heads = self.num_kv_heads = attn.num_heads
        self.head_dim = attn.head_dim
        if getattr(cfg, "tensor_parallel_degree", 1) > 1:
            raise UnsupportedModelError("SlotModelRunner: tensor parallel qwen is not supported")
        if getattr(cfg, "use_long_sequence_strategies", False) or attn.rotary_ndims is not None:
            raise UnsupportedModelError("SlotModelRunner: qwen with long-sequence strategies or partial rotary is not supported")
        self.modeling = importlib.import_module(type(attn).__module__)

    def embed(self, ids):
        return self.body.drop(self.body.wte(ids))

    def vocab_size(self):
        return int(self.body.wte.weight.shape[0])

    def qkv(self, layer, h):
        attn = self.layers[layer].attn
        q, k, v = paddle.split(attn.c_attn(h), 3, axis=-1)
        q, k, v = (x.reshape([0, 0, self.num_heads, self.head_dim]) for x in (q, k, v))
        cos, sin = attn.rotary_emb(v, self.rope_len, ntk_alpha=1.0)
        q, k = self.modeling.apply_rotary_pos_emb(q, k, cos, sin, position_ids=self.positions[None])
        if attn.use_logn_attn:
            logn = attn.logn_tensor.astype(q.dtype) if attn.logn_tensor.dtype != q.dtype else attn.logn_tensor
            q = q * paddle.gather(logn[0, :, 0, 0], self.true_positions).reshape([1, -1, 1, 1])
        return q, k, v

    def layer(self, i, h, attend):
        lay = self.layers[i]
        q, k, v = self.qkv(i, lay.ln_1(h))
        o = attend(i, q, k, v)
        h = h + lay.attn.c_proj(o.reshape([1, o.shape[0], -1]))
        return h + lay.mlp(lay.ln_2(h))

    def head(self, h):
        return self.model.lm_head(self.body.ln_f(h))

    def max_positions(self):
        return None


def _family(model):
    try:
        from paddlenlp.transformers import LlamaForCausalLM, QWenForCausalLM
    except ImportError as e:  # pragma: no cover - paddlenlp is a requirement of the runner
        raise UnsupportedModelError(f"SlotModelRunner needs paddlenlp: {e}") from None
    if isinstance(model, LlamaForCausalLM):
        return _Llama(model)
    if isinstance(model, QWenForCausalLM):
        return _QWen(model)
    raise UnsupportedModelError(f"SlotModelRunner supports PaddleNLP LlamaForCausalLM and QWenForCausalLM, got {type(model).__name__}")


def _int32_tensor(x, place, name) -> tuple[paddle.Tensor, np.ndarray | None]:
    """(tensor on place, host copy when the caller gave host data: lists, numpy, CPU tensors)."""
    if isinstance(x, paddle.Tensor):
        if x.dtype != paddle.int32:
            raise SlotError(f"SlotModelRunner.forward: {name} must be int32, got {x.dtype}")
        host = x.numpy() if "cpu" in str(x.place).lower() else None
        return (x if str(x.place) == str(place) else x.to(place)), host
    arr = np.asarray(x, dtype=np.int64)
    return paddle.to_tensor(arr.astype(np.int32), place=place), arr


def _as(x: paddle.Tensor, dtype: str, place) -> paddle.Tensor:
    """x as dtype on place, without a cast or copy where it already is (each is an op; and Tensor.to
    resets Python's warning registry, so a once-per-place warning of PaddleNLP's fires again)."""
    if x.dtype != getattr(paddle, dtype):
        x = x.astype(dtype)
    return x if str(x.place) == str(place) else x.to(place)


def check_token_ids(ids, vocab_size: int, fn: str) -> np.ndarray:
    """``ids`` (host token ids, any integer array or list) as int64, each checked against the
    vocabulary [0, vocab_size) before any cast: an id past it would index past the embedding table.
    TypeError for a float or bool id, ValueError for an id outside the vocabulary."""
    arr = np.asarray(ids)
    if arr.size and (arr.dtype == object or arr.dtype.kind not in "iu"):
        arr = np.array([_int(fn, "a token id", v) for v in arr.reshape(-1)], dtype=object).reshape(arr.shape)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= vocab_size):
        bad = int(arr.max()) if int(arr.max()) >= vocab_size else int(arr.min())
        raise ValueError(f"{fn}: token id {bad} is outside the vocabulary [0, {vocab_size})")
    return arr.astype(np.int64)


class SlotModelRunner:
    """See RUNNER_API.md. ``attention(layer, q [total, Hq, D], k_new, v_new, ctx) -> [total, Hq, D]``
    replaces the per-layer attention (default: attention_with_kvcache on this runner's cache)."""

    def __init__(self, model, num_slots: int, max_seq_len: int, attention: Callable | None = None,
                 chunk_bytes: int | None = None, cache_dtype=None):
        self.family = _family(model)
        self.model = model
        limit = self.family.max_positions()
        num_slots = _int("SlotModelRunner", "num_slots", num_slots, 1, (1 << 31) - 1, ValueError)
        max_seq_len = _int("SlotModelRunner", "max_seq_len", max_seq_len, 1, (1 << 31) - 1, ValueError)
        if limit is not None and max_seq_len > limit:
            raise ValueError(f"SlotModelRunner: max_seq_len {max_seq_len} is past the model's rotary table ({limit} positions)")
        weight = next(iter(model.parameters()))
        self.place = weight.place
        self.dtype = weight.dtype
        self.num_slots, self.max_seq_len = num_slots, max_seq_len
        self.vocab_size = self.family.vocab_size()
        self.cache = slot_kv_cache(len(self.family.layers), num_slots, max_seq_len, self.family.num_kv_heads,
                                   self.family.head_dim, dtype=self.dtype, place=self.place, chunk_bytes=chunk_bytes,
                                   cache_dtype=cache_dtype)  # 'int8': 8-bit (paddle_vtensor.quant)
        self.cache_seqlens = paddle.zeros([num_slots], dtype="int32").to(self.place)
        self.host_lens = np.zeros(num_slots, dtype=np.int64)
        self.attention = attention or self._default_attention

    # ---- host decisions ----
    def reserve(self, slot: int, tokens: int) -> None:
        reserve_slot(self.cache, slot, tokens)

    def release(self, slot: int) -> None:
        release_slot(self.cache, slot)
        self.host_lens[slot] = 0
        self.cache_seqlens = paddle.scatter(self.cache_seqlens, paddle.to_tensor([slot], dtype="int32", place=self.place),
                                            paddle.zeros([1], dtype="int32").to(self.place))

    def reset(self) -> None:
        """Release every slot and zero every length: the runner as it was made (a failed run leaves
        it so too, see generate_inflight). Idempotent."""
        for slot in range(self.num_slots):
            release_slot(self.cache, slot)
        self.host_lens[:] = 0
        self.cache_seqlens = paddle.zeros([self.num_slots], dtype="int32").to(self.place)

    def check_ids(self, ids, fn: str) -> np.ndarray:
        """``ids`` as int64, each checked against this model's vocabulary (check_token_ids)."""
        return check_token_ids(ids, self.vocab_size, fn)

    def advance(self, slot_ids, n_new) -> None:
        """cache_seqlens[slot_ids] += n_new on the device, and host_lens the same."""
        slots, slots_host = _int32_tensor(slot_ids, self.place, "slot_ids")
        add, add_host = _int32_tensor(n_new, self.place, "n_new")
        self.cache_seqlens = paddle.scatter(self.cache_seqlens, slots, paddle.gather(self.cache_seqlens, slots) + add)
        if slots_host is not None and add_host is not None:
            self.host_lens[slots_host] += add_host

    # ---- the forward ----
    def _default_attention(self, layer, q, k_new, v_new, ctx: AttentionContext):
        return attention_with_kvcache(q, self.cache.k(layer), self.cache.v(layer), ctx.cache_seqlens, k_new=k_new,
                                      v_new=v_new, cu_seqlens_q=ctx.cu_seqlens_q, slot_ids=ctx.slot_ids,
                                      max_seqlen_q=ctx.max_seqlen_q, max_seqlen_k=ctx.max_seqlen_k)

    @paddle.no_grad()
    def forward(self, input_ids, cu_seqlens_q, slot_ids, positions=None) -> paddle.Tensor:
        """Logits float32 [total, vocab] of the packed new tokens; see RUNNER_API.md."""
        fam = self.family
        # Host ids are checked against the vocabulary (a device tensor would cost a read: the caller's).
        ids = input_ids if isinstance(input_ids, paddle.Tensor) else paddle.to_tensor(
            self.check_ids(input_ids, "SlotModelRunner.forward"))
        ids = _as(ids, "int64", self.place).reshape([-1])
        total = ids.shape[0]
        cu, cu_host = _int32_tensor(cu_seqlens_q, self.place, "cu_seqlens_q")
        slots, slots_host = _int32_tensor(slot_ids, self.place, "slot_ids")
        # Token -> sequence and offset within its new tokens, computed where the lengths live; not when a
        # llama caller gives the positions (a speculative step's draft and verify: nine ops a forward).
        true_pos = offset = None
        if positions is None or fam.name == "qwen":
            row = paddle.arange(total, dtype="int64").to(self.place) if total else paddle.zeros([0], "int64")
            seq = paddle.searchsorted(cu[1:].astype("int64"), row, right=True)
            offset = row - paddle.gather(cu.astype("int64"), seq)
            true_pos = paddle.gather(paddle.gather(self.cache_seqlens, slots).astype("int64"), seq) + offset
        if positions is None:
            positions = offset if fam.name == "qwen" else true_pos
        else:
            positions = positions if isinstance(positions, paddle.Tensor) else paddle.to_tensor(np.asarray(positions, np.int64))
            positions = _as(positions, "int64", self.place)
        fam.positions = positions
        fam.true_positions = true_pos
        # Host-known bounds size the GPU launch (no device read): the runner's host mirror.
        if cu_host is not None:
            max_q = int(np.max(np.diff(cu_host))) if len(cu_host) > 1 else 0
        else:
            max_q = total
        max_k = int(self.host_lens[slots_host].max()) + max_q if slots_host is not None and len(slots_host) else self.max_seq_len
        if fam.name == "qwen":
            fam.rope_len = int(max(max_q, 1)) if positions is offset else self.max_seq_len
        ctx = AttentionContext(self, self.cache_seqlens, cu, slots, max_q, min(max_k, self.max_seq_len))
        h = fam.embed(ids[None])

        def attend(i, q, k, v):
            return self.attention(i, q[0], k[0], v[0], ctx)

        for i in range(len(fam.layers)):
            h = fam.layer(i, h, attend)
        logits = fam.head(h)[0]
        return logits if logits.dtype == paddle.float32 else logits.astype("float32")

    __call__ = forward


__all__ = ["AttentionContext", "SlotModelRunner", "check_token_ids"]
