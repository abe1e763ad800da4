"""Sharded training speed: loom.torch.fully_shard against PyTorch's FSDP2 (torch.distributed.fsdp.
fully_shard over gloo) on the same ranks, threads, model (a transformer LM: each block sharded,
then the root), data and global batch; AdamW. loom.torch splits each batch by LOOM_DEVICE_WEIGHT
(BalancedSampler's static shares), FSDP2 evenly; LOOM_EMULATE_SPEED slows a rank alike in both.
Run under mpirun (Open MPI's variables give
torch.distributed its rank and world); rank 0 prints one JSON line: samples/s after the warm-up
steps.

    mpirun -np 2 python3 bench_fsdp.py --mode loom|fsdp2
"""
import argparse
import json
import os
import time

import torch
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=("loom", "fsdp2"), required=True)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--global-batch", type=int, default=16)
ap.add_argument("--context", type=int, default=64)
ap.add_argument("--d", type=int, default=256)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--threads", type=int, default=1)
a = ap.parse_args()
torch.set_num_threads(a.threads)


class LM(nn.Module):
    def __init__(self, vocab=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, a.d)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(a.d, 4, 4 * a.d, dropout=0.0, batch_first=True)
                                    for _ in range(a.layers))
        self.head = nn.Linear(a.d, vocab, bias=False)

    def forward(self, x):
        h = self.tok(x)
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        for b in self.blocks:
            h = b(h, src_mask=mask)
        return self.head(h)


torch.manual_seed(0)
model = LM()
# A slow device, emulated alike in both modes (LOOM_EMULATE_SPEED, in (0, 1]): each block's and the
# head's compute, forward and backward, takes 1/speed as long, layer by layer as on a slow GPU (so
# each layer's collectives wait on it). The extra time is slept: per row, as the module's forward
# and backward took per row unsharded here (the best of 3 probes).
speed = float(os.environ.pop("LOOM_EMULATE_SPEED", "1"))  # emulated here alike for both, not by loom.torch too


class _Clock(torch.autograd.Function):
    """The identity; its backward calls `call` (at a module's output: its backward begins; at its
    input: its backward ends)."""

    @staticmethod
    def forward(ctx, x, call):
        ctx.call = call
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        ctx.call()
        return g, None


def slowed(mod, factor):
    forward, fwd, bwd, probing = mod.forward, [], [], [True]

    def run(x, *args, **kw):
        rows = x.shape[0]
        if probing[0]:
            begin = [0.0]
            x = _Clock.apply(x, lambda: bwd.append((time.perf_counter() - begin[0]) / rows))
            t = time.perf_counter()
            out = forward(x, *args, **kw)
            fwd.append((time.perf_counter() - t) / rows)
            return _Clock.apply(out, lambda: begin.__setitem__(0, time.perf_counter()))
        time.sleep(rows * min(fwd) * factor)
        return forward(_Clock.apply(x, lambda: time.sleep(rows * min(bwd) * factor)), *args, **kw)

    mod.forward = run
    return probing


if speed < 1.0:
    probes = [slowed(m, 1.0 / speed - 1.0) for m in list(model.blocks) + [model.head]]
    probe = torch.randint(0, 512, (8, a.context))
    for _ in range(3):
        model(probe).sum().backward()
    model.zero_grad(set_to_none=True)
    for p in probes:
        p[0] = False
data = torch.randint(0, 512, (a.global_batch * (a.steps + a.warmup), a.context + 1))
if a.mode == "loom":
    import loom.torch as lt
    lt.init()
    rank, size = lt.rank(), lt.size()
    for b in model.blocks:
        lt.fully_shard(b)
    lt.fully_shard(model)
    ds = torch.utils.data.TensorDataset(data[:, :-1], data[:, 1:])
    sampler = lt.BalancedSampler(ds, a.global_batch, shuffle=False, balance="static")
    batches = iter(torch.utils.data.DataLoader(ds, batch_sampler=sampler))
else:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=rank, world_size=size)
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    per = a.global_batch // size

    def even():
        for s in range(a.steps + a.warmup):
            rows = data[s * a.global_batch + rank * per: s * a.global_batch + (rank + 1) * per]
            yield rows[:, :-1], rows[:, 1:]
    batches = even()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
t0 = None
for step in range(a.steps + a.warmup):
    if step == a.warmup:
        t0 = time.perf_counter()
    x, y = next(batches)
    opt.zero_grad()
    nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
    opt.step()
seconds = time.perf_counter() - t0
if rank == 0:
    print(json.dumps({"mode": a.mode, "ranks": size, "threads": a.threads, "samples_per_s": a.steps * a.global_batch / seconds,
                      "torch": torch.__version__}), flush=True)
if a.mode == "fsdp2":
    import torch.distributed as dist
    dist.destroy_process_group()
