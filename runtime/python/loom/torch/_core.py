"""The C ABI of libloomtorch.so (torch/loom_torch.h), bound with ctypes: no Python or PyTorch
ABI is compiled into it, so one library serves every Python 3 and every PyTorch."""
import ctypes
import os

# PyTorch first, whatever order the script imports in: libloomtorch.so links the system's NCCL and
# CUDA runtime, and a library loaded first wins its soname for the whole process. Loaded after
# PyTorch, those names resolve to the newer ones PyTorch's wheel brought (NCCL keeps its ABI);
# loaded before, PyPI's CUDA wheel fails with "libtorch_cuda.so: undefined symbol: ncclCommResume".
import torch  # noqa: F401  (loom.torch needs it anyway)

_here = os.path.dirname(os.path.abspath(__file__))


def _find():
    """The library: $LOOM_TORCH_LIB, else beside this file (where `make install` puts it)."""
    cand = [os.environ.get("LOOM_TORCH_LIB", ""), os.path.join(_here, "libloomtorch.so")]
    for c in cand:
        if c and os.path.exists(c):
            return c
    raise ImportError(
        "loom.torch: libloomtorch.so is not installed beside this package (looked at: "
        + ", ".join(c for c in cand if c)
        + "); build Loom with its runtime and `make install`, or set LOOM_TORCH_LIB"
    )


lib = ctypes.CDLL(_find())
_p = ctypes.c_void_p
_i64p = ctypes.POINTER(ctypes.c_int64)
_ip = ctypes.POINTER(ctypes.c_int)
_fp = ctypes.POINTER(ctypes.c_float)
_dp = ctypes.POINTER(ctypes.c_double)
_szp = ctypes.POINTER(ctypes.c_size_t)
for name, args in {
    "lt_init": [ctypes.c_double, ctypes.POINTER(_p)],
    "lt_rank": [_p], "lt_size": [_p], "lt_local_rank": [_p], "lt_local_size": [_p],
    "lt_describe": [_p, ctypes.c_char_p, ctypes.c_size_t],
    "lt_shutdown": [_p],
    "lt_allreduce_sum": [_p, _p, ctypes.c_size_t, ctypes.c_int],
    "lt_allreduce_sum_f64": [_p, _p, ctypes.c_size_t],
    "lt_broadcast": [_p, _p, ctypes.c_size_t, ctypes.c_int],
    "lt_reduce_scatter_sum_v": [_p, _p, _szp],
    "lt_allgather_v": [_p, _p, _szp],
    "lt_device_route": [_p, ctypes.c_int, _ip, ctypes.c_char_p, ctypes.c_size_t],
    "lt_device_reduce_scatter_sum_v": [_p, _p, _szp],
    "lt_device_allgather_v": [_p, _p, _szp],
    "lt_exchange_new": [_p, ctypes.c_char_p, ctypes.c_double, ctypes.c_int, _ip, _i64p, _ip, ctypes.c_int,
                        ctypes.POINTER(_p)],
    "lt_exchange_ready": [_p, ctypes.c_int, _p],
    "lt_exchange_finish": [_p, _fp, ctypes.c_size_t, ctypes.c_int64],
    "lt_exchange_result": [_p, ctypes.c_int, _p],
    "lt_exchange_stats": [_p, _szp, _szp, _szp],
    "lt_exchange_route": [_p, ctypes.c_char_p, ctypes.c_size_t],
    "lt_balancer_new": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, _dp, ctypes.POINTER(_p)],
    "lt_balancer_shares": [_p, _ip],
    "lt_balancer_observe": [_p, _dp, _ip],
}.items():
    f = getattr(lib, name)
    f.argtypes = args
    f.restype = ctypes.c_int
lib.lt_last_error.restype = ctypes.c_char_p
lib.lt_last_error.argtypes = []
lib.lt_abort.argtypes = [_p, ctypes.c_int]
lib.lt_abort.restype = None
lib.lt_exchange_free.argtypes = [_p]
lib.lt_exchange_free.restype = None
lib.lt_balancer_free.argtypes = [_p]
lib.lt_balancer_free.restype = None


class LoomError(RuntimeError):
    """An error from Loom's core: a peer that timed out (named), a bad argument."""


def check(rc):
    if rc != 0:
        raise LoomError(lib.lt_last_error().decode(errors="replace"))
    return rc


def ints(values):
    return (ctypes.c_int * len(values))(*values)


def doubles(values):
    return (ctypes.c_double * len(values))(*values)


class Balancer:
    """runtime/comm/balancer: integer shares of a global batch, from weights or measured times."""

    def __init__(self, mode, global_batch, ranks, weights, replan_every=10):
        self.ranks = ranks
        self._h = _p()
        check(lib.lt_balancer_new(mode.encode(), global_batch, ranks, replan_every, doubles(weights),
                                  ctypes.byref(self._h)))

    def shares(self):
        out = ints([0] * self.ranks)
        check(lib.lt_balancer_shares(self._h, out))
        return list(out)

    def observe(self, seconds):
        replanned = ctypes.c_int(0)
        check(lib.lt_balancer_observe(self._h, doubles(seconds), ctypes.byref(replanned)))
        return bool(replanned.value)

    def __del__(self):
        if getattr(self, "_h", None):
            lib.lt_balancer_free(self._h)
            self._h = None
