"""The one collective of a sequence-parallel attention call: each rank's call signature, partial lse
and partial output packed into one byte buffer, all-gathered, unpacked (``SequenceParallelKVCache``).

Layout of one rank's buffer (bytes)::

    header  HEADER_FIELDS as int32                 (48 bytes)
    lse     [rows, q_heads] float32                (rows = batch x the step's new tokens)
    out     [rows, q_heads, head_dim] in q's dtype

Every rank must send the same number of bytes (gloo and NCCL both need it), so the size comes only
from values the ranks already agreed on (the cache's layout, the step's token count after a
handshake), never from one rank's tensors: a rank whose call is wrong still sends a buffer of the
agreed size, with its ``refused`` flag set.

Collectives run in submission order on one thread per process (CPU: gloo's ``sync_op=False`` still
blocks the caller, measured with Paddle 3.3.1, but it releases the GIL, so a thread overlaps it with
the caller's next work; a call waited for at once runs on the caller's thread when none is in flight)
or as an NCCL task on the communication stream (GPU).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import paddle
import paddle.distributed as dist

HEADER_FIELDS = ("call", "layer", "batch", "q_len", "q_heads", "head_dim", "n_new", "kv_heads", "dtype", "step",
                 "kind", "refused")
HEADER_BYTES = 4 * len(HEADER_FIELDS)
KIND_HANDSHAKE, KIND_PAYLOAD = 0, 1
DTYPE_CODES = {paddle.float32: 1, paddle.float16: 2, paddle.bfloat16: 3}
_ELEMENT_BYTES = {paddle.float32: 4, paddle.float16: 2, paddle.bfloat16: 2}


def payload_bytes(rows: int, q_heads: int, head_dim: int, dtype) -> int:
    """Bytes one rank sends for ``rows`` query rows: header, float32 lse, output in ``dtype``."""
    return HEADER_BYTES + rows * q_heads * (4 + head_dim * _ELEMENT_BYTES[dtype])


def _bytes(x: paddle.Tensor) -> paddle.Tensor:
    return paddle.view(x.contiguous().reshape([-1]), "uint8")


def pack(header: list[int], size: int, place, lse: paddle.Tensor | None = None, out: paddle.Tensor | None = None
         ) -> paddle.Tensor:
    """This rank's buffer of exactly ``size`` bytes on ``place``: the header, then lse and out when
    given (their byte count must fit), zero-filled to ``size`` (a refusal, a handshake)."""
    parts = [paddle.view(paddle.to_tensor(np.asarray(header, dtype=np.int32), place=place), "uint8")]
    if lse is not None:
        parts += [_bytes(lse.astype("float32")), _bytes(out)]
    used = sum(int(p.shape[0]) for p in parts)
    if used > size:
        raise AssertionError(f"sp_exchange.pack: {used} bytes do not fit the agreed {size}")  # a bug, not input
    if used < size:
        parts.append(paddle.zeros([size - used], "uint8").to(parts[0].place))
    return paddle.concat(parts)


def unpack(gathered: paddle.Tensor, world: int, size: int, rows_shape: list[int] | None = None,
           q_heads: int = 0, head_dim: int = 0, dtype=None):
    """Every rank's header as an int32 array ``[world, len(HEADER_FIELDS)]``, and, with
    ``rows_shape`` (e.g. ``[B, n_new]``), every rank's ``lse [*rows_shape, q_heads]`` float32 and
    ``out [*rows_shape, q_heads, head_dim]`` in ``dtype``."""
    per_rank = gathered.reshape([world, size])
    # Copies (clone) before each reinterpretation: Paddle 3.3.1's dtype view ignores a slice's offset.
    headers = np.frombuffer(per_rank[:, :HEADER_BYTES].clone().numpy().tobytes(), dtype=np.int32).reshape(world, -1)
    if rows_shape is None:
        return headers, None, None
    rows = int(np.prod(rows_shape))
    lse_end = HEADER_BYTES + rows * q_heads * 4
    out_end = lse_end + rows * q_heads * head_dim * _ELEMENT_BYTES[dtype]
    lses = [paddle.view(per_rank[r, HEADER_BYTES:lse_end].clone(), "float32").reshape([*rows_shape, q_heads])
            for r in range(world)]
    outs = [paddle.view(per_rank[r, lse_end:out_end].clone(), dtype).reshape([*rows_shape, q_heads, head_dim])
            for r in range(world)]
    return headers, outs, lses


class Exchange:
    """Runs the all-gathers of one group in submission order and counts them (calls, bytes sent)."""

    _cpu_thread: ThreadPoolExecutor | None = None  # one per process: every group's collectives in one order
    _lock = threading.Lock()
    _in_flight = 0  # CPU collectives submitted to the thread and not finished

    def __init__(self, group, world: int):
        self.group, self.world = group, world
        self.calls = 0
        self.bytes_sent = 0

    def start(self, buf: paddle.Tensor, overlap: bool = True):
        """Begin the all-gather of ``buf`` (uint8); ``wait()`` on the result gives ``[world * size]``.
        ``overlap=False`` (the caller waits at once): on the CPU the collective runs on the calling
        thread when none is in flight, sparing the hand-over to the thread."""
        self.calls += 1
        self.bytes_sent += int(buf.shape[0])
        if self.world == 1:  # a one-rank group: nothing to exchange (init_parallel_env makes none)
            return _Pending(buf)
        gathered = paddle.empty([self.world * int(buf.shape[0])], "uint8").to(buf.place)  # no copy: same place
        if buf.place.is_cpu_place():
            with Exchange._lock:
                inline = not overlap and Exchange._in_flight == 0  # nothing ahead of it: the order holds
                if not inline:
                    Exchange._in_flight += 1
                    if Exchange._cpu_thread is None:
                        Exchange._cpu_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pvt-sp-gloo")
            if inline:
                dist.stream.all_gather(gathered, buf, self.group)
                return _Pending(gathered)
            return _Pending(gathered, Exchange._cpu_thread.submit(self._gather_on_thread, gathered, buf).result)
        task = dist.stream.all_gather(gathered, buf, group=self.group, sync_op=not overlap)
        return _Pending(gathered, task.wait)

    def run(self, buf: paddle.Tensor) -> paddle.Tensor:
        return self.start(buf, overlap=False).wait()

    def _gather_on_thread(self, gathered, buf):
        try:
            dist.stream.all_gather(gathered, buf, self.group)
        finally:
            with Exchange._lock:
                Exchange._in_flight -= 1


class _Pending:
    """A started all-gather: ``wait()`` finishes it (``finish``: the future's result, which re-raises
    the collective's error, or the NCCL task's wait) and gives the gathered buffer."""

    def __init__(self, gathered, finish=None):
        self.gathered, self.finish = gathered, finish

    def wait(self):
        if self.finish is not None:
            self.finish()
        return self.gathered


__all__ = ["Exchange", "HEADER_FIELDS", "HEADER_BYTES", "DTYPE_CODES", "KIND_HANDSHAKE", "KIND_PAYLOAD",
           "pack", "unpack", "payload_bytes"]
