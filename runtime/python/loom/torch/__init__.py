"""loom.torch — Loom's data parallelism for PyTorch programs, with Horovod's names.

    import loom.torch as lt
    lt.init()
    sampler = lt.BalancedSampler(dataset, global_batch_size=256)
    loader = DataLoader(dataset, batch_sampler=sampler)
    opt = lt.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    lt.broadcast_parameters(model.state_dict(), root_rank=0)

Each rank computes the mean loss over its share of the global batch; the optimizer weights the
ranks' gradients by their shares, so every step is the single-process step of the global batch.
Run it with mpirun, srun --mpi=pmix (with --loom-bind, the plugin's LOOM_* variables are used),
or alone (a world of one). See doc/torch.md."""
from ._core import LoomError
from .collectives import (Average, Sum, allgather, allgather_object, allreduce, allreduce_, broadcast_,
                          broadcast_object, broadcast_optimizer_state, broadcast_parameters, describe, device, init,
                          is_initialized, local_rank, local_size, rank, reduce_scatter, shutdown, size, uneven_route)
from .optimizer import Compression, DistributedOptimizer
from .sampler import BalancedSampler
from .checkpoint import REQUEUE, Checkpoint, CheckpointError
from .fsdp import MixedPrecisionPolicy, full_state_dict, fully_shard, memory_stats
from .board import log_to

__all__ = ["Average", "Sum", "allgather", "allgather_object", "reduce_scatter", "allreduce", "allreduce_", "broadcast_", "broadcast_object",
           "broadcast_optimizer_state", "broadcast_parameters", "describe", "device", "init", "is_initialized",
           "local_rank", "local_size", "rank", "shutdown", "size", "uneven_route", "Compression", "DistributedOptimizer",
           "BalancedSampler", "Checkpoint", "CheckpointError", "LoomError", "REQUEUE", "MixedPrecisionPolicy",
           "full_state_dict", "fully_shard", "memory_stats", "log_to"]
