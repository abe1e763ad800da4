#!/usr/bin/env python3
"""llm_peer.py — the PyTorch side of tests/bench/llm_figures.sh and hf_figures.sh, on the same
Hugging Face folder loom-serve serves, with transformers' AutoModelForCausalLM (in float32) when
`transformers` is importable (PyTorch's own greedy loop with a KV cache: generate(use_cache=True,
do_sample=False)), else the hand-written GPT-2 of tests/serve/gpt2_ref.py.

  llm_peer.py DIR PROMPTS_JSON NEW_TOKENS THREADS
prints one JSON line: {"torch", "peer", "tokens", "seconds", "tokens_per_s", "outputs"}; the
prompts run one at a time (batch 1), as a single client would be served.
"""
import json, os, sys, time

import torch


def main():
    folder, prompts, n, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    try:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        peer = "transformers %s.generate (KV cache, greedy, float32)" % type(model).__name__
        def run(p):
            ids = torch.tensor([p])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, use_cache=True, pad_token_id=0)
            return out[0, len(p):].tolist()
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "serve"))
        from gpt2_ref import Gpt2
        model = Gpt2(folder)
        peer = "a GPT-2 written in torch (tests/serve/gpt2_ref.py, KV cache, greedy)"
        run = lambda p: model.greedy(p, n)
    with torch.no_grad():
        run(prompts[0][:4])  # warm-up
        t0 = time.perf_counter()
        outs = [run(p) for p in prompts]
        dt = time.perf_counter() - t0
    tokens = sum(len(o) for o in outs)
    print(json.dumps({"torch": torch.__version__, "peer": peer, "tokens": tokens, "seconds": dt,
                      "tokens_per_s": tokens / dt, "outputs": outs}))


if __name__ == "__main__":
    main()
