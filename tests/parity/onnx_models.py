"""onnx_models.py — small models of the families loom-serve's ONNX executor must run (an MLP, a
ResNet-style CNN with BatchNorm, a segmenter's decoder (transposed convolutions, upsampling), a GRU/LSTM/RNN tagger, a BERT with a padding mask, a GPT-2 block with a causal mask, an
encoder of PyTorch's own nn.TransformerEncoderLayer with a key padding mask), random weights from a fixed seed, exported by PyTorch's own torch.onnx.export with a
dynamic batch. Used by onnx_parity.py; runnable alone: onnx_models.py OUTDIR OPSET|default [FAMILY...]
("default": torch.onnx.export as a user calls it, no opset named: PyTorch 2's dynamo exporter)."""
import contextlib
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x.flatten(1))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, groups=2, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride), nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 5, 1, 2, dilation=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.l1 = Block(8, 8, 1)
        self.l2 = Block(8, 16, 2)
        self.dil = nn.Conv2d(16, 16, 3, 1, 2, dilation=2)
        self.pool = nn.AvgPool2d(2, 1, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.l2(self.l1(self.stem(x)))
        x = self.pool(F.relu(self.dil(F.pad(x, (1, 0, 0, 1)))))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.log_softmax(self.fc(x), dim=1)


class UNet(nn.Module):
    """A segmenter's decoder: strided and grouped transposed convolutions, nearest and bilinear
    upsampling, a pixel shuffle, instance norm and the activations detectors use."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, 2, 1)
        self.norm = nn.InstanceNorm2d(8, affine=True)
        self.up = nn.ConvTranspose2d(8, 8, 4, 2, 1)
        self.up2 = nn.ConvTranspose2d(8, 4, 3, 2, 1, output_padding=1, groups=4, dilation=1)
        self.expand = nn.Conv2d(4, 12, 3, 1, 1)
        self.head = nn.Conv2d(6, 2, 1)

    def forward(self, x):
        d = F.leaky_relu(self.norm(self.down(x)), 0.1)
        u = F.hardswish(self.up(d)) + F.interpolate(d, scale_factor=2.0, mode="nearest")
        u = u + torch.sigmoid(F.interpolate(d, scale_factor=2.0, mode="bilinear", align_corners=False))
        y = F.pixel_shuffle(self.expand(self.up2(u)), 2)
        z = F.interpolate(x, scale_factor=4.0, mode="bilinear", align_corners=True)
        return self.head(torch.cat([y, z], 1))


class Recurrent(nn.Module):
    """A sequence tagger: a 1-D convolution and pooling over time, a bidirectional GRU, a
    two-layer LSTM, then a tanh RNN run backward."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(6, 6, 3, padding=1)
        self.gru = nn.GRU(6, 8, batch_first=True, bidirectional=True)
        self.lstm = nn.LSTM(16, 8, num_layers=2, batch_first=True)
        self.rnn = nn.RNN(8, 5, batch_first=True)
        self.out = nn.Linear(5, 3)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.conv(x.transpose(1, 2))), 3, 1, 1).transpose(1, 2)
        y, _ = self.gru(x)
        y, _ = self.lstm(y)
        y, _ = self.rnn(torch.flip(y, [1]))
        return self.out(y)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.dk).transpose(1, 2)

    def forward(self, x, bias):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dk) + bias
        y = torch.matmul(torch.softmax(s, dim=-1), v)
        b, _, t, _ = y.shape
        return self.o(y.transpose(1, 2).reshape(b, t, self.h * self.dk))


class Bert(nn.Module):
    """BERT as Hugging Face writes it: word, position and type embeddings, post-LN layers with
    erf GELU, an additive padding mask from attention_mask, a tanh pooler."""

    def __init__(self, vocab=100, d=32, heads=4, layers=2, maxlen=16):
        super().__init__()
        self.word, self.pos, self.typ = nn.Embedding(vocab, d), nn.Embedding(maxlen, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.att = nn.ModuleList([Attention(d, heads) for _ in range(layers)])
        self.ln1 = nn.ModuleList([nn.LayerNorm(d, eps=1e-12) for _ in range(layers)])
        self.ff = nn.ModuleList([nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(layers)])
        self.ln2 = nn.ModuleList([nn.LayerNorm(d, eps=1e-12) for _ in range(layers)])
        self.pool = nn.Linear(d, d)

    def forward(self, input_ids, attention_mask):
        t = input_ids.shape[1]
        pos = torch.arange(t, dtype=torch.long).unsqueeze(0)
        x = self.ln(self.word(input_ids) + self.pos(pos) + self.typ(torch.zeros_like(input_ids)))
        bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        for att, ln1, ff, ln2 in zip(self.att, self.ln1, self.ff, self.ln2):
            x = ln1(x + att(x, bias))
            x = ln2(x + ff(x))
        return x, torch.tanh(self.pool(x[:, 0]))


class Gpt2Block(nn.Module):
    """A GPT-2 block as Hugging Face writes it: pre-LN, fused QKV split, the causal mask from a
    lower-triangular buffer through where(), tanh GELU spelled out, then the tied-style head."""

    def __init__(self, vocab=96, d=32, heads=4, maxlen=16):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(maxlen, d)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(maxlen, maxlen, dtype=torch.bool)).view(1, 1, maxlen, maxlen))

    def gelu(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    def forward(self, input_ids):
        b, t = input_ids.shape
        x = self.wte(input_ids) + self.wpe(torch.arange(0, t, dtype=torch.long).unsqueeze(0))
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=2)
        q, k, v = [z.view(b, t, self.h, self.dk).transpose(1, 2) for z in (q, k, v)]
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dk)
        s = torch.where(self.tril[:, :, :t, :t], s, torch.tensor(torch.finfo(s.dtype).min))
        y = torch.matmul(F.softmax(s, dim=-1), v).transpose(1, 2).contiguous().view(b, t, -1)
        x = x + self.proj(y)
        x = x + self.out(self.gelu(self.fc(self.ln2(x))))
        return self.head(self.lnf(x))


class Encoder(nn.Module):
    """PyTorch's own nn.TransformerEncoderLayer (batch first), two layers, with a key padding mask."""

    def __init__(self, d=32, heads=4, layers=2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x, mask):
        return self.enc(x, src_key_padding_mask=mask)


def build(name):
    torch.manual_seed({"mlp": 1, "resnet": 2, "bert": 3, "gpt2": 4, "encoder": 5, "unet": 6, "rnn": 7, "bert_wide": 8}[name])
    if name == "mlp":
        return Mlp().eval(), {"input": torch.randn(3, 1, 28, 28)}
    if name == "resnet":
        m = ResNet()
        for mod in m.modules():  # BatchNorm statistics that are not the identity
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.data.uniform_(0.5, 1.5)
                mod.bias.data.uniform_(-0.2, 0.2)
        return m.eval(), {"image": torch.randn(2, 3, 16, 16)}
    if name == "unet":
        m = UNet()
        m.norm.weight.data.uniform_(0.5, 1.5)
        m.norm.bias.data.uniform_(-0.2, 0.2)
        return m.eval(), {"image": torch.randn(2, 3, 16, 16)}
    if name == "rnn":
        return Recurrent().eval(), {"x": torch.randn(2, 7, 6)}
    if name in ("bert", "bert_wide"):  # bert_wide: one layer 128 wide, weights the int8 GEMMs take
        ids = torch.randint(0, 100, (2, 12))
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[1, 8:] = 0
        return (Bert() if name == "bert" else Bert(d=128, layers=1)).eval(), {"input_ids": ids, "attention_mask": mask}
    if name == "encoder":
        pad = torch.zeros(2, 12, dtype=torch.bool)
        pad[1, 9:] = True
        return Encoder().eval(), {"x": torch.randn(2, 12, 32), "mask": pad}
    return Gpt2Block().eval(), {"input_ids": torch.randint(0, 96, (2, 10))}


OUTPUTS = {"mlp": ["logits"], "resnet": ["log_probs"], "bert": ["last_hidden_state", "pooler_output"],
           "bert_wide": ["last_hidden_state", "pooler_output"],
           "gpt2": ["logits"], "encoder": ["y"], "unet": ["mask"], "rnn": ["tags"]}


def export(name, path, opset):
    """opset None: torch.onnx.export's own default, as a user calls it (PyTorch 2.9+: the dynamo
    exporter, its opset, the weights in PATH.data beside the file)."""
    model, feeds = build(name)
    # A dynamic sequence length too; torch.export fixes an RNN's (its loop is unrolled).
    seq = ("bert", "gpt2", "encoder", "rnn") if opset else ("bert", "gpt2", "encoder")
    axes = {k: {0: "batch", 1: "sequence"} if name in seq else {0: "batch"} for k in feeds}
    for o in OUTPUTS[name]:
        axes[o] = {0: "batch", 1: "sequence"} if name in ("encoder", "rnn") and name in seq else {0: "batch"}
    legacy = {"opset_version": opset, "do_constant_folding": True} if opset else {}
    # Under no_grad PyTorch 1.13 traces nn.TransformerEncoderLayer's fast path, which no opset exports.
    with torch.no_grad() if name != "encoder" or not opset else contextlib.nullcontext():
        torch.onnx.export(model, tuple(feeds.values()), path, input_names=list(feeds), output_names=OUTPUTS[name],
                          dynamic_axes=axes, **legacy)
    return model


def write_inputs(name, folder):
    """The family's inputs as raw little-endian files in `folder`, and `folder`/inputs: one
    NAME:DTYPE:SHAPE:FILE spec each, as onnx_run takes them."""
    dtypes = {torch.float32: "float32", torch.int64: "int64", torch.bool: "bool"}
    _, feeds = build(name)
    specs = []
    for k, v in feeds.items():
        v.numpy().tofile(f"{folder}/{k}.in")
        specs.append(f"{k}:{dtypes[v.dtype]}:{'x'.join(map(str, v.shape))}:{folder}/{k}.in")
    open(f"{folder}/inputs", "w").write(" ".join(specs))


if __name__ == "__main__":
    # onnx_models.py OUTDIR OPSET|default [FAMILY...]
    out, opset = sys.argv[1], None if sys.argv[2] == "default" else int(sys.argv[2])
    os.makedirs(out, exist_ok=True)
    for n in sys.argv[3:] or ("mlp", "resnet", "bert", "gpt2", "encoder", "unet", "rnn"):
        export(n, os.path.join(out, f"{n}.onnx"), opset)
