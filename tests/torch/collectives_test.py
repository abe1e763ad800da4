"""The collectives on tensors and objects, on every rank of a world (alone, or under mpirun):
allreduce (Average and Sum; float32, float64 and integers), broadcast_parameters,
broadcast_optimizer_state, allgather_object, broadcast_object, reduce_scatter and allgather of
uneven chunks (a share of the model state by each rank's memory, one share empty), and the
errors of a bad call."""
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
# Uneven chunks: rank r's share 7 * (r + 1) elements, the last rank's empty (on 2 and 3 ranks).
counts = [7 * (k + 1) for k in range(n)]
if n > 1:
    counts[-1] = 0
whole = torch.arange(sum(counts), dtype=torch.float32).reshape(-1, 1) * (r + 1)
begin = sum(counts[:r])
mine = lt.reduce_scatter(whole, counts)
expect = torch.arange(sum(counts), dtype=torch.float32)[begin:begin + counts[r]] * total
check("reduce_scatter of uneven chunks: this rank's chunk of the sum", torch.equal(mine, expect))
check("reduce_scatter Average", torch.allclose(lt.reduce_scatter(whole, counts, op=lt.Average), expect / n))
check("reduce_scatter leaves its input", torch.equal(whole[:, 0], torch.arange(sum(counts), dtype=torch.float32) * (r + 1)))
back = lt.allgather(mine, counts)
check("allgather of uneven chunks: every rank's chunk", torch.equal(back, torch.arange(sum(counts), dtype=torch.float32) * total))
for what, call in [("counts for another world", lambda: lt.reduce_scatter(whole, counts + [1])),
                   ("a negative count", lambda: lt.reduce_scatter(whole, [-1] + counts[1:] if n > 1 else [-1])),
                   ("counts that miss the tensor", lambda: lt.reduce_scatter(whole[1:], counts)),
                   ("a chunk of another size", lambda: lt.allgather(torch.zeros(counts[r] + 1), counts))]:
    try:
        call()
        check(f"uneven collectives refuse {what}", False)
    except ValueError as e:
        check(f"uneven collectives name {what} ({e})", "count" in str(e) or "elements" in str(e))
print(f"rank {r} of {n}: {'all collectives checks passed' if not fails else 'FAILED: ' + ', '.join(fails)}", flush=True)
sys.exit(1 if fails else 0)
