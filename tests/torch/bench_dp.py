"""One rank of the loom.torch benchmark: --mode loom (DistributedOptimizer + BalancedSampler) or
--mode ddp (PyTorch's DistributedDataParallel over gloo, the global batch split evenly, ranks
from mpirun's OMPI_COMM_WORLD_* variables), or --mode solo (one process, no communication). The
same model, data, global batch and steps; LOOM_EMULATE_SPEED slows a rank alike in every mode
(its forward and backward take 1/speed as long). Rank 0 prints one JSON line: samples/s over the
timed steps and the mean step-time breakdown (compute, exposed communication, update)."""
import argparse
import json
import os
import time

import torch

from models import build

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=["loom", "ddp", "solo"], required=True)
ap.add_argument("--model", default="transformer")
ap.add_argument("--global-batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--warmup", type=int, default=10)
ap.add_argument("--balance", default="dynamic")
ap.add_argument("--lr", type=float, default=0.01)
ap.add_argument("--powersgd", default="", help="RANK,START: PowerSGD (loom.torch's, or DDP's powerSGD_hook)")
ap.add_argument("--bucket-mb", type=float, default=None, help="loom.torch's bucket size (default: its own)")
a = ap.parse_args()
torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
speed = float(os.environ.get("LOOM_EMULATE_SPEED", "1"))

if a.mode == "loom":
    import loom.torch as lt
    lt.init()
    rank, size = lt.rank(), lt.size()
elif a.mode == "ddp":
    import torch.distributed as dist
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=size)
else:
    rank, size = 0, 1

torch.manual_seed(0)
model, data, loss_fn = build(a.model, 4096)
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
if a.mode == "loom":
    sampler = lt.BalancedSampler(data, a.global_batch, balance=a.balance)
    kw = {"bucket_mb": a.bucket_mb} if a.bucket_mb is not None else {}
    if a.powersgd:
        r, s0 = (int(v) for v in a.powersgd.split(","))
        kw["compression"] = lt.Compression.powersgd(rank=r, start=s0)
    opt = lt.DistributedOptimizer(opt, named_parameters=model.named_parameters(), **kw)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler)
    os.environ.pop("LOOM_EMULATE_SPEED", None)  # loom.torch emulates it itself (read at DistributedOptimizer)
else:
    share = a.global_batch // size
    loader = torch.utils.data.DataLoader(torch.utils.data.Subset(data, range(rank, len(data), size)), batch_size=share,
                                         drop_last=True)
    if a.mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
        if a.powersgd:
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
            r, s0 = (int(v) for v in a.powersgd.split(","))
            model.register_comm_hook(psgd.PowerSGDState(process_group=None, matrix_approximation_rank=r,
                                                        start_powerSGD_iter=s0), psgd.powerSGD_hook)


def ddp_powersgd_bytes(params, r):
    """What powerSGD_hook sends per step once compressing: each matrix (dim 0 by the rest) as P and Q
    where that is under half its size, the rest whole (2 ranks: a ring sends the payload once)."""
    n_floats = 0
    for p in params:
        if p.dim() <= 1:
            n_floats += p.numel()
            continue
        rows, cols = p.shape[0], p.numel() // p.shape[0]
        n_floats += (rows + cols) * r if p.numel() > 2 * (rows + cols) * r else p.numel()
    return 4 * n_floats

times = {"compute": 0.0, "comm": 0.0, "update": 0.0}
losses = []
step, t_start = 0, None
while step < a.warmup + a.steps:
    for x, y in loader:
        if step == a.warmup:
            t_start = time.perf_counter()
            times = {k: 0.0 for k in times}
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        if a.mode != "loom" and speed < 1:  # a slow device: forward, then backward, 1/speed as long
            time.sleep((time.perf_counter() - t0) * 3 * (1 / speed - 1))
        losses.append(loss.item())
        loss.backward()  # DDP: the allreduce overlaps this, and what is exposed ends it
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        if a.mode == "loom":
            st = opt.loom_stats()
            times["compute"] += st["compute_s"]
            times["comm"] += st["exchange_s"]
            times["update"] += (t2 - t1) - st["exchange_s"]
        else:
            times["compute"] += t1 - t0
            times["update"] += t2 - t1
        step += 1
        if step == a.warmup + a.steps:
            break
elapsed = time.perf_counter() - t_start
if rank == 0:
    out = {"mode": a.mode, "model": a.model, "ranks": size, "samples_per_s": a.steps * a.global_batch / elapsed,
           **{f"{k}_ms": 1000 * v / a.steps for k, v in times.items()}}
    if a.mode == "loom":
        out["shares"] = sampler.shares()
        out["bytes_per_step"] = opt.loom_stats()["last_bytes"]
    elif a.mode == "ddp" and a.powersgd:
        out["bytes_per_step"] = ddp_powersgd_bytes(list(model.parameters()), int(a.powersgd.split(",")[0]))
    out["losses_every_10"] = [round(sum(losses[i:i + 10]) / len(losses[i:i + 10]), 4) for i in range(0, len(losses), 10)]
    print(json.dumps(out), flush=True)
if a.mode == "ddp":
    dist.destroy_process_group()
