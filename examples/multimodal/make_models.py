"""make_models.py — the seed's multimodal case as three small models exported from PyTorch
(torch.onnx.export, opset 17, dynamic batch), one service each, chained by pipeline.yaml:

  text-encoder   input_ids INT64 [N, T], attention_mask INT64 [N, T] -> embedding FP32 [N, 16]
  image-encoder  image FP32 [N, 3, 16, 16]                          -> embedding FP32 [N, 16]
  fusion         text FP32 [N, 16], image FP32 [N, 16]               -> logits FP32 [N, 5]

usage: make_models.py OUT_DIR [--size small|medium]   (writes OUT_DIR/<model>/1/model.onnx, Triton's layout)
The module's Multimodal class is the three models end to end, for tests that compare answers.
`--size medium` takes the same tensors with wider encoders (a per-token MLP of width 1024 in the
text encoder, 32-64-128 channels in the image encoder): steps of about a millisecond here, for
timing a pipeline whose steps cost more than a hop.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class TextEncoder(nn.Module):
    def __init__(self, vocab=200, d=16, width=32, hidden=0):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width)) if hidden else nn.Identity()
        self.proj = nn.Linear(width, d)

    def forward(self, input_ids, attention_mask):
        m = attention_mask.to(torch.float32).unsqueeze(-1)
        pooled = (self.mlp(self.emb(input_ids)) * m).sum(1) / m.sum(1).clamp(min=1.0)
        return torch.tanh(self.proj(pooled))


class ImageEncoder(nn.Module):
    def __init__(self, d=16, channels=(8, 16)):
        super().__init__()
        layers = [nn.Conv2d(3, channels[0], 3, padding=1), nn.BatchNorm2d(channels[0]), nn.ReLU()]
        for a, b in zip(channels, channels[1:]):
            layers += [nn.MaxPool2d(2), nn.Conv2d(a, b, 3, padding=1), nn.ReLU()]
        self.conv = nn.Sequential(*layers)
        self.proj = nn.Linear(channels[-1], d)

    def forward(self, image):
        return torch.tanh(self.proj(F.adaptive_avg_pool2d(self.conv(image), 1).flatten(1)))


class Fusion(nn.Module):
    def __init__(self, d=16, classes=5):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * d, 32), nn.GELU(), nn.Linear(32, classes))

    def forward(self, text, image):
        return self.net(torch.cat([text, image], dim=1))


SIZES = {"small": ({}, {}), "medium": ({"width": 256, "hidden": 1024}, {"channels": (32, 64, 128)})}


class Multimodal(nn.Module):
    def __init__(self, size="small"):
        super().__init__()
        torch.manual_seed(7)
        text, image = SIZES[size]
        self.text, self.image, self.fusion = TextEncoder(**text).eval(), ImageEncoder(**image).eval(), Fusion().eval()

    def forward(self, input_ids, attention_mask, image):
        return self.fusion(self.text(input_ids, attention_mask), self.image(image))


def example_inputs(batch=2, seq=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 200, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, seq // 2:] = 0
    return ids, mask, torch.randn(batch, 3, 16, 16, generator=g)


def export(out, size="small"):
    m = Multimodal(size).eval()
    ids, mask, image = example_inputs()
    text = m.text(ids, mask)
    parts = [("text-encoder", m.text, (ids, mask), ["input_ids", "attention_mask"], {0: "batch", 1: "seq"}),
             ("image-encoder", m.image, (image,), ["image"], {0: "batch"}),
             ("fusion", m.fusion, (text, m.image(image)), ["text", "image"], {0: "batch"})]
    for name, mod, args, inputs, axes in parts:
        os.makedirs(os.path.join(out, name, "1"), exist_ok=True)
        output = "logits" if name == "fusion" else "embedding"
        with torch.no_grad():
            torch.onnx.export(mod, args, os.path.join(out, name, "1", "model.onnx"), opset_version=17,
                              input_names=inputs, output_names=[output],
                              dynamic_axes={**{i: axes for i in inputs}, output: {0: "batch"}})
    return m


if __name__ == "__main__":
    if len(sys.argv) not in (2, 4) or (len(sys.argv) == 4 and (sys.argv[2] != "--size" or sys.argv[3] not in SIZES)):
        sys.exit("usage: make_models.py OUT_DIR [--size small|medium]")
    export(sys.argv[1], sys.argv[3] if len(sys.argv) == 4 else "small")
