import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import paddle  # noqa: E402

paddle.set_device("cpu")

DTYPES = ["float32", "float16", "bfloat16"]


def to_np(x) -> np.ndarray:
    """Exact float32 numpy copy of any float tensor (bfloat16 and float16 widen exactly)."""
    return x.astype("float32").numpy()


def rand(shape, dtype="float32", seed=None):
    rng = np.random.default_rng(seed)
    return paddle.to_tensor(rng.standard_normal(shape).astype("float32")).astype(dtype)


class RawOps:
    """The ops by name, raw (no Python layer in front), through the one way in (_ops.run): one
    output comes back as a tensor, several as a list, as Paddle's generated op functions do."""

    def __getattr__(self, op):
        from paddle_vtensor import _ops

        def call(*args):
            outs = _ops.run(op, *args)
            return outs[0] if len(outs) == 1 else outs

        return call


@pytest.fixture(scope="session")
def ops():
    from paddle_vtensor import _ops

    _ops.load()
    return RawOps()


@pytest.fixture(autouse=True)
def _no_leaks():
    """Every test must leave no VTensor memory behind once its tensors are gone."""
    import gc

    import paddle_vtensor as pvt

    yield
    gc.collect()
    stats = pvt.memory_stats("cpu")
    assert stats["live_vtensors"] == 0, stats
    assert stats["mapped_bytes"] == 0, stats
    assert stats["live_regions"] == 0, stats
    if stats["pooled_bytes"] or pvt.pool_limit():
        pvt.set_pool_limit(0)  # no test's pool outlives it (the default: no pool)
