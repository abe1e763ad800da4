"""Who this process is among the ranks, and the collectives on tensors and Python objects."""
import atexit
import ctypes
import io
import os
import pickle
import sys
import time

import torch

from . import _core

Average = "average"
Sum = "sum"

_world = None
_at_shutdown = []  # what must go before the world does (each optimizer's exchange and its thread)


def init(comm_timeout=None):
    """Joins the ranks: MPI's world under mpirun or srun --mpi=pmix, else a world of one.
    `comm_timeout` (default $LOOM_COMM_TIMEOUT, else 120 s): how long a collective waits for a
    peer before failing with an error that names it. Calling it again does nothing."""
    global _world
    if _world is not None:
        return
    if comm_timeout is None:
        text = os.environ.get("LOOM_COMM_TIMEOUT", "120")
        try:
            comm_timeout = float(text)
        except ValueError:
            raise ValueError(f"LOOM_COMM_TIMEOUT must be a number of seconds, not {text!r}") from None
    h = ctypes.c_void_p()
    _core.check(_core.lib.lt_init(float(comm_timeout), ctypes.byref(h)))
    _world = h
    atexit.register(shutdown)
    if size() > 1:
        _abort_on_uncaught_errors()


def _abort_on_uncaught_errors():
    """A rank that dies of an exception ends the job (MPI_Abort, as loom-train does): a clean
    shutdown would wait forever for peers that wait for it, or that it timed out on."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.flush()
        time.sleep(1.0)  # the peers that failed too (a check every rank makes) report theirs
        if _world is not None:
            _core.lib.lt_abort(_world, 1)

    sys.excepthook = hook


def _w():
    if _world is None:
        raise ValueError("loom.torch has not been initialised: call loom.torch.init() first")
    return _world


def is_initialized():
    return _world is not None


def rank():
    return _core.lib.lt_rank(_w())


def size():
    return _core.lib.lt_size(_w())


def local_rank():
    return _core.lib.lt_local_rank(_w())


def local_size():
    return _core.lib.lt_local_size(_w())


def describe():
    buf = ctypes.create_string_buffer(256)
    _core.check(_core.lib.lt_describe(_w(), buf, len(buf)))
    return buf.value.decode()


def shutdown():
    """Leaves the ranks (MPI_Finalize where init started MPI)."""
    global _world
    while _at_shutdown:
        _at_shutdown.pop()()
    _route.clear()
    if _world is not None:
        h, _world = _world, None
        _core.check(_core.lib.lt_shutdown(h))


def device():
    """This rank's torch.device: under srun --loom-bind the plugin lists the task's own GPU first
    in CUDA_VISIBLE_DEVICES; otherwise GPU local_rank() where there are enough; else the CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    if os.environ.get("LOOM_GPU"):
        return torch.device("cuda", 0)
    n = torch.cuda.device_count()
    return torch.device("cuda", local_rank()) if local_rank() < n else torch.device("cpu")


def _sum_host(t, half=False):
    """Sums a contiguous host tensor over the ranks, in place."""
    if t.dtype == torch.float32:
        _core.check(_core.lib.lt_allreduce_sum(_w(), t.data_ptr(), t.numel(), 1 if half else 0))
    elif t.dtype == torch.float64:
        _core.check(_core.lib.lt_allreduce_sum_f64(_w(), t.data_ptr(), t.numel()))
    else:
        raise TypeError(f"allreduce sums float32 and float64 tensors (and the others as float64), not {t.dtype}")


def allreduce(tensor, op=Average, name=None):
    """The sum (op=Sum) or mean (op=Average) of `tensor` over the ranks, as a new tensor on its
    device and of its dtype (integers and halves are summed as float64). `name` is accepted as
    Horovod's is; collectives are matched by the order every rank calls them in."""
    if op not in (Average, Sum):
        raise ValueError(f"op must be loom.torch.Average or loom.torch.Sum, not {op!r}")
    work_dtype = torch.float32 if tensor.dtype == torch.float32 else torch.float64
    t = tensor.detach().to("cpu", work_dtype).contiguous().clone()
    _sum_host(t)
    if op == Average:
        t /= size()
    return t.to(tensor.device, tensor.dtype)


def _counts(counts, numel, what):
    """The per-rank chunk sizes of an uneven collective, checked against the tensor and the world."""
    counts = [int(c) for c in counts]
    if len(counts) != size():
        raise ValueError(f"{what}: {len(counts)} counts for {size()} ranks")
    if any(c < 0 for c in counts):
        raise ValueError(f"{what}: a negative count in {counts}")
    if sum(counts) != numel:
        raise ValueError(f"{what}: the counts {counts} sum to {sum(counts)}, not the {numel} elements given")
    return (ctypes.c_size_t * len(counts))(*counts)


def reduce_scatter(tensor, counts, op=Sum):
    """This rank's chunk of the sum (op=Sum) or mean (op=Average) of `tensor` over the ranks: the
    tensor, flattened, is cut into chunks of counts[0], counts[1], ... elements, one per rank in
    rank order (uneven sizes, zeros too); every rank passes the same counts. Returns a new float32
    tensor of counts[rank()] elements on `tensor`'s device (CUDA tensors through NCCL where it can
    be used, else staged through host memory: uneven_route() says which)."""
    if op not in (Average, Sum):
        raise ValueError(f"op must be loom.torch.Average or loom.torch.Sum, not {op!r}")
    c = _counts(counts, tensor.numel(), "reduce_scatter")
    on_gpu = _nccl_for(tensor)
    t = tensor.detach().reshape(-1).to(tensor.device if on_gpu else "cpu", torch.float32).contiguous().clone()
    _core.check((_core.lib.lt_device_reduce_scatter_sum_v if on_gpu else _core.lib.lt_reduce_scatter_sum_v)(_w(), t.data_ptr(), c))
    begin = sum(c[:rank()])
    mine = t[begin:begin + c[rank()]].clone()
    if op == Average:
        mine /= size()
    return mine.to(tensor.device)


def allgather(chunk, counts):
    """Every rank's chunk, one after another in rank order, as one flat float32 tensor on `chunk`'s
    device: rank r passes its counts[r] elements; every rank passes the same counts."""
    total = sum(int(k) for k in counts)
    c = _counts(counts, total, "allgather")
    if chunk.numel() != c[rank()]:
        raise ValueError(f"allgather: rank {rank()} passes {chunk.numel()} elements, its count is {c[rank()]}")
    on_gpu = _nccl_for(chunk)
    t = torch.empty(total, dtype=torch.float32, device=chunk.device if on_gpu else "cpu")
    begin = sum(c[:rank()])
    t[begin:begin + c[rank()]] = chunk.detach().reshape(-1).to(t.device, torch.float32)
    _core.check((_core.lib.lt_device_allgather_v if on_gpu else _core.lib.lt_allgather_v)(_w(), t.data_ptr(), c))
    return t.to(chunk.device)


_route = {}  # the world's route for CUDA tensors' uneven chunks: (nccl?, what or why)


def _nccl_for(tensor):
    """Whether `tensor`'s uneven chunks go through NCCL on its GPU (asked once, collectively, at
    the first CUDA tensor), else through host memory; uneven_route() says which and why."""
    if not tensor.is_cuda:
        return False
    if "nccl" not in _route:
        gpu = tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
        nccl, why = ctypes.c_int(), ctypes.create_string_buffer(512)
        _core.check(_core.lib.lt_device_route(_w(), gpu, ctypes.byref(nccl), why, len(why)))
        _route.update(nccl=bool(nccl.value), why=why.value.decode(errors="replace"))
    if _route["nccl"] and torch.cuda.current_stream(tensor.device) != torch.cuda.default_stream(tensor.device):
        torch.cuda.current_stream(tensor.device).synchronize()  # NCCL orders itself after the default stream
    return _route["nccl"]


def uneven_route():
    """How CUDA tensors' uneven collectives travel: "nccl: ..." or why through host memory ("" before
    the first)."""
    return _route.get("why", "")


def allreduce_(tensor, op=Average, name=None):
    """allreduce in place."""
    with torch.no_grad():
        tensor.copy_(allreduce(tensor, op, name))
    return tensor


def broadcast_(tensor, root_rank):
    """Every rank's `tensor` becomes root_rank's, in place."""
    if tensor.is_cuda or not tensor.is_contiguous():
        host = tensor.detach().to("cpu").contiguous()
        broadcast_(host, root_rank)
        with torch.no_grad():
            tensor.copy_(host)
        return tensor
    _core.check(_core.lib.lt_broadcast(_w(), tensor.data_ptr(), tensor.numel() * tensor.element_size(), root_rank))
    return tensor


def broadcast_object(obj, root_rank=0):
    """root_rank's picklable object, on every rank."""
    data = pickle.dumps(obj) if rank() == root_rank else b""
    n = torch.tensor([len(data)], dtype=torch.int64)
    broadcast_(n, root_rank)
    buf = torch.zeros(int(n.item()), dtype=torch.uint8)
    if rank() == root_rank:
        buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    broadcast_(buf, root_rank)
    return obj if rank() == root_rank else pickle.loads(buf.numpy().tobytes())


def allgather_object(obj):
    """Every rank's picklable object, in rank order, on every rank."""
    return [broadcast_object(obj if r == rank() else None, r) for r in range(size())]


def broadcast_parameters(params, root_rank):
    """Every rank takes root_rank's values: `params` is a state_dict, a list of (name, tensor)
    pairs (model.named_parameters()) or of tensors. Every rank must pass the same names in the
    same order."""
    if isinstance(params, dict):
        items = list(params.items())
    else:
        items = [p if isinstance(p, tuple) else (str(i), p) for i, p in enumerate(params)]
    for _, t in items:
        if torch.is_tensor(t):
            broadcast_(t.data if isinstance(t, torch.nn.Parameter) else t, root_rank)


def broadcast_optimizer_state(optimizer, root_rank):
    """Every rank's optimizer takes root_rank's state (moments, step counts, hyperparameters)."""
    buf = io.BytesIO()
    if rank() == root_rank:
        torch.save(optimizer.state_dict(), buf)
    data = broadcast_object(buf.getvalue(), root_rank)
    if rank() != root_rank:
        optimizer.load_state_dict(torch.load(io.BytesIO(data), map_location="cpu"))
