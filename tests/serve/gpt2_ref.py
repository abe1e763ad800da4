#!/usr/bin/env python3
"""gpt2_ref.py — the reference side of the LLM serving tests, in PyTorch.

  write DIR [--seed S --layers L --heads H --embd C --positions T --vocab V --prefix P --dtype F32|F16]
      random GPT-2 weights written as Hugging Face lays them out: DIR/config.json and
      DIR/model.safetensors (Conv1D weights [in, out], the attention buffers h.N.attn.bias,
      lm_head tied to wte and not stored), the safetensors file written byte by byte here.
  greedy DIR N PROMPTS_JSON
      for each prompt (a list of token ids), the N tokens PyTorch's own greedy loop with a KV
      cache chooses (GPT-2's forward written out in torch: gelu_new, LayerNorm with the config's
      epsilon); prints a JSON list of lists.
  vocab FILE
      GPT-2's byte-level vocabulary (bytes_to_unicode: each of the 256 bytes a token, ids 0-255)
      and the token "ab" (256), as vocab.json: what the tests that craft a tokenizer start from.
"""
import argparse, json, math, struct, sys

import numpy as np
import torch


def write(args):
    g = torch.Generator().manual_seed(args.seed)
    C, L, V, T = args.embd, args.layers, args.vocab, args.positions
    def rnd(*shape, std=0.1):
        return torch.randn(*shape, generator=g) * std
    t = {"wte.weight": rnd(V, C, std=0.3), "wpe.weight": rnd(T, C, std=0.6)}
    for l in range(L):
        h = f"h.{l}."
        t[h + "ln_1.weight"] = 1 + rnd(C)
        t[h + "ln_1.bias"] = rnd(C)
        t[h + "attn.c_attn.weight"] = rnd(C, 3 * C, std=0.15)   # Conv1D: [in, out]
        t[h + "attn.c_attn.bias"] = rnd(3 * C)
        t[h + "attn.c_proj.weight"] = rnd(C, C, std=0.15)
        t[h + "attn.c_proj.bias"] = rnd(C)
        t[h + "ln_2.weight"] = 1 + rnd(C)
        t[h + "ln_2.bias"] = rnd(C)
        t[h + "mlp.c_fc.weight"] = rnd(C, 4 * C, std=0.15)
        t[h + "mlp.c_fc.bias"] = rnd(4 * C)
        t[h + "mlp.c_proj.weight"] = rnd(4 * C, C, std=0.1)
        t[h + "mlp.c_proj.bias"] = rnd(C)
        t[h + "attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)  # a buffer, as the published files carry
    t["ln_f.weight"] = 1 + rnd(C)
    t["ln_f.bias"] = rnd(C)
    dtype = {"F32": (torch.float32, "<f4"), "F16": (torch.float16, "<f2")}[args.dtype]
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, v in t.items():
        raw = v.to(dtype[0]).numpy().astype(dtype[1]).tobytes()
        header[args.prefix + name] = {"dtype": args.dtype, "shape": list(v.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(f"{args.dir}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    cfg = {"model_type": "gpt2", "n_layer": L, "n_head": args.heads, "n_embd": C, "n_positions": T, "n_ctx": T,
           "vocab_size": V, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
           "bos_token_id": V - 1, "eos_token_id": V - 1}
    with open(f"{args.dir}/config.json", "w") as f:
        json.dump(cfg, f)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        np_type = {"F32": "<f4", "F16": "<f2"}[e["dtype"]]
        a = np.frombuffer(data[b:end], dtype=np_type).astype(np.float32).reshape(e["shape"])
        out[name[12:] if name.startswith("transformer.") else name] = torch.from_numpy(a.copy())
    return out


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Gpt2:
    def __init__(self, folder):
        self.cfg = json.load(open(f"{folder}/config.json"))
        self.w = read_safetensors(f"{folder}/model.safetensors")

    def step(self, ids, start, cache):
        """ids: new tokens at positions start..; cache: per layer (K, V) [H, t, hs]; logits of the last."""
        c, w = self.cfg, self.w
        C, H = c["n_embd"], c["n_head"]
        hs = C // H
        eps = c["layer_norm_epsilon"]
        x = w["wte.weight"][ids] + w["wpe.weight"][start:start + len(ids)]
        n = len(ids)
        for l in range(c["n_layer"]):
            p = f"h.{l}."
            a = torch.nn.functional.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
            qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = qkv.split(C, dim=1)
            q, k, v = (t.view(n, H, hs).transpose(0, 1) for t in (q, k, v))
            if cache[l] is not None:
                k = torch.cat([cache[l][0], k], dim=1)
                v = torch.cat([cache[l][1], v], dim=1)
            cache[l] = (k, v)
            s = q @ k.transpose(1, 2) / math.sqrt(hs)
            total = k.shape[1]
            mask = torch.arange(total)[None, :] > (torch.arange(n)[:, None] + start)
            s = s.masked_fill(mask, float("-inf"))
            y = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(n, C)
            x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            a = torch.nn.functional.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
            x = x + gelu_new(a @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        x = torch.nn.functional.layer_norm(x[-1:], (C,), w["ln_f.weight"], w["ln_f.bias"], eps)
        return (x @ w["wte.weight"].T)[0]

    def greedy(self, prompt, n):
        cache = [None] * self.cfg["n_layer"]
        out, ids, start = [], list(prompt), 0
        with torch.no_grad():
            for _ in range(n):
                logits = self.step(ids, start, cache)
                start += len(ids)
                nxt = int(logits.argmax())
                out.append(nxt)
                ids = [nxt]
        return out


def byte_vocab():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): i for i, c in enumerate(cs)}
    vocab["ab"] = 256
    return vocab


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("vocab").add_argument("file")
    w = sub.add_parser("write")
    w.add_argument("dir")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--layers", type=int, default=2)
    w.add_argument("--heads", type=int, default=4)
    w.add_argument("--embd", type=int, default=64)
    w.add_argument("--positions", type=int, default=128)
    w.add_argument("--vocab", type=int, default=300)
    w.add_argument("--prefix", default="")
    w.add_argument("--dtype", default="F32", choices=["F32", "F16"])
    gr = sub.add_parser("greedy")
    gr.add_argument("dir")
    gr.add_argument("n", type=int)
    gr.add_argument("prompts")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.cmd == "vocab":
        json.dump(byte_vocab(), open(a.file, "w"))
    elif a.cmd == "write":
        write(a)
    else:
        m = Gpt2(a.dir)
        print(json.dumps([m.greedy(p, a.n) for p in json.loads(a.prompts)]))


if __name__ == "__main__":
    main()
