"""An unmodified PaddleNLP generate() script (no paddle_vtensor import): tests/test_autopatch.py
runs it with and without PADDLE_VTENSOR_AUTOPATCH=1 and compares the TOKENS lines.

Two tiny random models in one process (llama GQA, qwen), greedy, sampling and beam search; the
first model is deleted and garbage-collected before the second generates again."""
import gc
import json
import sys
import time

import numpy as np
import paddle
from paddlenlp.transformers import LlamaConfig, LlamaForCausalLM, QWenConfig, QWenForCausalLM

new_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 16
paddle.seed(0)
llama = LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                     initializer_range=0.1, eos_token_id=None, bos_token_id=1, pad_token_id=0))
qwen = QWenForCausalLM(QWenConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  kv_channels=16, intermediate_size=256, max_position_embeddings=256, seq_length=256,
                                  initializer_range=0.1, eos_token_id=None, pad_token_id=0))
llama.eval()
qwen.eval()
ids = paddle.to_tensor(np.random.default_rng(0).integers(3, 100, size=(2, 9)), dtype="int64")
mask = paddle.ones_like(ids)


def run(model, **kw):
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, **kw)
    return out[0].numpy().tolist()


tokens = {}
start = time.perf_counter()
tokens["llama_greedy"] = run(llama, decode_strategy="greedy_search")
tokens["qwen_greedy"] = run(qwen, decode_strategy="greedy_search")
seconds = time.perf_counter() - start
paddle.seed(1)
tokens["llama_sampling"] = run(llama, decode_strategy="sampling", top_k=5)
tokens["llama_beam"] = run(llama, decode_strategy="beam_search", num_beams=2)
del llama
gc.collect()  # one model gone: the other keeps working
tokens["qwen_after_gc"] = run(qwen, decode_strategy="greedy_search")
start = time.perf_counter()  # again: the first generate() of each model included the plugin's apply()
run(qwen, decode_strategy="greedy_search")
warm = time.perf_counter() - start
print("TOKENS " + json.dumps(tokens))
print(f"MS_PER_TOKEN first generate() {1000 * seconds / (2 * new_tokens):.3f}, later {1000 * warm / new_tokens:.3f}")
