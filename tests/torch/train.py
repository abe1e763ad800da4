"""A plain PyTorch training loop with loom.torch's lines (marked): run alone it is a world of one;
under mpirun each rank trains its share of every global batch. Rank 0 saves the final weights
(--out) and prints one JSON line of what happened."""
import argparse
import json
import os
import signal
import sys
import time

import torch

import loom.torch as lt  # LOOM
from models import build

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="transformer")
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--global-batch", type=int, default=24)
ap.add_argument("--samples", type=int, default=512)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--momentum", type=float, default=0.9)
ap.add_argument("--compression", default="none")
ap.add_argument("--balance", default="static")
ap.add_argument("--out", default="")
ap.add_argument("--init-out", default="", help="where rank 0 saves the weights it starts from")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--device", default="cpu", help="cpu, cuda, or auto (loom.torch.device())")
ap.add_argument("--plain", action="store_true", help="no DistributedOptimizer: PyTorch's own step (a world of one)")
ap.add_argument("--ckpt-dir", default="")
ap.add_argument("--ckpt-every", type=int, default=None)
ap.add_argument("--signal-at", type=int, default=-1, help="rank 0 sends itself SIGUSR1 after this step")
ap.add_argument("--deterministic", action="store_true", help="PyTorch's deterministic kernels (a GPU's too)")
ap.add_argument("--fault", default="", help="test faults: mismatch | hang-at-3 | no-backward | unused")
ap.add_argument("--tensorboard", default="", help="a SummaryWriter's folder: loom.torch.log_to adds its figures")
a = ap.parse_args()

torch.set_num_threads(1)
if a.deterministic:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
lt.init()  # LOOM
torch.manual_seed(a.seed)
model, data, loss_fn = build(a.model, a.samples)
if a.fault == "mismatch" and lt.rank() == 1:
    model.head = torch.nn.Linear(64, 65) if hasattr(model, "head") else model
extra = torch.nn.Linear(4, 4) if a.fault == "unused" else None  # a branch that never runs
if extra is not None:
    model.add_module("unused_branch", extra)
dev = lt.device() if a.device == "auto" else torch.device(a.device)
model.to(dev)
sampler = lt.BalancedSampler(data, a.global_batch, seed=a.seed, balance=a.balance)  # LOOM
loader = torch.utils.data.DataLoader(data, batch_sampler=sampler)
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
comp = {"none": lt.Compression.none, "fp16": lt.Compression.fp16}.get(a.compression)
if comp is None and a.compression.startswith("powersgd"):
    comp = lt.Compression.powersgd(rank=2, start=5)
if not a.plain:
    opt = lt.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=comp)  # LOOM
lt.broadcast_parameters(model.state_dict(), root_rank=0)  # LOOM
if a.init_out and lt.rank() == 0:
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, a.init_out)

if a.tensorboard:
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter(a.tensorboard)
    lt.log_to(writer)  # LOOM: each rank's share, compute and exchange seconds beside the script's own
ckpt = None
if a.ckpt_dir:  # LOOM: checkpoints that a requeued job resumes from
    ckpt = lt.Checkpoint(a.ckpt_dir, model=model, optimizer=opt, sampler=sampler, every_steps=a.ckpt_every)
step, losses, shares, t0 = ckpt.restore() if ckpt else 0, [], [], time.perf_counter()
while step < a.steps:
    sampler.set_epoch(step // len(sampler))
    for x, y in loader:
        if a.fault == "hang-at-3" and step == 3 and lt.rank() == 1:
            time.sleep(600)
        x, y = x.to(dev), y.to(dev)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        if not (a.fault == "no-backward" and step == 2):
            loss.backward()
        opt.step()
        if step == a.signal_at and lt.rank() == 0:
            os.kill(os.getpid(), signal.SIGUSR1)
        if ckpt:
            ckpt.step()  # LOOM: writes when due; after SIGUSR1/SIGTERM writes and exits 75
        # the global batch's loss: each rank's mean, weighted by its share
        losses.append(lt.allreduce(loss.detach() * len(x) / a.global_batch, op=lt.Sum).item())
        shares.append(sampler.shares())
        step += 1
        if a.tensorboard and lt.rank() == 0:
            writer.add_scalar("train/loss", losses[-1], step)
        if step == a.steps:
            break
if lt.rank() == 0:
    if a.out:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, a.out)
    print(json.dumps({"world": lt.size(), "losses": losses, "shares": shares[-1] if shares else None, "first_shares": shares[0] if shares else None,
                      "seconds": time.perf_counter() - t0, "device": str(dev),
                      "stats": opt.loom_stats() if hasattr(opt, "loom_stats") else {}}))
sys.stdout.flush()
