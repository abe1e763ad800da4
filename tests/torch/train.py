"""A plain PyTorch training loop with loom.torch's lines (marked): run alone it is a world of one;
under mpirun each rank trains its share of every global batch. Rank 0 saves the final weights
(--out) and prints one JSON line of what happened."""
import argparse
import json
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
ap.add_argument("--fault", default="", help="test faults: mismatch | hang-at-3 | no-backward | unused")
a = ap.parse_args()

torch.set_num_threads(1)
lt.init()  # LOOM
torch.manual_seed(a.seed)
model, data, loss_fn = build(a.model, a.samples)
if a.fault == "mismatch" and lt.rank() == 1:
    model.head = torch.nn.Linear(64, 65) if hasattr(model, "head") else model
extra = torch.nn.Linear(4, 4) if a.fault == "unused" else None  # a branch that never runs
if extra is not None:
    model.add_module("unused_branch", extra)
sampler = lt.BalancedSampler(data, a.global_batch, seed=a.seed, balance=a.balance)  # LOOM
loader = torch.utils.data.DataLoader(data, batch_sampler=sampler)
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
comp = {"none": lt.Compression.none, "fp16": lt.Compression.fp16}.get(a.compression)
if comp is None and a.compression.startswith("powersgd"):
    comp = lt.Compression.powersgd(rank=2, start=5)
opt = lt.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=comp)  # LOOM
lt.broadcast_parameters(model.state_dict(), root_rank=0)  # LOOM
if a.init_out and lt.rank() == 0:
    torch.save(model.state_dict(), a.init_out)

step, losses, shares, t0 = 0, [], [], time.perf_counter()
while step < a.steps:
    sampler.set_epoch(step // len(sampler))
    for x, y in loader:
        if a.fault == "hang-at-3" and step == 3 and lt.rank() == 1:
            time.sleep(600)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        if not (a.fault == "no-backward" and step == 2):
            loss.backward()
        opt.step()
        # the global batch's loss: each rank's mean, weighted by its share
        losses.append(lt.allreduce(loss.detach() * len(x) / a.global_batch, op=lt.Sum).item())
        shares.append(sampler.shares())
        step += 1
        if step == a.steps:
            break
if lt.rank() == 0:
    if a.out:
        torch.save(model.state_dict(), a.out)
    print(json.dumps({"world": lt.size(), "losses": losses, "shares": shares[-1], "first_shares": shares[0],
                      "seconds": time.perf_counter() - t0, "stats": opt.loom_stats()}))
sys.stdout.flush()
