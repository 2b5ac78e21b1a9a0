"""The accept/advance op of speculative decoding (custom_ops/kernels/speculative_accept.h), typed.

Everything is updated in place on the tensors' device, so a decode loop calls it each step without
reading anything back; on CUDA a bad sequence sets ``error_flag`` (read with the loop's
finished-sequence check), on the CPU the op raises with every tensor unchanged.
"""
from __future__ import annotations

import paddle

from .. import _ops, errors
from .._op_names import PVT_OP_SPECULATIVE_ACCEPT


def speculative_accept(draft_tokens: paddle.Tensor, target_tokens: paddle.Tensor, slot_ids: paddle.Tensor,
                       target_seqlens: paddle.Tensor, draft_seqlens: paddle.Tensor, out_ids: paddle.Tensor,
                       out_len: paddle.Tensor, finished: paddle.Tensor, accepted: paddle.Tensor,
                       next_tokens: paddle.Tensor, error_flag: paddle.Tensor, *, target_capacity: int,
                       draft_capacity: int, target_advance: int = 1, draft_advance: int = 0,
                       eos_token_id: int | None = None, pad_token_id: int = 0) -> None:
    """One accept/advance step for n sequences with k draft tokens each (all tensors on one place).

    draft_tokens int64 [n, k]; target_tokens int64 [n, k+1] (the target's greedy token at each
    verified position); slot_ids int32 [n] (distinct; the same slot in both caches). In place:
    target_seqlens / draft_seqlens int32 [slots] (+= accepted + target_advance / draft_advance),
    out_ids int64 [n, max_new_tokens] and out_len int32 [n] (the emitted tokens), finished int32 [n]
    (1 after eos or max_new_tokens), accepted int32 [n], next_tokens int64 [n], error_flag int32 [1].
    target_capacity / draft_capacity: each cache's max_seq_len (no length may pass it).
    Raises ValueError naming the tensor or sequence at fault (ReservationFullError for a length out
    of range; paddle_vtensor.errors is the table), with nothing changed.
    """
    eos = -1 if eos_token_id is None else int(eos_token_id)
    try:
        _ops.run(
            PVT_OP_SPECULATIVE_ACCEPT, draft_tokens, target_tokens, slot_ids, target_seqlens, draft_seqlens, out_ids, out_len, finished,
            accepted, next_tokens, error_flag, int(target_capacity), int(draft_capacity), int(target_advance),
            int(draft_advance), eos, int(pad_token_id))
    except Exception as e:  # the one error table (errors.py): bad input -> ValueError, ...
        raise errors.from_op_error(e, PVT_OP_SPECULATIVE_ACCEPT) from None


# error_flag values (SpeculativeAcceptError in speculative_accept.h).
ERROR_NAMES = {
    1: "a slot id is outside [0, num_slots) of a cache",
    2: "two sequences name the same slot",
    3: "a target slot's new length would leave [0, target_capacity]",
    4: "a draft slot's new length would leave [0, draft_capacity]",
    5: "an out_len is outside [0, max_new_tokens]",
}


def accept_launches(kind: str = "cpu") -> int:
    """How many times the accept kernel ran in this process on the host ("cpu") or a GPU ("gpu"):
    tests use it to prove a decode loop took the op's path."""
    return _ops.c.speculative_accept_launches({"cpu": 0, "gpu": 1}[kind])
