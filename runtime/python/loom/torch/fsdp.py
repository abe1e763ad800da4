"""fully_shard: a PyTorch model's parameters sharded across the ranks, FSDP2's spelling, with each
rank's share of the state set by its memory and its share of the batch by its speed.

    for block in model.blocks:
        lt.fully_shard(block)
    lt.fully_shard(model)
    opt = torch.optim.AdamW(model.parameters())   # steps this rank's shards

Each call takes the parameters the module owns (those of children sharded before it aside) and
keeps, under each parameter's own name, this rank's part of it as a flat float32 Parameter: parts
in proportion to the ranks' $LOOM_DEVICE_MEMORY (bytes, set by srun --loom-bind) or
`shard_weights`, else even. Before the module's forward its parameters are gathered (one allgather
of uneven chunks for the module); with reshard_after_forward they are freed after it and gathered
again when backward needs them. Their gradients are weighted by this rank's share of the global
batch (BalancedSampler's shares, as DistributedOptimizer weights) and reduce-scattered into this
rank's parts, so a plain optimizer's step on `model.parameters()` is the single process's step of
the global batch; a parameter without a gradient keeps none."""
import math
import os
import time

import torch

from . import board
from . import collectives as C
from .optimizer import _emulated_speed
from .sampler import active_sampler


class MixedPrecisionPolicy:
    """FSDP2's: the dtype the gathered parameters compute in (`param_dtype`, e.g. torch.bfloat16)
    and the one gradients are summed in (`reduce_dtype`; Loom sums in float32 whatever is asked,
    which is at least as exact). The shards and the optimizer stay float32."""

    def __init__(self, param_dtype=None, reduce_dtype=None, output_dtype=None, cast_forward_inputs=True):
        self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype


def _memory_weight(shard_weights):
    """This world's shard weights: `shard_weights` (one per rank), else every rank's
    $LOOM_DEVICE_MEMORY, else even."""
    if shard_weights is not None:
        w = [float(x) for x in shard_weights]
        if len(w) != C.size():
            raise ValueError(f"fully_shard: {len(w)} shard_weights for {C.size()} ranks")
        source = "shard_weights"
    else:
        text = os.environ.get("LOOM_DEVICE_MEMORY")
        seen = C.allgather_object(text)
        if all(t is None for t in seen):
            return [1.0] * C.size()
        if any(t is None for t in seen):
            missing = [r for r, t in enumerate(seen) if t is None]
            raise ValueError(f"fully_shard: LOOM_DEVICE_MEMORY is set on some ranks but not on rank(s) {missing}")
        w = []
        for r, t in enumerate(seen):
            try:
                w.append(float(t))
            except ValueError:
                raise ValueError(f"fully_shard: rank {r}'s LOOM_DEVICE_MEMORY {t!r} is not a number of bytes") from None
        source = "LOOM_DEVICE_MEMORY"
    for r, x in enumerate(w):
        if not (x > 0 and math.isfinite(x)):
            raise ValueError(f"fully_shard: rank {r}'s {source} weight must be a positive number, not {x}")
    return w


def shard_counts(n, weights):
    """n elements split in proportion to `weights`: whole counts summing to n, the remainder to the
    largest fractions (ties to the lower rank)."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [int(math.floor(e)) for e in exact]
    order = sorted(range(len(weights)), key=lambda r: (-(exact[r] - counts[r]), r))
    for r in order[: n - sum(counts)]:
        counts[r] += 1
    return counts


class _Clock:
    """This rank's compute: the time between the sharding's collectives. Summed over a batch, it is
    what the dynamic balancer sees; with LOOM_EMULATE_SPEED, each stretch is slept out to 1/speed
    as long before the next collective, layer by layer as on a slower device."""
    mark = None
    compute = 0.0
    comm = 0.0  # seconds inside the collectives
    entered = 0.0
    speed = None

    @classmethod
    def before_collective(cls):
        if cls.speed is None:
            cls.speed = _emulated_speed()
        now = time.perf_counter()
        if cls.mark is not None:
            stretch = now - cls.mark
            if cls.speed < 1.0:
                time.sleep(stretch * (1.0 / cls.speed - 1.0))
                stretch /= cls.speed
            cls.compute += stretch
        cls.entered = time.perf_counter()

    @classmethod
    def after_collective(cls):
        cls.mark = time.perf_counter()
        cls.comm += cls.mark - cls.entered

    @classmethod
    def take(cls):
        seconds, comm, cls.compute, cls.comm = cls.compute, cls.comm, 0.0, 0.0
        return seconds, comm


def _observe(next_batch):
    """A batch's backward is done: with dynamic shares, every rank's compute seconds and loader
    position go to the sampler, which plans the shares of the batches no rank has fetched."""
    seconds, comm = _Clock.take()
    s = active_sampler()
    board.scalars(next_batch, {**board.shares(s, next_batch - 1), "compute_s": seconds, "exchange_s": comm})
    if s is None or s.balance != "dynamic" or C.size() == 1:
        return
    seen = C.allgather(torch.tensor([seconds, float(s.handed_out())]), [2] * C.size())
    s.observe(next_batch, seen[0::2].tolist(), int(seen[1::2].max().item()), 1)


class _Live:
    """The storages of gathered parameters in use: a tensor saved for backward that lives in one is
    saved as a reference and gathered again when backward needs it."""
    by_storage = {}


def _storage(t):
    """The tensor's storage: (its address, its bytes); PyTorch 1.x has no untyped_storage."""
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes()


def _pack(t):
    ptr, nbytes = _storage(t)
    g = _Live.by_storage.get(ptr)
    if g is None or nbytes != g.full_bytes:
        return t
    return (g, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _unpack(saved):
    if isinstance(saved, torch.Tensor):
        return saved
    g, offset, shape, stride, dtype = saved
    return torch.as_strided(g.regathered(dtype), shape, stride, offset)


class _Gather(torch.autograd.Function):
    """Every parameter of a group, whole, from every rank's parts; backward reduce-scatters their
    gradients, weighted by this rank's share of the batch, into this rank's parts (none for a
    parameter that got no gradient)."""

    @staticmethod
    def forward(ctx, group, *parts):
        ctx.set_materialize_grads(False)
        ctx.group = group
        full = _Prefetch.take(group)
        if full is None:
            full = group.gather(parts)
        return tuple(full[at: at + math.prod(shape)].view(shape) for _, _, shape, at in group.entries)

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + ctx.group.reduce(grads)


def _pieces(flat, slices):
    """The (start, length) slices of `flat`, one after another."""
    return torch.cat([flat[s: s + n] for s, n in slices]) if slices else flat[:0]


class _Group:
    """One fully_shard call: the parameters it took, where each lies in the whole buffer, and how
    the ranks' parts are laid out."""

    def __init__(self, module, entries, parts, weights, reshard, mp):
        self.module, self.entries, self.parts = module, entries, parts  # parts[i]: (mod, name) of entry i's Parameter
        self.reshard, self.mp = reshard, mp
        me = C.rank()
        self.counts = [shard_counts(math.prod(shape), weights) for _, _, shape, _ in entries]  # per entry, per rank
        self.totals = [sum(c[r] for c in self.counts) for r in range(C.size())]
        self.numel = sum(self.totals)
        # The same pieces in two orders, as (start, length) slices: the whole (parameter after
        # parameter, each one's pieces rank after rank) from the ranks' chunks, and back.
        p, ranks = len(entries), C.size()
        in_chunk = [[0] * ranks for _ in range(p)]  # where entry i's piece starts in rank r's chunk
        in_whole = [[0] * ranks for _ in range(p)]  # ... and in the whole
        chunk_at = [sum(self.totals[:r]) for r in range(ranks)]
        for r in range(ranks):
            at = chunk_at[r]
            for i in range(p):
                in_chunk[i][r], at = at, at + self.counts[i][r]
        for i, (_, _, _, at) in enumerate(entries):
            for r in range(ranks):
                in_whole[i][r], at = at, at + self.counts[i][r]
        self.to_whole = [(in_chunk[i][r], self.counts[i][r]) for i in range(p) for r in range(ranks)]
        self.to_chunks = [(in_whole[i][r], self.counts[i][r]) for r in range(ranks) for i in range(p)]
        self.mine = [c[me] for c in self.counts]
        self.full_bytes = 0
        self.backward_full = None
        self.hooks_ctx = None
        self.backward_no = 0
        self.regathers = 0  # gathered again in backward (reshard_after_forward)
        self.is_root = False

    def shards(self):
        return [getattr(mod, "_parameters")[name] for mod, name in self.parts]

    # Collectives: the parts to the whole parameters and back.
    def gather(self, parts, clock=True):
        device = parts[0].device
        mine = torch.cat([p.detach().reshape(-1).float() for p in parts]) if parts else torch.zeros(0)
        if clock:
            _Clock.before_collective()
        ranked = C.allgather(mine, self.totals)
        if clock:
            _Clock.after_collective()
        full = _pieces(ranked, self.to_whole).to(device)
        if self.mp is not None and self.mp.param_dtype is not None:
            full = full.to(self.mp.param_dtype)
        return full

    def whole_of(self, i, piece):
        """Entry i's whole tensor (its parameter's shape) from every rank's piece of it: its part,
        or an optimizer's moment of its part. Every rank calls it."""
        return C.allgather(piece.detach().reshape(-1).float().cpu(), self.counts[i]).view(self.entries[i][2])

    def my_piece(self, i, whole):
        """This rank's piece of entry i's whole tensor."""
        counts, me = self.counts[i], C.rank()
        begin = sum(counts[:me])
        return whole.reshape(-1)[begin: begin + counts[me]]

    def regathered(self, dtype):
        if self.backward_full is None or self.backward_full.dtype != dtype:
            self.backward_full = self.gather(self.shards()).to(dtype)
            self.regathers += 1
        return self.backward_full

    def reduce(self, grads):
        self.backward_full = None
        s = active_sampler()
        weight = s.share_of(self.backward_no) if s is not None else 1.0 / C.size()
        device = self.shards()[0].device  # CUDA: the collective goes through NCCL where it can
        whole = torch.zeros(self.numel, dtype=torch.float32, device=device)
        for g, (_, _, shape, at) in zip(grads, self.entries):
            if g is not None:
                whole[at: at + math.prod(shape)] = g.detach().reshape(-1).to(device, torch.float32)
        ranked = _pieces(whole, self.to_chunks) * weight
        _Clock.before_collective()
        mine = C.reduce_scatter(ranked, self.totals)
        if self.is_root:
            _observe(_count_backward(self.module))
        _Clock.after_collective()
        out, at = [], 0
        for g, p, k in zip(grads, self.shards(), self.mine):
            out.append(None if g is None else mine[at: at + k].to(p.device, p.dtype))
            at += k
        return tuple(out)

    # The whole parameters, while the module runs: found before the parts under the same names.
    def install(self, views):
        for (mods, _, _, _), view in zip(self.entries, views):
            for mod, name in mods:
                mod.__dict__[name] = view

    def uninstall(self):
        for mods, _, _, _ in self.entries:
            for mod, name in mods:
                mod.__dict__.pop(name, None)


def _count_backward(root):
    """A root's backward pass is done: the next one is the next batch's (every group of the model);
    returns that batch's number."""
    return set_batches(root, root._loom_shard.backward_no + 1)


def set_batches(module, n):
    """The batches trained so far (a restored checkpoint's): the next backward is batch n's."""
    for _, _, g in _groups(module):
        g.backward_no = n
    return n


class _Prefetch:
    """In forward, the next module's gather runs on a thread of its own while this module
    computes: the order is the first forward's, alike on every rank, so the ranks' collectives
    match; one collective is in flight at a time (MPI_THREAD_SERIALIZED), and what a forward did
    not use is dropped at its end. On for parameters on a GPU; on CPU ranks the thread's
    collective competes with the compute for the cores (on 2 ranks of a 2-core machine it made a
    step slower), so there LOOM_FSDP_PREFETCH=1 asks for it (=0 turns it off on GPUs)."""
    order, recording, pending, worker = [], False, {}, None
    used = 0  # gathers a forward took from the prefetch

    @classmethod
    def take(cls, g):
        f = cls.pending.pop(g, None)
        if f is None:
            return None
        cls.used += 1
        return f.result()

    @classmethod
    def begin(cls, g):
        if g.is_root and not cls.order:
            cls.recording = True
        if cls.recording:
            cls.order.append(g)

    @classmethod
    def wanted(cls, g):
        text = os.environ.get("LOOM_FSDP_PREFETCH", "")
        if text not in ("", "0", "1"):
            raise ValueError(f"LOOM_FSDP_PREFETCH must be 0 or 1, not {text!r}")
        return text == "1" if text else g.shards()[0].is_cuda

    @classmethod
    def next_after(cls, g):
        if cls.recording or C.size() == 1 or g not in cls.order or not cls.wanted(g):
            return
        k = cls.order.index(g) + 1
        if k < len(cls.order) and cls.order[k] not in cls.pending:
            if cls.worker is None:
                import concurrent.futures
                cls.worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="loom-gather")
            n = cls.order[k]
            cls.pending[n] = cls.worker.submit(lambda: n.gather(n.shards(), clock=False))

    @classmethod
    def end(cls, g):
        if g.is_root:
            cls.recording = False
            for f in cls.pending.values():
                f.result()  # in flight on every rank alike: finished, then dropped
            cls.pending.clear()


def _pre_forward(module, args):
    g = module._loom_shard
    _Prefetch.begin(g)
    views = _Gather.apply(g, *g.shards())
    _Prefetch.next_after(g)
    g.install(views)
    if g.reshard and torch.is_grad_enabled() and views:
        ptr, g.full_bytes = _storage(views[0])
        _Live.by_storage[ptr] = g
        g.hooks_ctx = torch.autograd.graph.saved_tensors_hooks(_pack, _unpack)
        g.hooks_ctx.__enter__()
    return None


def _post_forward(module, args, output):
    g = module._loom_shard
    _Prefetch.end(g)
    if g.hooks_ctx is not None:
        g.hooks_ctx.__exit__(None, None, None)
        g.hooks_ctx = None
        for ptr in [p for p, owner in _Live.by_storage.items() if owner is g]:
            del _Live.by_storage[ptr]
    if g.reshard:
        g.uninstall()
    return output


def _owned_parameters(module):
    """The parameters `module` owns, children sharded before it aside: one entry per distinct
    tensor (a tied parameter lists every (module, name) that holds it), with its qualified name."""
    entries, seen = [], {}
    skip = set()
    for path, mod in module.named_modules():
        if mod is not module and (getattr(mod, "_loom_shard", None) is not None or any(path.startswith(s + ".") for s in skip)):
            skip.add(path)
            continue
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            qual = f"{path}.{name}" if path else name
            if id(p) in seen:
                entries[seen[id(p)]][0].append((mod, name))
            else:
                seen[id(p)] = len(entries)
                entries.append(([(mod, name)], qual, p))
    return entries


def _check_same_everywhere(entries, module):
    """Every rank shards the same parameters with the same shapes: else an error naming the first
    parameter that differs, raised on every rank (never a hang in a collective)."""
    mine = [(qual, tuple(p.shape)) for _, qual, p in entries]
    everyone = C.allgather_object(mine)
    for r, theirs in enumerate(everyone):
        if theirs == mine:
            continue
        for k in range(max(len(theirs), len(mine))):
            a = mine[k] if k < len(mine) else None
            b = theirs[k] if k < len(theirs) else None
            if a != b:
                raise ValueError(f"fully_shard({type(module).__name__}): rank {C.rank()} has parameter {a} where rank "
                                 f"{r} has {b}: every rank must shard the same modules with the same shapes")


def fully_shard(module, *, reshard_after_forward=True, mp_policy=None, shard_weights=None):
    """Shards `module`'s parameters across the ranks (see the module's documentation); returns it.
    Apply it to the blocks first, then to the root."""
    if getattr(module, "_loom_shard", None) is not None:
        raise ValueError(f"fully_shard was already applied to this {type(module).__name__}")
    inside = {id(m) for m in module.modules()}
    for path, mod in module.named_modules():
        owner = getattr(mod, "_loom_owner", None)
        if owner is not None and id(owner) not in inside:
            raise ValueError(f"fully_shard({type(module).__name__}): its {path or 'module'} is already part of a sharded "
                             "parent: apply fully_shard to the blocks first, then to the root")
    entries = _owned_parameters(module)
    for _, qual, p in entries:  # a parameter tied to one that another call sharded: two copies would train apart
        taken = getattr(p, "_loom_sharded_as", None)
        if taken is not None:
            raise ValueError(f"fully_shard({type(module).__name__}): its {qual} is the same tensor as {taken}, which an "
                             "earlier fully_shard call sharded: apply fully_shard to a module that holds both")
    _check_same_everywhere(entries, module)
    if not entries:
        raise ValueError(f"fully_shard({type(module).__name__}): it owns no parameters (its children are sharded)")
    device = entries[0][2].device
    if any(p.device != device for _, _, p in entries):
        raise ValueError(f"fully_shard({type(module).__name__}): every parameter must live on one device")
    weights = _memory_weight(shard_weights)
    layout, at = [], 0
    for mods, qual, p in entries:
        layout.append((mods, qual, tuple(p.shape), at))
        at += p.numel()
    g = _Group(module, layout, [mods[0] for mods, _, _ in entries], weights, reshard_after_forward, mp_policy)
    with torch.no_grad():
        for i, (mods, qual, p) in enumerate(entries):
            part = torch.nn.Parameter(g.my_piece(i, p.detach().float()).clone())
            p._loom_sharded_as = f"{type(module).__name__}'s {qual}"
            for mod, name in mods:
                mod._parameters[name] = part
                if mod is not module:
                    object.__setattr__(mod, "_loom_owner", module)  # not a submodule: no cycle
    module._loom_shard = g
    module.register_forward_pre_hook(_pre_forward)
    module.register_forward_hook(_post_forward)
    for m in module.modules():  # the outermost sharded module counts the backward passes
        if getattr(m, "_loom_shard", None) is not None:
            m._loom_shard.is_root = m is module
    return module


def _groups(module):
    for path, m in module.named_modules():
        g = getattr(m, "_loom_shard", None)
        if g is not None:
            yield path, m, g


def full_state_dict(module):
    """The whole tensors under the module's own names (parameters gathered from every rank's shard,
    and the buffers), on the CPU: for saving, export and evaluation. Every rank calls it."""
    out = {key: value.detach().cpu() for key, value in module.state_dict().items()}  # parts replaced below
    for path, m, g in _groups(module):
        full = g.gather(g.shards()).float().cpu()
        for mods, qual, shape, at in g.entries:
            value = full[at: at + math.prod(shape)].view(shape).clone()
            for mod, name in mods:  # a tied parameter under each of its names
                for key in _names_of(module, mod, name):
                    out[key] = value
    return out


def sharded_names(module):
    """Each state_dict name of a sharded parameter (a tied one under each of its names): its group
    and its entry's index there. Empty for a module not sharded."""
    out = {}
    for _, _, g in _groups(module):
        for i, (mods, _, _, _) in enumerate(g.entries):
            for mod, name in mods:
                for key in _names_of(module, mod, name):
                    out[key] = (g, i)
    return out


def load_full_state_dict(module, tensors):
    """Whole tensors (full_state_dict's names and shapes) into this rank's shards, and the rest
    into the module's own tensors; the caller has checked the names and shapes."""
    sharded = sharded_names(module)
    with torch.no_grad():
        for key, t in module.state_dict().items():
            if key in sharded:
                g, i = sharded[key]
                g.shards()[i].copy_(g.my_piece(i, tensors[key]))
            elif key in tensors:
                t.copy_(tensors[key].reshape(t.shape))


def _shard_owners(module, optimizer):
    """The optimizer's parameter index (its state_dict's) of each shard: (its group, entry)."""
    owners = {id(p): (g, i) for _, _, g in _groups(module) for i, p in enumerate(g.shards())}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {idx: owners[id(p)] for idx, p in enumerate(params) if id(p) in owners}


def full_optimizer_state(module, optimizer):
    """The optimizer's state_dict with each moment of a shard gathered whole, in its parameter's
    shape (scalars such as a step count as they are). Every rank calls it."""
    sd = optimizer.state_dict()
    owners = _shard_owners(module, optimizer)
    keys = sorted((idx, k) for idx in owners for k, v in sd["state"].get(idx, {}).items() if _is_moment(v))
    everyone = C.allgather_object(keys)
    if any(theirs != keys for theirs in everyone):
        raise ValueError("the ranks' optimizers hold state for different parameters: a parameter got a gradient on "
                         "some ranks only")
    state = {idx: dict(st) for idx, st in sd["state"].items()}
    for idx, k in keys:
        g, i = owners[idx]
        state[idx][k] = g.whole_of(i, state[idx][k])
    return {"state": state, "param_groups": sd["param_groups"]}


def shard_optimizer_state(module, optimizer, state):
    """full_optimizer_state's `state` part made this rank's: each whole moment of a shard cut to
    this rank's piece. A moment that is not its parameter's size is refused."""
    owners = _shard_owners(module, optimizer)
    out = {}
    for idx, st in state.items():
        out[idx] = dict(st)
        if idx not in owners:
            continue
        g, i = owners[idx]
        for k, v in st.items():
            if _is_moment(v):
                if v.numel() != math.prod(g.entries[i][2]):
                    raise ValueError(f"the optimizer's {k} of {g.entries[i][1]} has {v.numel()} elements, "
                                     f"its parameter {math.prod(g.entries[i][2])}")
                out[idx][k] = g.my_piece(i, v).clone()
    return out


def _is_moment(v):
    return torch.is_tensor(v) and v.is_floating_point() and v.dim() > 0


def _names_of(root, mod, name):
    return [f"{p}.{name}" if p else name for p, m in root.named_modules(remove_duplicate=False) if m is mod]


def memory_stats(module, optimizer=None):
    """The bytes this rank holds of the sharded state: its parameter shards, their gradients, the
    optimizer's state of them, and the peak (CUDA's peak allocation; on the CPU the process's peak
    resident size)."""
    shards = list({id(p): p for _, _, g in _groups(module) for p in g.shards()}.values())
    param = sum(p.numel() * p.element_size() for p in shards)
    grad = sum(p.grad.numel() * p.grad.element_size() for p in shards if p.grad is not None)
    opt = 0
    if optimizer is not None:
        ids = {id(p) for p in shards}
        for p, state in optimizer.state.items():
            if id(p) in ids:
                opt += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
    if shards and shards[0].is_cuda:
        peak = torch.cuda.max_memory_allocated(shards[0].device)
    else:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"param_bytes": param, "grad_bytes": grad, "optimizer_bytes": opt, "peak_bytes": peak}
