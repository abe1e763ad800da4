"""A small Llama-3-shaped model trained on a text, written as a Hugging Face folder, for the
compression figures (hf_compress_figures.sh): a byte-level BPE trained by the tokenizers library
on the training part, LlamaForCausalLM (grouped-query attention) trained by PyTorch's AdamW, the
folder saved by save_pretrained in bf16 with its tokenizer; the held-out part written as an llm.c
token file; and the held-out perplexity transformers computes on the same windows as
loom-compress eval.

  hf_train_small.py train TEXT FOLDER HELD.bin STEPS THREADS
  hf_train_small.py perplexity FOLDER HELD.bin WINDOW THREADS
"""
import json
import sys

import numpy as np


def train(text_path, folder, held_path, steps, threads):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    torch.set_num_threads(threads)
    text = open(text_path, encoding="utf-8", errors="replace").read()
    cut = int(len(text) * 0.9)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text[:cut]], trainers.BpeTrainer(vocab_size=2048, special_tokens=["<|eos|>"],
                                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    ids = np.array(tok.encode(text[:cut]).ids, dtype=np.int64)
    held = np.array(tok.encode(text[cut:]).ids, dtype=np.uint16)
    h = np.zeros(256, np.int32)
    h[:3] = 20240520, 1, len(held)
    open(held_path, "wb").write(h.tobytes() + held.tobytes())
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                      eos_token_id=0, bos_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.05)
    rng = np.random.default_rng(0)
    T, batch = 128, 16
    for step in range(steps):
        at = rng.integers(0, len(ids) - T - 1, batch)
        x = torch.from_numpy(np.stack([ids[a:a + T + 1] for a in at]))
        logits = m(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 200 == 0 or step == steps - 1:
            print("step %d loss %.4f" % (step, loss.item()), file=sys.stderr)
    m.to(torch.bfloat16).save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|eos|>").save_pretrained(folder)
    print(json.dumps({"train_tokens": int(len(ids)), "held_tokens": int(len(held)), "params": sum(p.numel() for p in m.parameters())}))


def perplexity(folder, held_path, window, threads):
    """Held-out perplexity as loom-compress eval computes it: windows of `window` tokens one after
    another, each position predicting the next, in float32 from the bf16 weights."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    raw = open(held_path, "rb").read()
    ids = torch.from_numpy(np.frombuffer(raw[1024:], dtype=np.uint16).astype(np.int64))
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    n = (len(ids) - 1) // window
    nll, hits = 0.0, 0
    with torch.no_grad():
        for w in range(n):
            x = ids[w * window:(w + 1) * window + 1]
            z = m(input_ids=x[None, :-1]).logits[0].double()
            nll += torch.nn.functional.cross_entropy(z, x[1:], reduction="sum").item()
            hits += int((z.argmax(-1) == x[1:]).sum())
    t = n * window
    print(json.dumps({"perplexity": float(np.exp(nll / t)), "accuracy": hits / t, "tokens": t}))


if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "train":
        train(a[0], a[1], a[2], int(a[3]), int(a[4]))
    elif cmd == "perplexity":
        perplexity(a[0], a[1], int(a[2]), int(a[3]))
    else:
        sys.exit("hf_train_small.py: unknown command " + cmd)
