"""A small causal transformer language model over the bytes of a text file: a plain PyTorch
script; the loom.torch lines end in `# LOOM`. Gradients travel compressed by PowerSGD (rank 4,
after 100 plain steps) here, to show the option; drop `compression=` for exact fp32 sums.

    mpirun -np 2 python3 transformer_lm.py --text /usr/share/common-licenses/GPL-3 --steps 300
"""
import argparse
import os

import torch

import loom.torch as lt  # LOOM

ap = argparse.ArgumentParser()
ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--context", type=int, default=64)
ap.add_argument("--global-batch", type=int, default=64)
ap.add_argument("--log-every", type=int, default=50, help="the loss every this many steps (and the first and last)")
ap.add_argument("--ckpt-dir", default=os.environ.get("LOOM_CKPT_DIR", "ckpt-lm"))
a = ap.parse_args()


class LM(torch.nn.Module):
    def __init__(self, vocab=256, d=128, heads=4, layers=4, context=64):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Parameter(torch.zeros(context, d))
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True, norm_first=True)
        self.body, self.head = torch.nn.TransformerEncoder(layer, layers), torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1))

    def forward(self, x):
        return self.head(self.body(self.tok(x) + self.pos[: x.shape[1]], mask=self.mask[: x.shape[1], : x.shape[1]]))


raw = torch.tensor(list(open(a.text, "rb").read()), dtype=torch.long)
n = (len(raw) - 1) // a.context
windows = torch.utils.data.TensorDataset(raw[: n * a.context].view(n, a.context), raw[1: n * a.context + 1].view(n, a.context))

lt.init()  # LOOM
device = lt.device()  # LOOM
torch.manual_seed(0)
model = LM(context=a.context).to(device)
sampler = lt.BalancedSampler(windows, a.global_batch, seed=0)  # LOOM
loader = torch.utils.data.DataLoader(windows, batch_sampler=sampler)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
opt = lt.DistributedOptimizer(opt, named_parameters=model.named_parameters(),  # LOOM
                              compression=lt.Compression.powersgd(rank=4, start=100))  # LOOM
ckpt = lt.Checkpoint(a.ckpt_dir, model=model, optimizer=opt, sampler=sampler, every_steps=100)  # LOOM
step = start = ckpt.restore()  # LOOM
if step == 0:
    lt.broadcast_parameters(model.state_dict(), root_rank=0)  # LOOM
while step < a.steps:
    sampler.set_epoch(step // len(sampler))
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        ckpt.step()  # LOOM
        step += 1
        if (step == start + 1 or step % a.log_every == 0 or step == a.steps) and lt.rank() == 0:
            st = opt.loom_stats()  # LOOM: bytes sent against plain fp32's
            print(f"step {step} loss {loss.item():.3f} sent {st['last_bytes']} of {st['plain_bytes']} bytes", flush=True)
        if step == a.steps:
            break
