"""DistributedOptimizer: gradients leave in buckets as backward produces them (a hook on each
parameter's gradient accumulation hands it to the C++ exchange, whose thread sums full buckets
while backward goes on); step() waits for them and steps the wrapped optimizer."""
import ctypes
import os
import time

import torch

from . import _core
from . import board
from . import collectives as C
from . import stop
from .sampler import active_sampler


class Compression:
    """How gradients travel: none (fp32), fp16 (half the bytes), powersgd(rank, start)."""

    class _Kind:
        def __init__(self, spec):
            self.spec = spec

        def __repr__(self):
            return f"Compression({self.spec})"

    none = _Kind("none")
    fp16 = _Kind("fp16")

    @staticmethod
    def powersgd(rank=4, start=100):
        """PowerSGD (Vogels et al.): rank-`rank` factors of each matrix, with error feedback,
        after `start` plain steps; a tensor of 3+ dimensions is a matrix of dim 0 by the rest."""
        if int(rank) <= 0 or int(start) < 0:
            raise ValueError(f"powersgd needs rank > 0 and start >= 0, not rank={rank}, start={start}")
        return Compression._Kind(f"powersgd:rank={int(rank)},start={int(start)}")


def _emulated_speed():
    text = os.environ.get("LOOM_EMULATE_SPEED", "")
    if not text:
        return 1.0
    try:
        s = float(text)
    except ValueError:
        s = -1.0
    if not 0 < s <= 1:
        raise ValueError(f"LOOM_EMULATE_SPEED must be in (0, 1], not {text!r}")
    return s


def _check_same_parameters(named):
    """Every rank must hold the same parameters in the same order: else an error on every rank
    naming the first that differs (instead of a hang or a silently wrong sum)."""
    mine = [(n, tuple(p.shape), str(p.dtype)) for n, p in named]
    every = C.allgather_object(mine)
    for r, theirs in enumerate(every):
        if theirs == every[0]:
            continue
        for k in range(max(len(theirs), len(every[0]))):
            a = every[0][k] if k < len(every[0]) else None
            b = theirs[k] if k < len(theirs) else None
            if a != b:
                raise ValueError(
                    f"loom.torch: the ranks' parameters differ at position {k}: rank 0 has "
                    f"{_describe(a)}, rank {r} has {_describe(b)} (every rank must build the same model)")


def _describe(entry):
    return "nothing" if entry is None else f"{entry[0]} {list(entry[1])} {entry[2]}"


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, bucket_mb):
        super(self.__class__, self).__init__(params)
        plist = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        if named_parameters is not None:
            named = list(named_parameters)
            names = {id(p): n for n, p in named}
            if len(names) != len(named):
                raise ValueError("named_parameters holds a parameter twice")
            missing = [i for i, p in enumerate(plist) if id(p) not in names]
            if missing:
                raise ValueError(f"named_parameters lacks parameter {missing[0]} of the optimizer's")
        else:
            names = {id(p): f"param.{i}" for i, p in enumerate(plist)}
        for p in plist:
            if p.dtype != torch.float32:
                raise TypeError(f"loom.torch exchanges float32 gradients; {names[id(p)]} is {p.dtype}")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be at least 1")
        _check_same_parameters([(names[id(p)], p) for p in plist])
        self._loom = _State(plist, compression, backward_passes_per_step, bucket_mb)
        self._loom.hook_all()
        stop.exchanging()

    def step(self, closure=None):
        self._loom.exchange()
        return super(self.__class__, self).step(closure)

    def loom_stats(self):
        """Bytes this rank sent in the last exchange, what plain fp32 would send, the buckets,
        and the seconds of the last step: compute (what the balancer sees) and exchange wait."""
        return self._loom.stats()


class _State:
    """What the wrapper keeps beside the optimizer (one attribute, so no name of the wrapped
    optimizer's is shadowed)."""

    def __init__(self, params, compression, passes, bucket_mb):
        self.params = params
        self.compression = compression.spec if hasattr(compression, "spec") else str(compression)
        self.passes, self.bucket_mb = passes, float(bucket_mb)
        self.w = None  # this step's weight, found at its first gradient
        self.fired = [0] * len(params)
        self.sent = [False] * len(params)
        self.handle = None
        self.step_no = 0
        self.speed = _emulated_speed()
        self.t_last = time.perf_counter()
        self.last = {"compute_s": 0.0, "exchange_s": 0.0}
        self.keep = []  # the gradient accumulators hooked (PyTorch < 2.1)

    def hook_all(self):
        for i, p in enumerate(self.params):
            if hasattr(p, "register_post_accumulate_grad_hook"):
                p.register_post_accumulate_grad_hook(lambda p, i=i: self.ready(i))
            else:  # PyTorch 1.x: the AccumulateGrad node's hook runs once the gradient is in .grad
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(lambda *unused, i=i: self.ready(i))
                self.keep.append(acc)

    def weight(self):
        """What this rank's gradient counts for: its share of the global batch (BalancedSampler),
        else 1/size; over backward_passes_per_step passes, a pass's part of that. Once a step."""
        if self.w is None:
            s = active_sampler()
            w = s.share_of(self.step_no * self.passes) if s is not None else 1.0 / C.size()
            self.w = w / self.passes
        return self.w

    def ensure_exchange(self):
        if self.handle is not None:
            return
        dev = self.params[0].device
        if any(p.device != dev for p in self.params):
            raise ValueError("loom.torch: every parameter must live on one device")
        gpu = -1 if dev.type != "cuda" else dev.index if dev.index is not None else torch.cuda.current_device()
        ndims = [p.dim() for p in self.params]
        dims = [d for p in self.params for d in p.shape]
        on_cuda = [1 if p.is_cuda else 0 for p in self.params]
        h = ctypes.c_void_p()
        _core.check(_core.lib.lt_exchange_new(
            C._w(), self.compression.encode(), self.bucket_mb, len(self.params), _core.ints(ndims),
            (ctypes.c_int64 * max(1, len(dims)))(*dims), _core.ints(on_cuda), gpu, ctypes.byref(h)))
        self.handle = h
        C._at_shutdown.append(self.free)

    def free(self):
        if self.handle is not None:
            _core.lib.lt_exchange_free(self.handle)
            self.handle = None

    def hand_over(self, i, g):
        """Gives the exchange parameter i's gradient, weighted."""
        w = self.weight()
        with torch.no_grad():
            if w != 1.0:
                g.mul_(w)
        if g.is_cuda and torch.cuda.current_stream(g.device) != torch.cuda.default_stream(g.device):
            torch.cuda.current_stream(g.device).synchronize()  # the exchange orders itself after the default stream
        _core.check(_core.lib.lt_exchange_ready(self.handle, i, g.data_ptr()))
        self.sent[i] = True

    def ready(self, i):
        self.fired[i] += 1
        if self.fired[i] < self.passes or self.sent[i]:
            return
        p = self.params[i]
        if not p.grad.is_contiguous():
            p.grad = p.grad.contiguous()
        self.ensure_exchange()
        self.hand_over(i, p.grad)

    def exchange(self):
        if not any(self.fired):
            raise RuntimeError("loom.torch: step() without backward(): no gradient was computed since the last "
                               "step (call loss.backward() before optimizer.step())")
        self.ensure_exchange()
        for i, p in enumerate(self.params):  # unused this step (or fewer passes): zeros, or what accumulated
            if self.sent[i]:
                continue
            if p.grad is None or self.fired[i] == 0:
                p.grad = torch.zeros_like(p)
            elif not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            self.hand_over(i, p.grad)
        compute = time.perf_counter() - self.t_last
        if self.speed < 1.0:  # a slow device, emulated: this rank's compute takes 1/speed as long
            time.sleep(compute * (1.0 / self.speed - 1.0))
            compute /= self.speed
        s = active_sampler()
        n = C.size()
        # Beside the gradients: every rank's compute time and loader position, and a stop request.
        extras = (ctypes.c_float * (2 * n + 1))()
        extras[C.rank()] = compute
        extras[n + C.rank()] = float(s.handed_out() if s is not None else 0)
        extras[2 * n] = stop.requested()
        t0 = time.perf_counter()
        _core.check(_core.lib.lt_exchange_finish(self.handle, extras, 2 * n + 1, self.step_no))
        stop.settle(extras[2 * n] > 0)
        for i, p in enumerate(self.params):
            if not p.is_cuda:
                _core.check(_core.lib.lt_exchange_result(self.handle, i, p.grad.data_ptr()))
        self.last = {"compute_s": compute, "exchange_s": time.perf_counter() - t0}
        if board.active():
            board.scalars(self.step_no + 1, {**board.shares(s, self.step_no * self.passes), "compute_s": compute,
                                             "exchange_s": self.last["exchange_s"], "bytes_sent": self.stats()["last_bytes"]})
        if s is not None:
            s.observe((self.step_no + 1) * self.passes, list(extras[:n]), max(int(v) for v in extras[n:2 * n]), self.passes)
        self.fired = [0] * len(self.params)
        self.sent = [False] * len(self.params)
        self.w = None
        self.step_no += 1
        self.t_last = time.perf_counter()

    def stats(self):
        if self.handle is None:
            return {"last_bytes": 0, "plain_bytes": 0, "buckets": 0, **self.last}
        a, b, c = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
        _core.check(_core.lib.lt_exchange_stats(self.handle, ctypes.byref(a), ctypes.byref(b), ctypes.byref(c)))
        route = ctypes.create_string_buffer(512)
        _core.check(_core.lib.lt_exchange_route(self.handle, route, len(route)))
        return {"last_bytes": a.value, "plain_bytes": b.value, "buckets": c.value, "route": route.value.decode(),
                **self.last}


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         bucket_mb=25.0):
    """Wraps `optimizer` (as Horovod's does: an instance of a subclass of its class, made from its
    param_groups) so that step() first sums every rank's gradient, weighted by its share."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, bucket_mb)
