"""The collectives on tensors and objects, on every rank of a world (alone, or under mpirun):
allreduce (Average and Sum; float32, float64 and integers), broadcast_parameters,
broadcast_optimizer_state, allgather_object, broadcast_object, and the errors of a bad call."""
import sys

import torch

import loom.torch as lt

lt.init()
r, n = lt.rank(), lt.size()
fails = []


def check(what, ok):
    if not ok:
        fails.append(what)


t = torch.tensor([1.0, 2.0]) * (r + 1)
total = sum(range(1, n + 1))
check("allreduce Sum float32", torch.equal(lt.allreduce(t, op=lt.Sum), torch.tensor([1.0, 2.0]) * total))
check("allreduce Average float32", torch.allclose(lt.allreduce(t), torch.tensor([1.0, 2.0]) * total / n))
check("the input untouched", torch.equal(t, torch.tensor([1.0, 2.0]) * (r + 1)))
big = torch.tensor([2.0 ** 40 + r], dtype=torch.float64)
check("allreduce float64 exactly", lt.allreduce(big, op=lt.Sum).item() == n * 2.0 ** 40 + sum(range(n)))
ints = torch.tensor([3, 4], dtype=torch.int64) * (r + 1)
got = lt.allreduce(ints, op=lt.Sum)
check("allreduce int64 keeps its dtype", got.dtype == torch.int64 and got.tolist() == [3 * total, 4 * total])
x = torch.zeros(3)
lt.allreduce_(x.add_(r), op=lt.Sum)
check("allreduce_ in place", x.tolist() == [float(sum(range(n)))] * 3)

torch.manual_seed(100 + r)  # every rank starts different
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.9)
model(torch.randn(2, 4)).sum().backward()
opt.step()  # a momentum buffer of this rank's own
lt.broadcast_parameters(model.state_dict(), root_rank=0)
lt.broadcast_optimizer_state(opt, root_rank=0)
every = lt.allgather_object({"w": model.weight.detach().tolist(), "lr": opt.param_groups[0]["lr"],
                             "m": opt.state[model.weight]["momentum_buffer"].tolist()})
check("allgather_object: one per rank, in rank order", len(every) == n)
check("broadcast_parameters: rank 0's weights everywhere", all(e["w"] == every[0]["w"] for e in every))
check("broadcast_optimizer_state: rank 0's lr and momentum everywhere",
      all(e["lr"] == 0.1 and e["m"] == every[0]["m"] for e in every))
check("broadcast_object", lt.broadcast_object({"from": r}, root_rank=n - 1) == {"from": n - 1})
try:
    lt.allreduce(t, op="max")
    check("a bad op refused", False)
except ValueError as e:
    check("a bad op refused, named", "op must be" in str(e))
try:
    lt.broadcast_(torch.zeros(1), root_rank=n)
    check("a root past the world refused", False)
except lt.LoomError as e:
    check("a root past the world refused, named", f"root {n} is not a rank" in str(e))
print(f"rank {r} of {n}: {'all collectives checks passed' if not fails else 'FAILED: ' + ', '.join(fails)}", flush=True)
sys.exit(1 if fails else 0)
