"""Attention as PyTorch's exporter writes it, served batched.

  onnx_attention.py export REPO [dynamo]   nn.MultiheadAttention (with and without a key padding
      mask), nn.TransformerEncoder (post- and pre-norm, ReLU and GELU), nn.TransformerDecoderLayer
      (causal self-attention and cross-attention), timm's Attention (qkv split by reshape and
      permute), F.scaled_dot_product_attention (PyTorch 2), and a sequence-first MHA whose dimension
      0 is the sequence, not the batch (PyTorch 1.x); each at the opsets this PyTorch writes (14 and 17 with 1.x,
      14 and 18 with 2.x; `dynamo`: the dynamo exporter too). Writes REPO/NAME/1/model.onnx and
      REPO/cases.json: four requests each (1-3 rows, one length) with PyTorch's answer to each alone.
  onnx_attention.py check HOST:PORT CASES  sends each model's four requests at once, twice, and prints
      one line per model: the worst difference from PyTorch's answers, "equal" or "DIFFERENT".
"""
import json
import os
import sys
import threading
import urllib.request

D, H, T = 32, 4, 6


def export(repo, dynamo):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(0)

    class MHA(nn.Module):
        def __init__(s, batch_first=True):
            super().__init__()
            s.att = nn.MultiheadAttention(D, H, batch_first=batch_first)

        def forward(s, x, mask=None):
            return s.att(x, x, x, key_padding_mask=mask, need_weights=False)[0]

    class Encoder(nn.Module):
        def __init__(s, norm_first=False, act="relu"):
            super().__init__()
            layer = nn.TransformerEncoderLayer(D, H, 64, dropout=0.0, batch_first=True, norm_first=norm_first,
                                               activation=act)
            s.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

        def forward(s, x, mask):
            return s.enc(x, src_key_padding_mask=mask)

    class Decoder(nn.Module):
        def __init__(s):
            super().__init__()
            s.dec = nn.TransformerDecoderLayer(D, H, 64, dropout=0.0, batch_first=True)

        def forward(s, x, memory):
            t = x.shape[1]
            return s.dec(x, memory, tgt_mask=torch.triu(torch.full((t, t), float("-inf")), diagonal=1))

    class TimmAttention(nn.Module):
        def __init__(s):
            super().__init__()
            s.qkv, s.proj, s.scale = nn.Linear(D, 3 * D), nn.Linear(D, D), (D // H) ** -0.5

        def forward(s, x):
            B, N, C = x.shape
            q, k, v = s.qkv(x).reshape(B, N, 3, H, C // H).permute(2, 0, 3, 1, 4).unbind(0)
            a = ((q @ k.transpose(-2, -1)) * s.scale).softmax(dim=-1)
            return s.proj((a @ v).transpose(1, 2).reshape(B, N, C))

    class SDPA(nn.Module):
        def __init__(s):
            super().__init__()
            s.qkv, s.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)

        def forward(s, x):
            B, N, C = x.shape
            q, k, v = s.qkv(x).view(B, N, 3, H, C // H).permute(2, 0, 3, 1, 4)
            return s.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, N, C))

    def masks(n):
        m = torch.zeros(n, T, dtype=torch.bool)
        for i in range(n):
            m[i, T - 1 - i % 3:] = True  # each row its own padding
        return m

    def x(n):
        return torch.randn(n, T, D)

    def save(name, model, inputs, opset, use_dynamo=False):
        model.eval()
        names = list(inputs)
        os.makedirs(f"{repo}/{name}/1", exist_ok=True)
        kw = {"dynamo": use_dynamo} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
        if use_dynamo:
            kw["dynamic_shapes"] = {k: {0: torch.export.Dim("N", max=64), 1: torch.export.Dim("T", max=64)} for k in names}
        else:
            kw["dynamic_axes"] = {k: {0: "N", 1: "T"} for k in names + ["y"]}
        torch.onnx.export(model, tuple(inputs[k](2) for k in names), f"{repo}/{name}/1/model.onnx", input_names=names,
                          output_names=["y"], opset_version=opset, **kw)
        reqs = []
        for rows in (1, 2, 3, 1):
            req = {k: inputs[k](rows) for k in names}
            y = model(*[req[k] for k in names]).detach()  # with grad: not the fast path, which the exporter skips too
            reqs.append({"inputs": {k: [list(v.shape), "BOOL" if v.dtype == torch.bool else "FP32", v.flatten().tolist()]
                                    for k, v in req.items()}, "y": y.flatten().tolist()})
        cases[name] = reqs

    cases = {}
    two = int(torch.__version__.split(".")[0]) >= 2
    opsets = [14, 18] if two else [14, 17]
    for op in opsets:
        save(f"mha{op}", MHA(), {"x": x}, op)
        save(f"mha_mask{op}", MHA(), {"x": x, "mask": masks}, op)
        save(f"encoder{op}", Encoder(), {"x": x, "mask": masks}, op)
    save("encoder_prenorm_gelu", Encoder(True, "gelu"), {"x": x, "mask": masks}, opsets[-1])
    save("decoder", Decoder(), {"x": x, "memory": x}, opsets[0])
    save("timm", TimmAttention(), {"x": x}, opsets[0])
    if not two:  # PyTorch 2's legacy exporter fixes the key's length (dimension 0 here) in the graph
        save("seq_first", MHA(batch_first=False), {"x": x}, opsets[0])
    if two:
        save("sdpa", SDPA(), {"x": x}, 18)
        if dynamo:
            save("encoder_dynamo", Encoder(), {"x": x, "mask": masks}, 18, use_dynamo=True)
    json.dump(cases, open(f"{repo}/cases.json", "w"))
    print(" ".join(sorted(cases)))


def check(addr, path):
    cases = json.load(open(path))

    def infer(model, req):
        body = {"inputs": [{"name": k, "shape": s, "datatype": t, "data": d} for k, (s, t, d) in req["inputs"].items()]}
        r = urllib.request.Request(f"http://{addr}/v2/models/{model}/infer", json.dumps(body).encode(),
                                   {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(r, timeout=60) as resp:
                return json.loads(resp.read())["outputs"][0]["data"]
        except urllib.error.HTTPError as e:
            return e.read().decode()

    for model, reqs in sorted(cases.items()):
        worst, errors = 0.0, []
        for _ in range(2):
            got = [None] * len(reqs)

            def one(i):
                got[i] = infer(model, reqs[i])
            ts = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            for g, req in zip(got, reqs):
                if not isinstance(g, list) or len(g) != len(req["y"]):
                    errors.append(str(g)[:200])
                    continue
                worst = max(worst, max(abs(a - b) / (1 + abs(b)) for a, b in zip(g, req["y"])))
        ok = not errors and worst < 1e-4
        print(model, "worst %.2e" % worst, "equal" if ok else "DIFFERENT", *errors[:1])


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2], len(sys.argv) > 3 and sys.argv[3] == "dynamo")
    else:
        check(sys.argv[2], sys.argv[3])
