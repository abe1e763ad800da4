"""log_to: loom.torch's own figures as scalars of the script's TensorBoard writer
(torch.utils.tensorboard.SummaryWriter, or anything with add_scalar(tag, value, step)), beside
the script's own: each rank's share of the global batch, this rank's compute and communication
seconds of the step, and the bytes it sent. Written by rank 0 unless all_ranks (then each rank
gives its own writer, e.g. one folder per rank)."""
from . import collectives as C

_to = {"writer": None, "every": 1}


def log_to(writer, every=1, all_ranks=False):
    """Adds loom.torch's scalars (tags "loom/...") to `writer` every `every` steps; None stops."""
    if writer is not None and not callable(getattr(writer, "add_scalar", None)):
        raise TypeError(f"log_to needs a writer with add_scalar(tag, value, step) (a SummaryWriter), not {type(writer).__name__}")
    if int(every) < 1:
        raise ValueError(f"every must be at least 1, not {every}")
    _to["writer"] = writer if writer is None or all_ranks or C.rank() == 0 else None
    _to["every"] = int(every)


def active():
    return _to["writer"] is not None


def scalars(step, values):
    """Step `step`'s figures, each as loom/<name>; nothing without a writer."""
    w = _to["writer"]
    if w is None or step % _to["every"]:
        return
    for name, value in values.items():
        w.add_scalar(f"loom/{name}", float(value), step)


def shares(sampler, batch):
    """Each rank's part of global batch `batch`, as figures."""
    return {} if sampler is None else {f"shares/rank{r}": k for r, k in enumerate(sampler.shares_at(batch))}
