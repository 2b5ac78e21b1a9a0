"""An unmodified export + paddle.inference script in PaddleNLP's predictor style (no paddle_vtensor
import): tests/test_autopatch.py runs it with and without PADDLE_VTENSOR_AUTOPATCH=1.

PaddleNLP 3.0.0b4: the whole generation loop (model.to_static), whose caches stay inside the
program, run by Config(model_dir, prefix) / enable_new_ir / create_predictor / copy_from_cpu / run
/ copy_to_cpu. PaddleNLP 2.8.1 cannot export that loop: a decode step is exported instead, whose
cache inputs and outputs the pass would move to storage layout (a boundary change the caller
cannot know about), so the hook must leave that predictor alone."""
import json
import os
import sys
import tempfile
import time

import numpy as np
import paddle
import paddlenlp
from paddle import inference
from paddlenlp.transformers import LlamaConfig, LlamaForCausalLM

new_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 16
paddle.seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                     initializer_range=0.1, eos_token_id=None, bos_token_id=1, pad_token_id=0))
model.eval()
whole_loop = int(paddlenlp.__version__.split(".")[0]) >= 3
model_dir = tempfile.mkdtemp()
rng = np.random.default_rng(0)
ids = rng.integers(3, 100, size=(2, 9)).astype("int64")


class DecodeStep(paddle.nn.Layer):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask, k0, v0, k1, v1):
        out = self.inner(input_ids=input_ids, attention_mask=attention_mask, past_key_values=[(k0, v0), (k1, v1)],
                         use_cache=True, return_dict=False)
        return out[0], [t for pair in out[1] for t in pair]


if whole_loop:
    model.to_static(os.path.join(model_dir, "model"), {"use_top_p": False})
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
             "position_ids": np.tile(np.arange(ids.shape[1], dtype="int64"), (2, 1)),
             "max_new_tokens": np.array([new_tokens], "int64"), "top_k": np.array([1], "int64")}
else:
    past = 8
    spec = [paddle.static.InputSpec([2, 1], "int64", "input_ids"),
            paddle.static.InputSpec([2, past + 1], "int64", "attention_mask")]
    spec += [paddle.static.InputSpec([2, past, 2, 16], "float32", n) for n in ("k0", "v0", "k1", "v1")]
    paddle.jit.save(paddle.jit.to_static(DecodeStep(model), input_spec=spec, full_graph=True),
                    os.path.join(model_dir, "model"), input_spec=spec)
    feeds = {"input_ids": ids[:, :1], "attention_mask": np.ones((2, past + 1), "int64")}
    feeds.update({n: rng.standard_normal((2, past, 2, 16)).astype("float32") for n in ("k0", "v0", "k1", "v1")})

config = inference.Config(model_dir, "model")
config.disable_gpu()
config.disable_mkldnn()
config.disable_glog_info()
config.enable_new_ir()
predictor = inference.create_predictor(config)
for name in predictor.get_input_names():
    predictor.get_input_handle(name).copy_from_cpu(feeds[name])
start = time.perf_counter()
predictor.run()
seconds = time.perf_counter() - start
outputs = [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]
if whole_loop:
    print("TOKENS " + json.dumps(outputs[0].tolist()))
else:  # logits and new caches: rounded so equal programs print equal lines
    print("TOKENS " + json.dumps([np.round(o, 4).tolist() for o in outputs]))
print(f"MS_PER_TOKEN {1000 * seconds / (2 * (new_tokens if whole_loop else 1)):.3f}")
