"""Models and data for the loom.torch tests: a torchvision ResNet-18 on Fashion-MNIST and a small
causal transformer language model, written as a user would (nothing of Loom's in here). Both are
deterministic per sample (GroupNorm, no dropout), so a sum of per-rank gradients weighted by the
shares equals the single-process gradient of the global batch."""
import gzip
import os

import numpy as np
import torch


def fashion_mnist(n, data_dir=None):
    d = data_dir or os.environ.get("LOOM_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
    with gzip.open(os.path.join(d, "t10k-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read()[16:16 + n * 784], dtype=np.uint8).reshape(n, 1, 28, 28)
    with gzip.open(os.path.join(d, "t10k-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read()[8:8 + n], dtype=np.uint8)
    return torch.utils.data.TensorDataset(torch.from_numpy(x.astype(np.float32) / 255.0),
                                          torch.from_numpy(y.astype(np.int64)))


def resnet():
    import torchvision
    m = torchvision.models.resnet18(num_classes=10, norm_layer=lambda c: torch.nn.GroupNorm(8, c))
    m.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    m.maxpool = torch.nn.Identity()
    return m


class TinyLM(torch.nn.Module):
    """A causal transformer language model over bytes."""

    def __init__(self, vocab=64, d=64, heads=4, layers=2, context=32, width=None):
        super().__init__()
        d = width or d
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.zeros(context, d))
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1))

    def forward(self, x):
        t = x.shape[1]
        return self.head(self.body(self.tok(x) + self.pos[:t], mask=self.mask[:t, :t]))


def token_windows(n, context=32, vocab=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, context + 1), generator=g)
    return torch.utils.data.TensorDataset(x[:, :-1], x[:, 1:])


def text_windows(n, context=32, path="/usr/share/common-licenses/GPL-3"):
    raw = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
    starts = torch.arange(0, len(raw) - context - 1, (len(raw) - context - 1) // n)[:n]
    x = torch.stack([raw[s:s + context + 1] for s in starts.tolist()])
    return torch.utils.data.TensorDataset(x[:, :-1], x[:, 1:])


def build(kind, n):
    """(model, dataset, loss function) for 'resnet' or 'transformer'."""
    if kind == "resnet":
        return resnet(), fashion_mnist(n), torch.nn.functional.cross_entropy
    if kind == "transformer":
        def lm_loss(logits, y):
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        return TinyLM(), token_windows(n), lm_loss
    if kind == "textlm":  # the same transformer over a real text's bytes: a loss that falls
        def lm_loss(logits, y):
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        return TinyLM(vocab=256), text_windows(n), lm_loss
    raise SystemExit(f"unknown model {kind}")
