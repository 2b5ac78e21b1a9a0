"""A small random-weight PaddleNLP llama and a random prompt, built locally (no downloads) from a
fixed seed, for the demo and the benchmark."""
from __future__ import annotations

import dataclasses

import paddle

# Random weights at the default scale (0.02) make every prompt fall into a 2-4 token loop within a
# few steps, so "same tokens" would say little about attention. At 0.1 the attention is sharp
# enough that the generated tokens depend on the whole context and rarely repeat.
INIT_RANGE = 0.1


@dataclasses.dataclass(frozen=True)
class ModelShape:
    hidden_size: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 1000

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.heads

    def check(self) -> None:
        if self.hidden_size % self.heads:
            raise ValueError(f"--hidden-size {self.hidden_size} must be a multiple of --heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"--heads {self.heads} must be a multiple of --kv-heads {self.kv_heads}")
        if self.vocab < 8:
            raise ValueError(f"--vocab must be at least 8, got {self.vocab}")


def add_model_options(p) -> None:
    """The random llama's shape, the chunk size and the repeats: the options bench-inflight and
    bench-prefix share (ModelShape(args.hidden_size, args.layers, args.heads, args.kv_heads, args.vocab))."""
    p.add_argument("--hidden-size", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--chunk-kib", type=int, default=64, help="slot-cache mapping chunk (KiB)")
    p.add_argument("--repeats", type=int, default=2, help="runs of each path, interleaved; the best is reported")


def build_model(shape: ModelShape, dtype: str, max_positions: int, seed: int):
    """LlamaForCausalLM in eval mode on paddle's current device, default (eager) attention path."""
    from paddlenlp.transformers import LlamaConfig, LlamaForCausalLM

    shape.check()
    config = LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden_size,
        intermediate_size=_ffn_size(shape.hidden_size),
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=max_positions,
        initializer_range=INIT_RANGE,
        # No end-of-sequence token: every run generates exactly the tokens asked for, so the two
        # paths decode the same number of steps at the same context lengths.
        eos_token_id=None,
        bos_token_id=1,
        pad_token_id=0,
    )
    paddle.seed(seed)
    model = LlamaForCausalLM(config)
    model.eval()
    if dtype != "float32":
        model.to(dtype=dtype)
    return model


def _ffn_size(hidden: int) -> int:
    # llama's 8/3 * hidden, rounded up to a multiple of 64 like the released checkpoints.
    return -(-(8 * hidden // 3) // 64) * 64


def random_prompt(batch: int, length: int, vocab: int, seed: int) -> paddle.Tensor:
    """int64 token ids [batch, length], avoiding the pad/bos ids 0 and 1."""
    paddle.seed(seed + 1)
    return paddle.randint(2, vocab, [batch, length], dtype="int64")
