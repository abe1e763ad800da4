"""loom.torch.fully_shard on a plain PyTorch transformer LM (an embedding tied to the head, blocks of
nn.TransformerEncoderLayer, a parameter that gets no gradient): each block sharded, then the root,
with memory weights given per rank and uneven batch shares (BalancedSampler, static, from
LOOM_DEVICE_WEIGHT). After --steps steps of --optimizer (sgd or adamw) every rank's whole weights
(full_state_dict) equal one process's on the same global batches; memory_stats() holds this rank's
share of the state; bad calls are refused on every rank. With --checkpoint, a run saves after
--save-at steps and another world (other ranks, other weights) resumes from there. Rank 0 prints one JSON line per rank.

    mpirun -np 2 -x LOOM_DEVICE_WEIGHT ... python3 fsdp_test.py --shard-weights 2,1 --optimizer sgd
"""
import argparse
import copy
import json
import os
import signal
import sys

import torch
from torch import nn

import loom.torch as lt
from loom.torch import fsdp

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
ap.add_argument("--shard-weights", default="", help="one weight per rank (default: LOOM_DEVICE_MEMORY, else even)")
ap.add_argument("--global-batch", type=int, default=12)
ap.add_argument("--bf16", action="store_true", help="mp_policy: bf16 parameters, fp32 reduction")
ap.add_argument("--tolerance", type=float, default=1e-5)
ap.add_argument("--checkpoint", default="", help="a Checkpoint directory: resume from it; save there after --save-at steps")
ap.add_argument("--save-at", type=int, default=0)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--device", default="cpu", help="where the model computes (cuda: its collectives through NCCL where it can)")
ap.add_argument("--accumulate", type=int, default=1, help="batches (backward passes) per optimizer step")
ap.add_argument("--balance", default="static", help="BalancedSampler's: static (LOOM_DEVICE_WEIGHT) or dynamic")
ap.add_argument("--stall-in-gather", type=int, default=-1, help="the last rank stops (SIGSTOP) in a gather at this step")
a = ap.parse_args()


class LM(nn.Module):
    def __init__(self, vocab=61, d=32, layers=2, context=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(context, d) * 0.02)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        self.unused = nn.Parameter(torch.ones(3))  # never in the loss: no gradient

    def forward(self, x):
        h = self.tok(x) + self.pos[: x.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1]).to(x.device)
        for b in self.blocks:
            h = b(h, src_mask=mask)
        return self.head(self.norm(h))


def optimizer(params):
    if a.optimizer == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)


lt.init()
r, n = lt.rank(), lt.size()
torch.manual_seed(0)
data = torch.randint(0, 61, (a.global_batch * a.steps, 17))
dataset = torch.utils.data.TensorDataset(data[:, :-1], data[:, 1:])
sampler = lt.BalancedSampler(dataset, a.global_batch, shuffle=False, balance=a.balance, replan_every=5)
model = LM(layers=a.layers).to(a.device)
solo = copy.deepcopy(model)  # one process on the global batches, for comparison
# One process again, each global batch's gradient summed over the ranks' pieces: another order of
# the same additions, the scale of the rounding AdamW amplifies where a gradient is nearly zero
# (the attention's key bias has none at all).
pieces = copy.deepcopy(model)
sw = [float(x) for x in a.shard_weights.split(",")] if a.shard_weights else None
mp = lt.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if a.bf16 else None
for b in model.blocks:
    lt.fully_shard(b, shard_weights=sw, mp_policy=mp)
lt.fully_shard(model, shard_weights=sw, mp_policy=mp)
fails = []


def refused(what, call, words):
    try:
        call()
        fails.append(f"{what}: accepted")
    except ValueError as e:
        if words not in str(e):
            fails.append(f"{what}: {e}")


refused("fully_shard twice", lambda: lt.fully_shard(model), "already applied")
refused("a child after its parent", lambda: lt.fully_shard(model.norm), "already part of a sharded parent")
refused("a zero memory weight", lambda: lt.fully_shard(nn.Linear(2, 2), shard_weights=[0] * n), "positive")
refused("a negative memory weight", lambda: lt.fully_shard(nn.Linear(2, 2), shard_weights=[-1] * n), "positive")
tied = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
tied[1].weight = tied[0].weight
lt.fully_shard(tied[0])
refused("a parameter tied across two fully_shard calls", lambda: lt.fully_shard(tied[1]), "the same tensor as")
if n > 1:
    refused("ranks that disagree on a shape", lambda: lt.fully_shard(nn.Linear(2 + (r > 0), 2)), "has parameter")

opt = optimizer(model.parameters())
solo_opt = optimizer(solo.parameters())
pieces_opt = optimizer(pieces.parameters())


def reference_step(step):
    """The single process's step of global batch `step`, and the same summed over the pieces."""
    rows = data[step * a.global_batch:(step + 1) * a.global_batch].to(a.device)
    xs, ys = rows[:, :-1], rows[:, 1:]
    first, last = step % a.accumulate == 0, (step + 1) % a.accumulate == 0
    if first:
        solo_opt.zero_grad()
        pieces_opt.zero_grad()
    if a.bf16:
        with torch.autocast(torch.device(a.device).type, dtype=torch.bfloat16):
            solo_loss = nn.functional.cross_entropy(solo(xs).flatten(0, 1).float(), ys.flatten())
    else:
        solo_loss = nn.functional.cross_entropy(solo(xs).flatten(0, 1), ys.flatten())
    (solo_loss / a.accumulate).backward()
    at = 0
    for k in sampler.shares_at(step):
        piece = nn.functional.cross_entropy(pieces(xs[at:at + k]).flatten(0, 1), ys[at:at + k].flatten())
        (piece * k / a.global_batch / a.accumulate).backward()
        at += k
    if last:
        solo_opt.step()
        pieces_opt.step()


# A checkpoint written by another world (other ranks, other memory weights) resumes here.
ckpt = lt.Checkpoint(a.checkpoint, model=model, optimizer=opt, sampler=sampler) if a.checkpoint else None
start = ckpt.restore() if ckpt else 0
for step in range(start):
    reference_step(step)
first_shares = list(sampler.shares())
loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)
for step, (x, y) in enumerate(loader, start):
    if step == a.steps:
        break
    if step == a.stall_in_gather and r == n - 1:  # a rank that stops answering in the middle of a gather
        gather = fsdp.C.allgather
        fsdp.C.allgather = lambda *args: (os.kill(os.getpid(), signal.SIGSTOP), gather(*args))[1]
    if step % a.accumulate == 0:
        opt.zero_grad()
    x, y = x.to(a.device), y.to(a.device)
    loss = nn.functional.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
    (loss / a.accumulate).backward()  # gradient accumulation: the mean of the batches' steps
    if (step + 1) % a.accumulate == 0:
        opt.step()
    reference_step(step)
    if ckpt is not None and step + 1 == a.save_at:
        ckpt.save(step + 1, wait=True)

def rel_diff(got, want):
    worst, where = 0.0, ""
    for k, v in want.items():
        if k in got:
            d = ((got[k] - v).norm() / max(v.norm(), 1e-12)).item()
            if d > worst:
                worst, where = d, k
    return worst, where


whole = lt.full_state_dict(model)
want = {k: v.cpu() for k, v in solo.state_dict().items()}
missing = sorted(set(want) ^ set(whole))
if missing:
    fails.append(f"full_state_dict names differ: {missing[:5]}")
worst, where = rel_diff(whole, want)
order_gap, _ = rel_diff({k: v.cpu() for k, v in pieces.state_dict().items()}, want)
# SGD: within the tolerance; AdamW: also within 10x what another summation order makes.
tolerance = max(a.tolerance, 10 * order_gap) if a.optimizer == "adamw" else a.tolerance
if worst > tolerance:
    fails.append(f"weights {worst:.2e} apart relative (at {where}), tolerance {tolerance:.2e}")
if not torch.equal(whole["unused"], torch.ones(3)):
    fails.append("the parameter without a gradient moved")
stats = lt.memory_stats(model, opt)
total = sum(p.numel() for p in solo.parameters())
# reshard_after_forward: nothing gathered is kept after a forward, and backward gathered again.
block = model.blocks[0]
if any(k in block.linear1.__dict__ for k in ("weight", "bias")) or fsdp._Live.by_storage:
    fails.append("gathered parameters outlive the forward")
if n > 1 and block._loom_shard.regathers < a.steps - start:
    fails.append(f"backward gathered the block's parameters again {block._loom_shard.regathers} times in {a.steps - start} steps")
if n > 1 and os.environ.get("LOOM_FSDP_PREFETCH") == "1" and fsdp._Prefetch.used < len(model.blocks) * (a.steps - start - 1):
    fails.append(f"the next block's gather was prefetched {fsdp._Prefetch.used} times in {a.steps - start} forwards")
held = lt.allgather_object(stats["param_bytes"])
if sum(held) != 4 * total:
    fails.append(f"param_bytes sum to {sum(held)}, not the model's {4 * total}")
weights = fsdp._memory_weight(sw)
for k, (b, w) in enumerate(zip(held, weights)):  # each parameter split by the weights: rounding only
    if abs(b / (4 * total) - w / sum(weights)) > 0.01:
        fails.append(f"rank {k} holds {b} of {4 * total} bytes, not in proportion to the memory weights {weights}")
mine = {"rank": r, "world": n, "route": lt.uneven_route(), "memory_weights": weights, "shares": first_shares, "last_shares": sampler.shares_at(a.steps - 1), "max_rel_diff": worst, "at": where,
        "another_order": order_gap, "memory": stats, "model_bytes": 4 * total, "fails": fails}
everyone = lt.allgather_object(mine)  # one writer: lines of several ranks never interleave
if r == 0:
    for line in everyone:
        print(json.dumps(line), flush=True)
sys.exit(1 if any(line["fails"] for line in everyone) else 0)
