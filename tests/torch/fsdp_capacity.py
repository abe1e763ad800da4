"""The largest model that trains under a memory cap: loom.torch.fully_shard (state split by the
ranks' memory) against PyTorch's FSDP2 (torch.distributed.fsdp.fully_shard over gloo, split
evenly), on the same ranks. Each rank's emulated device memory is LOOM_EMULATE_MEMORY (bytes; the
same in both modes, and given to loom.torch as LOOM_DEVICE_MEMORY, as srun --loom-bind exports a
GPU's). Transformer LMs of 1, 2, ... blocks each take one AdamW step; a model fits when every
rank's training state (its parameter shards, their gradients and AdamW's moments) is within its
cap. Rank 0 prints one JSON line: the largest that fits, in blocks and parameters.

    mpirun -np 1 -x LOOM_EMULATE_MEMORY=33554432 python3 fsdp_capacity.py --mode loom : \\
           -np 1 -x LOOM_EMULATE_MEMORY=16777216 python3 fsdp_capacity.py --mode loom
"""
import argparse
import json
import os

import torch
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=("loom", "fsdp2"), required=True)
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--max-layers", type=int, default=64)
a = ap.parse_args()
torch.set_num_threads(1)
cap = int(os.environ["LOOM_EMULATE_MEMORY"])


class LM(nn.Module):
    def __init__(self, layers, vocab=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, a.d)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(a.d, 4, 4 * a.d, dropout=0.0, batch_first=True)
                                    for _ in range(layers))
        self.head = nn.Linear(a.d, vocab, bias=False)

    def forward(self, x):
        h = self.tok(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


if a.mode == "loom":
    os.environ["LOOM_DEVICE_MEMORY"] = str(cap)
    import loom.torch as lt
    lt.init()
    rank, shard, gather = lt.rank(), lt.fully_shard, lt.allgather_object

    def held(model, opt):
        s = lt.memory_stats(model, opt)
        return s["param_bytes"] + s["grad_bytes"] + s["optimizer_bytes"]
else:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard as shard
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29518")
    dist.init_process_group("gloo", rank=rank, world_size=size)

    def gather(x):
        out = [None] * size
        dist.all_gather_object(out, x)
        return out

    def local_bytes(t):
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    def held(model, opt):
        total = 0
        for p in model.parameters():
            total += local_bytes(p) + (local_bytes(p.grad) if p.grad is not None else 0)
            total += sum(local_bytes(v) for v in opt.state.get(p, {}).values() if torch.is_tensor(v) and v.dim() > 0)
        return total

caps = gather(cap)
best = None
for layers in range(1, a.max_layers + 1):
    torch.manual_seed(0)
    model = LM(layers)
    params = sum(p.numel() for p in model.parameters())
    for b in model.blocks:
        shard(b)
    shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 512, (2, 16))
    nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
    opt.step()
    fits = all(gather(held(model, opt) <= cap))
    if not fits:
        break
    best = {"layers": layers, "parameters": params}
if rank == 0:
    print(json.dumps({"mode": a.mode, "caps_bytes": caps, "largest": best, "torch": torch.__version__}), flush=True)
if a.mode == "fsdp2":
    dist.destroy_process_group()
