"""BalancedSampler: this rank's share of each global batch, the shares planned by loom-train's
balancer (runtime/comm/balancer) from device weights (static) or measured step times (dynamic)."""
import math
import os

import torch

from . import _core
from . import collectives as C

_active = None


def active_sampler():
    """The BalancedSampler made last in this process: DistributedOptimizer weights by its shares."""
    return _active


def _device_weight():
    text = os.environ.get("LOOM_DEVICE_WEIGHT", "1")
    try:
        w = float(text)
    except ValueError:
        w = -1.0
    if not (w > 0 and math.isfinite(w)):
        raise ValueError(f"LOOM_DEVICE_WEIGHT must be a positive number, not {text!r}")
    return w


class BalancedSampler(torch.utils.data.Sampler):
    """A batch sampler (DataLoader(dataset, batch_sampler=...)): each global batch of
    `global_batch_size` samples is the same whatever the world size and the shares (a world of
    one with the same seed sees the same batches), and this rank yields its share of it. Every
    rank yields the same number of batches. balance: "dynamic" (shares follow measured step
    times, re-planned every `replan_every` steps), "static" (from each rank's
    $LOOM_DEVICE_WEIGHT, as srun --loom-bind sets it), "off" (even). drop_last=False pads the
    last global batch with the epoch's first samples, as DistributedSampler pads."""

    def __init__(self, dataset, global_batch_size, shuffle=True, seed=0, drop_last=True, balance="dynamic",
                 replan_every=10):
        global _active
        if balance not in ("dynamic", "static", "off"):
            raise ValueError(f"balance must be 'dynamic', 'static' or 'off', not {balance!r}")
        self.n, self.global_batch = len(dataset), int(global_batch_size)
        if self.global_batch < C.size():
            raise ValueError(f"global_batch_size {self.global_batch} is smaller than the world ({C.size()} ranks): "
                             "every rank needs at least one sample of each global batch")
        if self.global_batch > self.n:
            raise ValueError(f"global_batch_size {self.global_batch} is larger than the dataset ({self.n} samples)")
        self.shuffle, self.seed, self.drop_last, self.balance = shuffle, int(seed), drop_last, balance
        self.epoch = 0
        weights = C.allgather_object(_device_weight() if balance != "off" else 1.0)
        self._bal = _core.Balancer(balance, self.global_batch, C.size(), weights, replan_every)
        self._schedule = [(0, self._bal.shares())]  # (the first batch they apply to, the shares)
        self._handed = -1  # batches handed out so far, counted over epochs, minus one
        self._resume = None  # restored: the batches already trained on
        _active = self

    def __len__(self):
        return self.n // self.global_batch if self.drop_last else -(-self.n // self.global_batch)

    def set_epoch(self, epoch):
        """The epoch's permutation (seed + epoch), as DistributedSampler.set_epoch."""
        self.epoch = int(epoch)

    def shares_at(self, batch):
        for start, shares in reversed(self._schedule):
            if start <= batch:
                return shares
        return self._schedule[0][1]

    def shares(self):
        return self._schedule[-1][1]

    def share_of(self, batch):
        """This rank's part of global batch number `batch` (counted over epochs)."""
        return self.shares_at(batch)[C.rank()] / self.global_batch

    def handed_out(self):
        return self._handed

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        perm = torch.randperm(self.n, generator=g).tolist() if self.shuffle else list(range(self.n))
        steps = len(self)
        perm += perm[: steps * self.global_batch - self.n]  # drop_last=False: padded
        me = C.rank()
        first = 0
        if self._resume is not None and self._resume // steps == self.epoch:  # resumed inside this epoch
            first = self._resume % steps
        self._resume = None
        for i in range(first, steps):
            k = self._handed + 1
            shares = self.shares_at(k)
            at = i * self.global_batch + sum(shares[:me])
            self._handed = k
            yield perm[at: at + shares[me]]

    def state(self, batches):
        """For a checkpoint after `batches` batches: where the data stands and the shares."""
        return {"batches": int(batches), "epoch": self.epoch, "shares": self.shares(), "seed": self.seed,
                "global_batch": self.global_batch}

    def restore(self, state, same_world=True):
        """Continues after state["batches"] batches (the rest of that epoch first, once its
        set_epoch is called). The same world keeps its shares; another world plans afresh."""
        if state["global_batch"] != self.global_batch or state["seed"] != self.seed:
            raise ValueError(f"the checkpoint's sampler had global batch {state['global_batch']} and seed "
                             f"{state['seed']}, this one {self.global_batch} and {self.seed}")
        whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
        if not whole(state["batches"]) or not whole(state["epoch"]):
            raise ValueError(f"the checkpoint's sampler is at batch {state['batches']!r} of epoch {state['epoch']!r}: "
                             "each must be a whole number of at least 0")
        shares = state["shares"]
        if same_world and (not isinstance(shares, list) or len(shares) != len(self.shares()) or not all(map(whole, shares))
                           or sum(shares) != self.global_batch):
            raise ValueError(f"the checkpoint's shares {str(shares)[:200]} are not {len(self.shares())} whole numbers "
                             f"that add up to the global batch {self.global_batch}")
        self._handed = state["batches"] - 1
        self._resume = state["batches"]
        self.epoch = state["epoch"]
        if same_world:
            self._schedule = [(0, list(state["shares"]))]

    def observe(self, next_batch, seconds, handed_max, passes=1):
        """Every rank's compute seconds of a step (the same numbers on every rank, from the
        exchange): new shares apply from the first step whose batches no rank's loader has
        fetched yet (a step takes `passes` batches)."""
        if self._bal.observe(seconds):
            ahead = max(0, handed_max + 1 - next_batch)
            self._schedule.append((next_batch + -(-ahead // passes) * passes, self._bal.shares()))
        while len(self._schedule) > 1 and self._schedule[1][0] <= next_batch:  # plans no batch still asks for
            self._schedule.pop(0)
