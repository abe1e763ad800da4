"""compare.py A.pt B.pt INIT.pt TOLERANCE: how far two runs' final weights are apart, as
||A - B|| / ||B|| over every float tensor; exits 1 above TOLERANCE, or when the names differ, or
when training moved the weights too little (||B - INIT|| under 20 x TOLERANCE x ||B||) for the
comparison to tell a right sum from a wrong one."""
import sys

import torch

a, b, init = (torch.load(p) for p in sys.argv[1:4])
tol = float(sys.argv[4])
if list(a) != list(b):
    sys.exit(f"compare: the tensors differ: {sorted(set(a) ^ set(b))[:5]}")
keys = [k for k in b if b[k].is_floating_point() and bool(torch.isfinite(b[k]).all())]
for k in b:  # the rest (integers, a mask of -inf) must be equal
    if k not in keys and not torch.equal(a[k], b[k]):
        sys.exit(f"compare: {k} differs")


def norm(f):
    return sum(float((f(k).double() ** 2).sum()) for k in keys) ** 0.5


diff, size, moved = norm(lambda k: a[k] - b[k]), norm(lambda k: b[k]), norm(lambda k: b[k] - init[k])
worst = max(keys, key=lambda k: float((a[k] - b[k]).abs().max()))
print(f"weights {diff / size:.3g} apart relative (tolerance {tol:g}); training moved them {moved / size:.3g}; "
      f"the update {diff / max(moved, 1e-30):.3g} apart; largest difference in {worst}")
if moved < 20 * tol * size:
    sys.exit("compare: training moved the weights too little for this tolerance to mean anything")
sys.exit(0 if diff <= tol * size else 1)
