"""Sequence-parallel decode attention: each rank of a ``paddle.distributed`` group holds a part of
every sequence's KV cache in its own VTensors.

Every rank runs the same model on the same tokens and computes Q, K and V for them itself (the
projections are replicated: nothing crosses before attention); a new token's K/V is appended on ONE
rank only, the one holding the fewest tokens, so the parts stay balanced and each rank's cache grows
in place in its own memory. Each rank attends the query over its part
(``decode_attention(..., return_lse=True)``); ONE all-gather per layer moves every rank's call
signature, lse and output packed in one byte buffer (``sp_exchange``), and every rank merges the
parts exactly (``merge_attention_states``). The cache itself never moves.

    sp = SequenceParallelKVCache(num_layers, group=None, max_seq_len=8192)
    sp.begin_step(n_new)                      # the same call on every rank
    out = sp.attention(layer, q, k_new, v_new)   # per layer: q [B, Tq, Hq, D], k/v_new [B, n_new, Hkv, D]
    sp.end_step()

``attention_start(...)`` returns a pending call whose ``wait()`` gives the output: the collective
runs while the caller does other work (another micro-batch's attention, an MLP; ``sp_overlap``).

Collectives per layer: one. Besides, a handshake (a buffer of the agreed decode size, or 48 bytes
before anything is agreed) on the object's first call and on the first layer of a step with more
than one new token: the buffer's size comes from values every rank already agreed on, so a rank
with other shapes can never send a buffer of another size. The assignment is computed from the
token counts, which every rank tracks identically, so it needs no communication.

Bad input: a rank count that does not match the group, ranks that disagree on shapes, dtype, layer
or step, or a call one rank refuses (its own checks, or its append failing) raise the same kind of
``ValueError`` on every rank, after the exchange, with every cache unchanged: the owner's append is
kept only when every rank accepted the call (a dropped append releases its memory).

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
from .sp_exchange import (DTYPE_CODES, HEADER_BYTES, HEADER_FIELDS, KIND_HANDSHAKE, KIND_PAYLOAD, Exchange, pack,
                          payload_bytes, unpack)


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
        self.exchange = Exchange(group, self.world)  # .calls / .bytes_sent: this object's collectives
        self._calls = 0
        self._plan: np.ndarray | None = None  # this step's new tokens per rank
        self._layout: tuple | None = None  # (batch, q_heads, kv_heads, head_dim, dtype), agreed by every rank
        self._step_agreed = False  # the ranks agreed on this step's token count (a handshake)
        self._pending: PendingAttention | None = None

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
        self._step_agreed = int(n_new) == 1  # a one-token step's buffer size is the agreed decode size
        first = int(self._plan[: self.rank].sum())
        return first, int(self._plan[self.rank])

    def end_step(self) -> None:
        """Every layer has attended: the planned tokens now belong to their ranks."""
        if self._plan is None:
            raise RuntimeError("SequenceParallelKVCache.end_step: no step begun")
        if self._pending is not None:
            raise RuntimeError(f"SequenceParallelKVCache.end_step: layer {self._pending.layer}'s attention was not waited for")
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
        return self.attention_start(layer, q, k_new, v_new, overlap=False).wait()

    def attention_start(self, layer: int, q: paddle.Tensor, k_new: paddle.Tensor, v_new: paddle.Tensor,
                        overlap: bool = True) -> "PendingAttention":
        """:meth:`attention` up to the exchange: appends (provisionally), attends over this rank's
        part and starts the all-gather. ``wait()`` on the result finishes it (merge, or the
        ValueError of a refused call). One pending call per object; every rank calls in one order.
        ``overlap=False``: the caller waits at once (the collective may then run on this thread)."""
        if self._plan is None:
            raise RuntimeError("SequenceParallelKVCache.attention: call begin_step first")
        if self._pending is not None:
            raise RuntimeError(f"SequenceParallelKVCache.attention: layer {self._pending.layer}'s call is still "
                               "pending (wait() for it first)")
        n_new = int(self._plan.sum())
        local_error = self._check_local(layer, q, k_new, v_new, n_new)
        self._calls += 1
        header = self._header(layer, q, k_new, n_new, local_error)
        place = q.place if isinstance(q, paddle.Tensor) else paddle.framework._current_expected_place()
        if self._layout is None or not self._step_agreed:
            self._handshake(header, place, local_error)  # raises on every rank alike; nothing changed yet
        pending = PendingAttention(self, layer, local_error, q.shape[1] if not local_error else 0)
        first, mine = int(self._plan[: self.rank].sum()), int(self._plan[self.rank])
        lse = out = None
        if not local_error:
            try:
                k, v = self.k[layer], self.v[layer]
                if mine:  # provisional: installed by wait() only when every rank accepted the call
                    k, v = self._append(layer, k_new[:, first:first + mine], v_new[:, first:first + mine])
                    pending.new_kv = (k, v)
                out, lse = self._partial(k, v, q, n_new, first, mine)
                if q.shape[1] < n_new:  # pad to the agreed n_new rows (their lse -inf: they weigh nothing)
                    pad = [q.shape[0], n_new - q.shape[1], q.shape[2]]
                    out = paddle.concat([out, paddle.zeros(pad + [q.shape[3]], out.dtype)], axis=1)
                    lse = paddle.concat([lse, paddle.full(pad, -math.inf, "float32")], axis=1)
            except Exception as e:  # e.g. ReservationFullError on the owner: every rank must hear of it
                pending.new_kv, out, lse = None, None, None
                pending.local_error = local_error = f"{type(e).__name__}: {e}"
                header[-1] = 1
        b, hq, _, d, dtype = self._layout
        pending.handle = self.exchange.start(pack(header, payload_bytes(b * n_new, hq, d, dtype), place, lse, out),
                                             overlap)
        self._pending = pending
        return pending

    # ---- reports

    def stats(self) -> dict:
        """This rank's tokens and mapped bytes (its VTensors' memory on its device), every rank's
        token count (the plan every rank tracks), and this object's collectives (calls, bytes sent)."""
        place = "cpu"
        for t in self.k:
            if t is not None:
                place = "cpu" if t.place.is_cpu_place() else f"gpu:{t.place.gpu_device_id()}"
                break
        return {"rank": self.rank, "world": self.world, "length": self.length, "steps": self.steps,
                "tokens_per_rank": self.tokens.tolist(), "tokens": int(self.tokens[self.rank]),
                "mapped_bytes": int(api.memory_stats(place)["mapped_bytes"]),
                "collectives": self.exchange.calls, "collective_bytes_sent": self.exchange.bytes_sent}

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
        if q.dtype not in DTYPE_CODES or k_new.dtype != q.dtype or v_new.dtype != q.dtype:
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
        layout = (b, hq, k_new.shape[2], d, q.dtype)
        if self._layout is not None and layout != self._layout:
            names = ("batch", "q_heads", "kv_heads", "head_dim", "dtype")
            return (f"this call's {dict(zip(names, layout))} is not the layout the ranks agreed on "
                    f"{dict(zip(names, self._layout))} (one layout per SequenceParallelKVCache)")
        return ""

    def _header(self, layer, q, k_new, n_new, local_error: str) -> list[int]:
        """The call's signature (HEADER_FIELDS), compared across ranks after the exchange: the
        shapes as given (-1 where not a rank-4 tensor), so the ranks see each other's values."""
        def dims(x, i):
            return int(x.shape[i]) if isinstance(x, paddle.Tensor) and x.ndim == 4 else -1
        sig = [self._calls, layer if isinstance(layer, int) else -1] + [dims(q, i) for i in range(4)]
        sig += [n_new, dims(k_new, 2), DTYPE_CODES.get(q.dtype, 0) if isinstance(q, paddle.Tensor) else -1, self.steps]
        return sig + [KIND_PAYLOAD, 1 if local_error else 0]

    def _handshake(self, header: list[int], place, local_error: str) -> None:
        """Agree on the layout (the first call) and on a multi-token step's size before its payload.
        The buffer holds the header only, padded to the agreed one-token payload once there is one,
        so it is as long as any rank's payload of a step the ranks think has one token."""
        size = HEADER_BYTES
        if self._layout is not None:
            b, hq, _, d, dtype = self._layout
            size = payload_bytes(b, hq, d, dtype)
        header = header[:-2] + [KIND_HANDSHAKE, header[-1]]
        headers, _, _ = unpack(self.exchange.run(pack(header, size, place)), self.world, size)
        self._judge(headers, local_error)
        if self._layout is None:
            b, _, hq, d = (int(x) for x in headers[0, 2:6])
            self._layout = (b, hq, int(headers[0, 7]), d, {c: t for t, c in DTYPE_CODES.items()}[int(headers[0, 8])])
        self._step_agreed = True

    def _judge(self, headers: np.ndarray, local_error: str) -> None:
        """Raise, on every rank alike, when the ranks' calls differ or one refused its own: one
        ValueError saying what differs (every rank's values), who refused, and this rank's reason."""
        why = []
        differ = [(name, headers[:, i].tolist()) for i, name in enumerate(HEADER_FIELDS[:-1])
                  if len(set(headers[:, i].tolist())) > 1]
        if differ:
            why.append("the ranks disagree: " + ", ".join(f"{name} per rank {vals}" for name, vals in differ))
        failed = [r for r in range(self.world) if headers[r, -1]]
        if failed:
            why.append(f"rank(s) {failed} refused the call")
        if local_error:
            why.append(f"rank {self.rank}: {local_error}")
        if why:
            raise ValueError(f"SequenceParallelKVCache.attention: {'; '.join(why)}; no cache changed")

    def _append(self, layer, k, v):
        """The layer's caches with ``k``/``v`` appended, not yet installed (dropping them undoes it)."""
        kw = {"max_seq_len": self.max_seq_len, "chunk_bytes": self.chunk_bytes}
        if self.k[layer] is None:
            return api.from_dense(k, **kw), api.from_dense(v, **kw)
        new_k = api.append(self.k[layer], k, **kw)
        try:
            return new_k, api.append(self.v[layer], v, **kw)
        except Exception:
            # K grew but V could not: the longer K view dies with new_k, so the caches stay as they were.
            del new_k
            raise

    def _partial(self, k, v, q, n_new, first, mine):
        """This rank's (out, lse) over its part ``k``/``v``; zeros and -inf for an empty part."""
        b, tq, hq, d = q.shape
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


class PendingAttention:
    """An attention call whose all-gather may still be running; ``wait()`` finishes it."""

    def __init__(self, sp: SequenceParallelKVCache, layer, local_error: str, q_len: int):
        self.sp, self.layer, self.local_error, self.q_len = sp, layer, local_error, q_len
        self.new_kv = None  # the owner's provisional caches
        self.handle = None

    def wait(self) -> paddle.Tensor:
        """The merged attention ``[B, Tq, Hq, D]``, the same on every rank; or the ValueError of a
        refused call (every rank alike, the provisional append dropped)."""
        sp = self.sp
        if sp._pending is not self:
            raise RuntimeError("PendingAttention.wait: already waited for")
        sp._pending = None
        new_kv, self.new_kv = self.new_kv, None
        b, hq, _, d, dtype = sp._layout
        n_new = int(sp._plan.sum())
        headers, outs, lses = unpack(self.handle.wait(), sp.world, payload_bytes(b * n_new, hq, d, dtype),
                                     [b, n_new], hq, d, dtype)
        sp._judge(headers, self.local_error)  # a refusal drops new_kv here: no cache changed
        if new_kv is not None:
            sp.k[self.layer], sp.v[self.layer] = new_kv
        sp._done[self.layer] = True
        out = merge_attention_states(outs, lses)[0]
        return out if self.q_len == n_new else out[:, :self.q_len].contiguous()

    def cancel(self) -> None:
        """Finish the all-gather (the other ranks take part in it) and keep nothing: the
        provisional append is dropped and the layer counts as not attended."""
        if self.sp._pending is self:
            self.sp._pending, self.new_kv = None, None
            self.handle.wait()


__all__ = ["SequenceParallelKVCache", "PendingAttention", "balanced_split"]
