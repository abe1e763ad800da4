"""A torchvision ResNet-18 on Fashion-MNIST: a plain PyTorch script; the lines that make it a
loom.torch program end in `# LOOM`. Alone it trains as one process; under
`srun --mpi=pmix --loom-bind=ring python3 resnet_fashion_mnist.py` (or mpirun) every rank trains
its share of each global batch, the shares following the ranks' measured speeds, and a
SIGUSR1/SIGTERM ends it with a checkpoint and exit 75 (torch-requeue.sbatch requeues it).

    python3 resnet_fashion_mnist.py --data /usr/share/datasets/fashion-mnist --epochs 2
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
import torchvision

import loom.torch as lt  # LOOM

ap = argparse.ArgumentParser()
ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
ap.add_argument("--epochs", type=int, default=2)
ap.add_argument("--global-batch", type=int, default=256)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: every epoch)")
ap.add_argument("--log-every", type=int, default=50, help="the loss every this many steps (and the first and last)")
ap.add_argument("--ckpt-dir", default=os.environ.get("LOOM_CKPT_DIR", "ckpt"))
a = ap.parse_args()


def idx(name, offset, shape):
    with gzip.open(os.path.join(a.data, name)) as f:
        return np.frombuffer(f.read()[offset:], dtype=np.uint8).reshape(shape)


x = torch.from_numpy(idx("train-images-idx3-ubyte.gz", 16, (-1, 1, 28, 28)).astype(np.float32) / 255.0)
y = torch.from_numpy(idx("train-labels-idx1-ubyte.gz", 8, (-1,)).astype(np.int64))
data = torch.utils.data.TensorDataset(x, y)

lt.init()  # LOOM: the ranks (a world of one without a launcher)
device = lt.device()  # LOOM: this rank's GPU (the plugin's choice), else the CPU
torch.manual_seed(0)
model = torchvision.models.resnet18(num_classes=10)
model.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)  # 28x28 grey images
model.maxpool = torch.nn.Identity()
model.to(device)
# BatchNorm's statistics are each rank's own (as under DistributedDataParallel).
sampler = lt.BalancedSampler(data, a.global_batch, shuffle=True, seed=0)  # LOOM: this rank's share
loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, num_workers=2)
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
opt = lt.DistributedOptimizer(opt, named_parameters=model.named_parameters())  # LOOM
ckpt = lt.Checkpoint(a.ckpt_dir, model=model, optimizer=opt, sampler=sampler, every_minutes=10)  # LOOM
start = ckpt.restore()  # LOOM: the step to go on from (0 on a first run)
if start == 0:
    lt.broadcast_parameters(model.state_dict(), root_rank=0)  # LOOM: every rank starts alike

step = start
for epoch in range(start // len(sampler), a.epochs):
    if step == a.steps:
        break
    sampler.set_epoch(epoch)
    model.train()
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)  # the mean over this rank's rows
        loss.backward()
        opt.step()
        ckpt.step()  # LOOM: a checkpoint when due; after SIGUSR1/SIGTERM one more, then exit 75
        step += 1
        last = step == a.steps
        if step == start + 1 or step % a.log_every == 0 or last:  # the same steps on every rank
            total = lt.allreduce(loss.detach() * len(xb) / a.global_batch, op=lt.Sum)  # LOOM: the global loss
            if lt.rank() == 0:
                print(f"epoch {epoch} step {step} loss {total.item():.4f} shares {sampler.shares()}", flush=True)
        if last:
            break
if lt.rank() == 0:
    torch.save(model.state_dict(), "resnet18-fashion-mnist.pt")
    print("saved resnet18-fashion-mnist.pt", file=sys.stderr)
