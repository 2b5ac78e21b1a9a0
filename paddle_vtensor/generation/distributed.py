"""Sequence-parallel decode attention: each rank of a ``paddle.distributed`` group holds a part of
every sequence's KV cache in its own VTensors.

Every rank runs the same model on the same tokens (the query is shared); a new token's K/V is
appended on ONE rank only, the one holding the fewest tokens, so the parts stay balanced and each
rank's cache grows in place in its own memory. Each rank attends the query over its part
(``decode_attention(..., return_lse=True)``), the partial ``(out, lse)`` pairs are all-gathered and
merged exactly (``merge_attention_states``). Per step and layer: two all-gathers of ``B*Tq*Hq*(D+1)``
numbers plus one of a small shape signature; the cache itself never moves.

    sp = SequenceParallelKVCache(num_layers, group=None, max_seq_len=8192)
    sp.begin_step(n_new)                      # the same call on every rank
    out = sp.attention(layer, q, k_new, v_new)   # per layer: q [B, Tq, Hq, D], k/v_new [B, n_new, Hkv, D]
    sp.end_step()

The assignment is computed from the token counts, which every rank tracks identically, so it needs no
communication. Before anything is appended, the ranks exchange the call's shapes: a rank count that
does not match the group, or ranks that disagree on shapes, dtype or the step, raise the same
``ValueError`` on every rank with every cache unchanged (no rank waits forever on the others).

CPU groups use Paddle's gloo backend (``python -m paddle.distributed.launch --nproc_per_node N``);
GPU groups NCCL.
"""
from __future__ import annotations

import math

import numpy as np
import paddle
import paddle.distributed as dist

from .. import api
from ..attention import decode_attention
from ..merge import MAX_PARTS, merge_attention_states

_DTYPE_CODES = {paddle.float32: 1, paddle.float16: 2, paddle.bfloat16: 3}
_SIG = ("call", "layer", "batch", "q_len", "q_heads", "head_dim", "n_new", "kv_heads", "dtype", "step")


def balanced_split(tokens: np.ndarray, n_new: int) -> np.ndarray:
    """How many of ``n_new`` new tokens each rank receives: each token in turn goes to the rank
    holding the fewest (ties: the lowest rank). Returns int64 counts per rank."""
    tokens = np.asarray(tokens, dtype=np.int64).copy()
    counts = np.zeros_like(tokens)
    for _ in range(int(n_new)):
        r = int(np.argmin(tokens))  # argmin returns the first minimum: the lowest rank on a tie
        tokens[r] += 1
        counts[r] += 1
    return counts


class SequenceParallelKVCache:
    """This rank's part of a model's KV caches (one K and one V VTensor per layer) and the plan of
    which rank stores which token. See the module docstring for the protocol."""

    def __init__(self, num_layers: int, group=None, world_size: int | None = None,
                 max_seq_len: int | None = None, chunk_bytes: int | None = None, scale: float | None = None):
        """num_layers: layers whose caches this object holds. group: a ``paddle.distributed`` group
        (None: the global group, after ``init_parallel_env``). world_size: the rank count the caller
        expects; a mismatch with the group raises ``ValueError``. max_seq_len / chunk_bytes: this
        rank's reservation per cache (tokens) and mapping unit, as ``paddle_vtensor.append``.
        scale: attention scale, default ``1 / sqrt(head_dim)``."""
        if int(num_layers) <= 0:
            raise ValueError(f"SequenceParallelKVCache: num_layers must be positive, got {num_layers}")
        self.group = group
        self.world = dist.get_world_size(group) if group is not None else dist.get_world_size()
        self.rank = group.rank if group is not None else dist.get_rank()
        if world_size is not None and int(world_size) != self.world:
            raise ValueError(f"SequenceParallelKVCache: world_size={world_size} but the group has {self.world} ranks")
        if self.rank < 0:
            raise ValueError("SequenceParallelKVCache: this process is not a member of the group")
        if self.world > MAX_PARTS:
            raise ValueError(f"SequenceParallelKVCache: at most {MAX_PARTS} ranks (one merge), got {self.world}")
        self.num_layers = int(num_layers)
        self.max_seq_len, self.chunk_bytes, self.scale = max_seq_len, chunk_bytes, scale
        self.k: list[paddle.Tensor | None] = [None] * self.num_layers
        self.v: list[paddle.Tensor | None] = [None] * self.num_layers
        self.tokens = np.zeros(self.world, dtype=np.int64)  # tokens each rank holds, same on every rank
        self.length = 0  # tokens of the whole sequence
        self.steps = 0
        self._calls = 0
        self._plan: np.ndarray | None = None  # this step's new tokens per rank

    # ---- the step protocol

    def begin_step(self, n_new: int) -> tuple[int, int]:
        """Plan where the step's ``n_new`` tokens go; every rank must make the same call. Returns
        this rank's share as ``(first, count)`` (indices into the step's new tokens)."""
        if self._plan is not None:
            raise RuntimeError("SequenceParallelKVCache.begin_step: the previous step was not ended (end_step)")
        if int(n_new) <= 0:
            raise ValueError(f"SequenceParallelKVCache.begin_step: n_new must be positive, got {n_new}")
        self._plan = balanced_split(self.tokens, int(n_new))
        self._done = [False] * self.num_layers
        first = int(self._plan[: self.rank].sum())
        return first, int(self._plan[self.rank])

    def end_step(self) -> None:
        """Every layer has attended: the planned tokens now belong to their ranks."""
        if self._plan is None:
            raise RuntimeError("SequenceParallelKVCache.end_step: no step begun")
        if not all(self._done):
            missing = [i for i, d in enumerate(self._done) if not d]
            raise RuntimeError(f"SequenceParallelKVCache.end_step: layers {missing} did not attend this step")
        self.tokens += self._plan
        self.length += int(self._plan.sum())
        self.steps += 1
        self._plan = None

    def attention(self, layer: int, q: paddle.Tensor, k_new: paddle.Tensor, v_new: paddle.Tensor) -> paddle.Tensor:
        """Attention of ``q [B, Tq, Hq, D]`` (the step's last Tq tokens, causal) over the whole
        sequence: this rank appends its share of ``k_new``/``v_new [B, n_new, Hkv, D]`` to its layer
        caches, attends over its part, and the parts are gathered and merged. Returns
        ``[B, Tq, Hq, D]`` in q's dtype, the same on every rank."""
        if self._plan is None:
            raise RuntimeError("SequenceParallelKVCache.attention: call begin_step first")
        n_new = int(self._plan.sum())
        local_error = self._check_local(layer, q, k_new, v_new, n_new)
        self._agree(layer, q, k_new, n_new, local_error)  # raises on every rank alike; nothing changed yet
        first = int(self._plan[: self.rank].sum())
        mine = int(self._plan[self.rank])
        if mine:
            self._append(layer, k_new[:, first:first + mine], v_new[:, first:first + mine])
        out, lse = self._partial(layer, q, n_new, first, mine)
        outs, lses = self._all_gather(out), self._all_gather(lse)
        self._done[layer] = True
        return merge_attention_states(outs, lses)[0]

    # ---- reports

    def stats(self) -> dict:
        """This rank's tokens and mapped bytes (its VTensors' memory on its device), and every rank's
        token count (the plan every rank tracks)."""
        place = "cpu"
        for t in self.k:
            if t is not None:
                place = "cpu" if t.place.is_cpu_place() else f"gpu:{t.place.gpu_device_id()}"
                break
        return {"rank": self.rank, "world": self.world, "length": self.length, "steps": self.steps,
                "tokens_per_rank": self.tokens.tolist(), "tokens": int(self.tokens[self.rank]),
                "mapped_bytes": int(api.memory_stats(place)["mapped_bytes"])}

    # ---- internals

    def _check_local(self, layer, q, k_new, v_new, n_new) -> str:
        """This rank's own view of the call: '' when fine, else why not (raised after the exchange)."""
        if not isinstance(layer, int) or not 0 <= layer < self.num_layers:
            return f"layer must be an int in [0, {self.num_layers}), got {layer!r}"
        if self._done[layer]:
            return f"layer {layer} already attended this step"
        for name, x in (("q", q), ("k_new", k_new), ("v_new", v_new)):
            if not isinstance(x, paddle.Tensor) or x.ndim != 4:
                return f"{name} must be a rank-4 paddle.Tensor"
        if q.dtype not in _DTYPE_CODES or k_new.dtype != q.dtype or v_new.dtype != q.dtype:
            return f"q, k_new and v_new must share one float dtype, got {q.dtype}, {k_new.dtype}, {v_new.dtype}"
        if list(k_new.shape) != list(v_new.shape):
            return f"k_new has shape {list(k_new.shape)} but v_new {list(v_new.shape)}"
        b, tq, hq, d = q.shape
        if k_new.shape[0] != b or k_new.shape[3] != d or hq % k_new.shape[2] != 0:
            return (f"k_new {list(k_new.shape)} does not fit q {list(q.shape)} ([batch, tokens, kv_heads, head_dim] "
                    "with q_heads a multiple of kv_heads)")
        if k_new.shape[1] != n_new:
            return f"k_new holds {k_new.shape[1]} tokens but begin_step planned {n_new}"
        if tq > n_new:
            return f"q has {tq} tokens but the step adds only {n_new} (queries are the step's last tokens)"
        if self.k[layer] is not None:
            have = self.k[layer].shape
            if have[0] != b or have[2] != k_new.shape[2] or have[3] != d or self.k[layer].dtype != q.dtype:
                return (f"layer {layer}'s cache on this rank is [{have[0]}, *, {have[2]}, {have[3]}] "
                        f"{self.k[layer].dtype}; the new tokens are {list(k_new.shape)} {k_new.dtype}")
        return ""

    def _agree(self, layer, q, k_new, n_new, local_error: str) -> None:
        self._calls += 1
        ok = not local_error
        sig = [self._calls, layer if isinstance(layer, int) else -1]
        sig += [int(x) for x in q.shape] if ok else [-1] * 4
        sig += [n_new, int(k_new.shape[2]) if ok else -1, _DTYPE_CODES.get(q.dtype, 0) if ok else -1, self.steps]
        sig.append(0 if ok else 1)
        rows = np.stack([g.numpy() for g in self._all_gather(paddle.to_tensor(sig, dtype="int64"))])
        failed = [r for r in range(self.world) if rows[r, -1]]
        if local_error:
            raise ValueError(f"SequenceParallelKVCache.attention (rank {self.rank}): {local_error}; no cache changed")
        if failed:
            raise ValueError(f"SequenceParallelKVCache.attention: rank(s) {failed} refused the call; no cache changed")
        differ = [(name, rows[:, i].tolist()) for i, name in enumerate(_SIG) if len(set(rows[:, i].tolist())) > 1]
        if differ:
            what = ", ".join(f"{name} per rank {vals}" for name, vals in differ)
            raise ValueError(f"SequenceParallelKVCache.attention: the ranks disagree: {what}; no cache changed")

    def _all_gather(self, x: paddle.Tensor) -> list[paddle.Tensor]:
        if self.world == 1:  # a one-rank group (init_parallel_env makes none for one process)
            return [x]
        out = []
        dist.all_gather(out, x, group=self.group)
        return out

    def _append(self, layer, k, v) -> None:
        kw = {"max_seq_len": self.max_seq_len, "chunk_bytes": self.chunk_bytes}
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = api.from_dense(k, **kw), api.from_dense(v, **kw)
            return
        new_k = api.append(self.k[layer], k, **kw)
        try:
            new_v = api.append(self.v[layer], v, **kw)
        except Exception:
            # K grew but V could not: keep the old K view (the longer one dies with new_k), so the
            # layer's caches stay as they were.
            del new_k
            raise
        self.k[layer], self.v[layer] = new_k, new_v

    def _partial(self, layer, q, n_new, first, mine):
        """This rank's (out, lse) over its part; zeros and -inf for an empty part."""
        b, tq, hq, d = q.shape
        k, v = self.k[layer], self.v[layer]
        if k is None:
            return paddle.zeros(q.shape, q.dtype), paddle.full([b, tq, hq], -math.inf, "float32")
        mask = None
        if tq > 1:
            # Query t is the step's token n_new - tq + t; this rank's new keys are the step's tokens
            # first .. first + mine - 1, after all its older keys (which every query sees).
            s_len, old = k.shape[1], k.shape[1] - mine
            t_pos = n_new - tq + np.arange(tq)[:, None]
            key_pos = np.concatenate([np.full(old, -1), first + np.arange(mine)])[None, :]
            mask = paddle.to_tensor((key_pos <= t_pos).reshape(1, 1, tq, s_len))
            if s_len < tq:
                # The host kernel refuses fewer keys than queries even with a mask: attend in query
                # chunks of at most s_len rows (prefill steps only; a chunk's rows are independent).
                parts = [decode_attention(q[:, c:c + s_len], k, v, mask[:, :, c:c + s_len], scale=self.scale,
                                          return_lse=True) for c in range(0, tq, s_len)]
                return (paddle.concat([o for o, _ in parts], axis=1), paddle.concat([l for _, l in parts], axis=1))
        # Tq = 1: the query is the step's last token and sees every key here (the causal default).
        return decode_attention(q, k, v, mask, scale=self.scale, return_lse=True)


__all__ = ["SequenceParallelKVCache", "balanced_split"]
