"""Every exception paddle_vtensor raises, and the one table that turns a refusal of the C++ library
into one of them. C++ decides (each op checks its inputs and says why), Python relays.

How a refusal reaches Python: an op throws ``"<op>: <Code>: <message>"`` when a core call failed
(custom_ops/paddle/op_errors.h; ``<Code>`` is pvt::code_name of the core's Status) and
``"<op>: <message>"`` when a check at its entry refused an input; a C entry point (slots,
set_mapped_limit) returns the code and writes ``"<Code>: <message>"``. :func:`from_status` maps
both by this table:

===============  ==========================  ====================================================
code             exception                   when
===============  ==========================  ====================================================
(none)           ValueError / SlotError      a check at an op's entry: rank, dtype, shape, place,
                                             range, attribute (SlotError for the slot API)
InvalidArgument  ValueError / SlotError      the core refused a malformed request (a zero-sized
                                             cache, a tensor that is not a slot cache)
OutOfRange       ReservationFullError        past the reservation (max_seq_len), a slot out of range
OutOfMemory      VTensorOutOfMemoryError     mapping failed: device/host memory or set_mapped_limit
DriverError      VTensorError                any other OS or CUDA driver failure
Unsupported      VTensorError                a device this build has no backend for
Conflict         VTensorError                internal: the ops copy instead of raising it
===============  ==========================  ====================================================

Raised by Python itself (what the ops cannot see): ``TypeError`` for an argument that is not a
tensor or not an int, ``ValueError`` for an int past 64 bits or a request for gradients,
:class:`SpeculativeError` when the device-side accept step flagged a sequence,
:class:`UnsupportedModelError` for a model the integration cannot serve. In every case the cache
is unchanged.
"""
from __future__ import annotations


class VTensorError(RuntimeError):
    """An op failed for a reason other than a bad input; the message names the op and the problem.
    The cache is unchanged."""


class ReservationFullError(VTensorError):
    """The append needs more tokens than the cache's reservation (max_seq_len) holds."""


class VTensorOutOfMemoryError(VTensorError, MemoryError):
    """Physical memory (or the limit set with set_mapped_limit) ran out while mapping."""


class SlotError(VTensorError, ValueError):
    """A slot op refused a call (bad lengths, slot ids, shapes or an unmapped slot); nothing changed."""


class SpeculativeError(RuntimeError):
    """The device-side accept step reported a bad sequence (error_flag); the run stopped."""


class UnsupportedModelError(TypeError):
    """The model (or a call it makes) cannot use VTensor caches; nothing was changed."""


BAD_INPUT = None  # in ERRORS: the caller's bad-input class (ValueError, or SlotError for the slot API)

# The table above, from the core's status code names (pvt::code_name) to the exception raised.
# tests/test_errors.py checks that it covers every code the library reports and provokes each one.
ERRORS: dict[str, type[Exception] | None] = {
    "InvalidArgument": BAD_INPUT,
    "OutOfRange": ReservationFullError,
    "OutOfMemory": VTensorOutOfMemoryError,
    "DriverError": VTensorError,
    "Unsupported": VTensorError,
    "Conflict": VTensorError,
}


def from_status(where: str, text: str, bad_input: type[Exception] = ValueError) -> Exception:
    """The exception for a refusal reported as ``text``: ``"<Code>: <message>"`` from a failed core
    call, or a plain ``"<message>"`` from a check at the entry. ``where`` (the op or the function)
    starts the exception's message."""
    code = text.split(": ", 1)[0]
    cls = ERRORS.get(code, BAD_INPUT)
    return (cls or bad_input)(f"{where}: {text}")


def from_op_error(error: Exception, op: str | None = None, bad_input: type[Exception] = ValueError) -> Exception:
    """The exception for ``error`` raised by an op call: an op's refusal (Paddle surfaces PD_THROW
    as OSError, ``"<op>: ..."`` on the first line and ``[file:line]`` after it) goes through the
    table; anything else (Python's own TypeError, Paddle's errors) is returned as it is."""
    if not isinstance(error, OSError):
        return error
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = next((line[line.find(op):] for line in lines if op and op in line), lines[0] if lines else repr(error))
    where, sep, rest = text.partition(": ")
    if not sep:
        return bad_input(text)
    return from_status(where, rest, bad_input)


__all__ = ["ERRORS", "ReservationFullError", "SlotError", "SpeculativeError", "UnsupportedModelError",
           "VTensorError", "VTensorOutOfMemoryError", "from_op_error", "from_status"]
