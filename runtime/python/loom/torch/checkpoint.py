"""Checkpoint: loom-train's HDF5 checkpoints (the runtime's writer: Fletcher32 on every dataset,
a temporary name, flushed and renamed) of a PyTorch model, its optimizer and the sampler's
place; restore() from the newest that verifies; on SIGUSR1/SIGTERM every rank finishes its step,
the checkpoint is written and the process exits REQUEUE (75) for the batch script to requeue.
A model sharded with fully_shard is saved whole (its parameters and the optimizer's moments
gathered, rank 0 writing), so it restores on any world size and any memory weights.

A checkpoint is a file people copy between users and clusters, so it is read as data only:
tensors, JSON, and the random-number states as hexadecimal bytes. Nothing in it is unpickled;
where torch itself must read something (optimizer hyperparameters that are not plain numbers),
it does so with weights_only=True."""
import ctypes
import glob
import io
import json
import os
import re
import sys
import threading
import time

import torch

from . import _core
from . import collectives as C
from . import fsdp
from . import stop

REQUEUE = 75
_PARAMS, _OPT = 0, 1
_RNG_FORMAT = "loom.torch rng 1"
_MAX_RNG_BYTES = 1 << 20
_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16)}


class CheckpointError(ValueError):
    """A checkpoint that cannot be restored: named, with what in it is wrong."""


def _hex(t):
    """A byte tensor (a random-number generator's state) as hexadecimal text."""
    return bytes(t.to("cpu", torch.uint8).tolist()).hex()


def _state_bytes(text, what):
    try:
        if isinstance(text, str) and len(text) <= 2 * _MAX_RNG_BYTES:
            return torch.tensor(list(bytes.fromhex(text)), dtype=torch.uint8)
    except ValueError:
        pass
    raise CheckpointError(f"{what} is not hexadecimal bytes of at most {_MAX_RNG_BYTES}")


def _float_host(t):
    return t.detach().to("cpu", torch.float32).contiguous()


def _add(h, group, name, t):
    t = _float_host(t)
    shape = (ctypes.c_int64 * max(1, t.dim()))(*t.shape)
    _core.check(_core.lib.lt_ckpt_add(h, group, name.encode(), ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_float)),
                                      t.dim(), shape))


def _text(h, which):
    n = ctypes.c_size_t()
    _core.check(_core.lib.lt_ckpt_text(h, which, None, 0, ctypes.byref(n)))
    buf = ctypes.create_string_buffer(n.value)
    _core.check(_core.lib.lt_ckpt_text(h, which, buf, n.value, ctypes.byref(n)))
    return buf.raw[: n.value]


def _tensors(h, group):
    n = ctypes.c_size_t()
    _core.check(_core.lib.lt_ckpt_count(h, group, ctypes.byref(n)))
    out = {}
    name = ctypes.create_string_buffer(1024)
    for i in range(n.value):
        nd, shape = ctypes.c_int(), (ctypes.c_int64 * 16)()
        _core.check(_core.lib.lt_ckpt_info(h, group, i, name, len(name), ctypes.byref(nd), shape))
        t = torch.empty([shape[k] for k in range(nd.value)], dtype=torch.float32)
        _core.check(_core.lib.lt_ckpt_read(h, group, i, ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_float))))
        out[name.value.decode()] = t
    return out


class Checkpoint:
    """Checkpoint(directory, model=, optimizer=, sampler=, every_steps=, every_minutes=, keep=,
    asynchronous=). Call restore() once before training (it returns the step to start from) and
    step() after every optimizer.step()."""

    def __init__(self, directory, model=None, optimizer=None, sampler=None, every_steps=None, every_minutes=None,
                 keep=3, asynchronous=False):
        if every_steps is not None and int(every_steps) <= 0:
            raise ValueError(f"every_steps must be positive, not {every_steps}")
        if every_minutes is not None and not float(every_minutes) > 0:
            raise ValueError(f"every_minutes must be positive, not {every_minutes}")
        if int(keep) < 1:
            raise ValueError(f"keep must be at least 1, not {keep}")
        self.directory, self.model, self.optimizer, self.sampler = directory, model, optimizer, sampler
        self.every_steps = int(every_steps) if every_steps else None
        self.every_minutes = float(every_minutes) if every_minutes else None
        self.keep, self.asynchronous = int(keep), bool(asynchronous)
        self.steps = 0
        self._last_write = time.monotonic()
        self._writer = None
        os.makedirs(directory, exist_ok=True)
        stop.watch_signals()

    # ---------------------------------------------------------------- writing
    def path(self, step):
        return os.path.join(self.directory, f"ckpt-{step:010d}.h5")

    def step(self, n=None):
        """After optimizer.step(): writes when due; after SIGUSR1/SIGTERM (seen by every rank at
        the same step), writes and exits REQUEUE."""
        self.steps = self.steps + 1 if n is None else int(n)
        if stop.agreed():
            self.save(self.steps, wait=True)
            if C.rank() == 0:
                print(f"loom.torch: stopping at step {self.steps} (signal {stop.signal_name()}); checkpoint "
                      f"{self.path(self.steps)}; exit {REQUEUE} to requeue", file=sys.stderr, flush=True)
            sys.exit(REQUEUE)
        due = self.every_steps and self.steps % self.every_steps == 0
        due = due or (self.every_minutes and time.monotonic() - self._last_write >= 60 * self.every_minutes)
        if due:
            self.save(self.steps)

    def _sharded(self):
        return self.model is not None and bool(fsdp.sharded_names(self.model))

    def _whole_state(self):
        """The model's and the optimizer's state_dicts, whole: a model sharded with fully_shard is
        gathered (every rank takes part), so a checkpoint restores on any world and memory weights."""
        model = optimizer = None
        sharded = self._sharded()
        if self.model is not None:
            model = fsdp.full_state_dict(self.model) if sharded else self.model.state_dict()
        if self.optimizer is not None:
            optimizer = (fsdp.full_optimizer_state(self.model, self.optimizer) if sharded
                         else self.optimizer.state_dict())
        return model, optimizer

    def save(self, step, wait=False):
        """Rank 0 writes the checkpoint of `step` (the ranks hold the same weights and moments, or
        each gives its shards' part of them)."""
        self._last_write = time.monotonic()
        model, optimizer = self._whole_state()
        if C.rank() != 0:
            return
        self.wait()
        h = self._build(step, model, optimizer)
        path = self.path(step)

        def write():
            try:
                _core.check(_core.lib.lt_ckpt_save(h, path.encode()))
                self._prune()
            finally:
                _core.lib.lt_ckpt_free(h)

        if self.asynchronous and not wait:  # the copies are made: training goes on while it writes
            self._writer = threading.Thread(target=write, name="loom-checkpoint")
            self._writer.start()
        else:
            write()

    def wait(self):
        if self._writer is not None:
            self._writer.join()
            self._writer = None

    def _prune(self):
        for old in sorted(glob.glob(os.path.join(self.directory, "ckpt-*.h5")))[: -self.keep]:
            os.unlink(old)

    def _build(self, step, model, optimizer):
        h = ctypes.c_void_p()
        _core.check(_core.lib.lt_ckpt_new(ctypes.byref(h)))
        state = {"step": step, "format": "loom.torch 1", "world": C.size()}
        if model is not None:
            extra = {}
            for name, t in model.items():
                if t.is_floating_point():
                    _add(h, _PARAMS, name, t)
                    if t.dtype != torch.float32:  # stored as float32, cast back on restore
                        state.setdefault("dtypes", {})[name] = str(t.dtype)
                else:
                    extra[name] = t.tolist()
            state["buffers"] = extra
        if optimizer is not None:
            state["optimizer"] = self._optimizer_state(h, optimizer)
        if self.sampler is not None:
            loom = getattr(self.optimizer, "_loom", None)
            state["sampler"] = self.sampler.state(step * (loom.passes if loom is not None else 1))
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
        rng = json.dumps({"format": _RNG_FORMAT, "torch": _hex(torch.get_rng_state()), "cuda": [_hex(t) for t in cuda]}).encode()
        model_config = json.dumps({"type": "torch", "class": type(self.model).__name__ if self.model else None})
        train_config = json.dumps({"every_steps": self.every_steps, "every_minutes": self.every_minutes, "keep": self.keep})
        for which, text in ((0, model_config.encode()), (1, train_config.encode()), (2, json.dumps(state).encode()), (3, rng)):
            _core.check(_core.lib.lt_ckpt_set_text(h, which, text, len(text)))
        return h

    def _optimizer_state(self, h, sd):
        tensors, plain = {}, {}
        for idx, st in sd["state"].items():
            for key, v in st.items():
                if torch.is_tensor(v) and v.is_floating_point():
                    _add(h, _OPT, f"{idx}.{key}", v)
                    tensors[f"{idx}.{key}"] = [str(v.dtype), list(v.shape)]
                else:
                    plain[f"{idx}.{key}"] = v.tolist() if torch.is_tensor(v) else v
        try:  # hyperparameters as JSON where they are plain numbers (readable in loom-train --inspect)
            groups = json.loads(json.dumps(sd["param_groups"]))
        except TypeError:
            buf = io.BytesIO()
            torch.save(sd["param_groups"], buf)
            groups = {"pickled": buf.getvalue().hex()}
        loom = getattr(self.optimizer, "_loom", None)
        return {"tensors": tensors, "plain": plain, "param_groups": groups,
                "steps": loom.step_no if loom is not None else None}

    # ---------------------------------------------------------------- reading
    def restore(self):
        """Resumes from the newest checkpoint in the directory that verifies (a damaged one is
        skipped with a warning); returns its step, or 0 when there is none. Any world size."""
        chosen = None
        if C.rank() == 0:
            for path in sorted(glob.glob(os.path.join(self.directory, "ckpt-*.h5")), reverse=True):
                if not re.fullmatch(r"ckpt-\d{10}\.h5", os.path.basename(path)):
                    continue
                h = ctypes.c_void_p()
                if _core.lib.lt_ckpt_load(path.encode(), ctypes.byref(h)) == 0:
                    _core.lib.lt_ckpt_free(h)
                    chosen = path
                    break
                print(f"loom.torch: skipping {path}: {_core.lib.lt_last_error().decode(errors='replace')}",
                      file=sys.stderr, flush=True)
        chosen = C.broadcast_object(chosen, 0)
        if chosen is None:
            return 0
        h = ctypes.c_void_p()
        _core.check(_core.lib.lt_ckpt_load(chosen.encode(), ctypes.byref(h)))
        try:
            self._restore_from(chosen, h)
        except CheckpointError as e:
            raise CheckpointError(f"{chosen}: {e}") from None
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, RuntimeError) as e:
            raise CheckpointError(f"{chosen}: not a checkpoint loom.torch can restore: {type(e).__name__}: {e}") from None
        finally:
            _core.lib.lt_ckpt_free(h)
        if C.rank() == 0:
            print(f"loom.torch: resumed from {chosen} (step {self.steps})", file=sys.stderr, flush=True)
        return self.steps

    def _restore_from(self, path, h):
        state = json.loads(_text(h, 2))
        if not isinstance(state, dict) or state.get("format") != "loom.torch 1":
            raise CheckpointError("not a loom.torch checkpoint (a loom-train one?)")
        step = state.get("step")
        if not isinstance(step, int) or step < 0:
            raise CheckpointError(f"its step {step!r} is not a whole number of at least 0")
        if self.model is not None:
            self._load_model(path, _tensors(h, _PARAMS), state)
        if self.optimizer is not None and "optimizer" in state:
            self._load_optimizer(_tensors(h, _OPT), state["optimizer"])
        self._load_rng(path, _text(h, 3))
        self.steps = step
        if self.sampler is not None and "sampler" in state:
            self.sampler.restore(state["sampler"], same_world=state.get("world") == C.size())
        if self._sharded():  # the next backward is the next batch's
            fsdp.set_batches(self.model, state["sampler"]["batches"] if "sampler" in state else step)

    @staticmethod
    def _load_rng(path, raw):
        """The random-number states, as hexadecimal bytes in JSON. An older loom.torch pickled
        them: such a file is restored without them (a pickle can run code), and says so."""
        try:
            rng = json.loads(raw)
        except ValueError:
            rng = None
        if not isinstance(rng, dict) or rng.get("format") != _RNG_FORMAT:
            print(f"loom.torch: {path}: its random-number state is not in loom.torch's data format (older versions "
                  "pickled it, and pickles are not read: they can run code); the random-number generators are not restored",
                  file=sys.stderr, flush=True)
            return
        cpu = _state_bytes(rng.get("torch"), "the random-number state")
        cuda = rng.get("cuda") or []
        if not isinstance(cuda, list) or len(cuda) > 1024:
            raise CheckpointError("its CUDA random-number states are not a list")
        cuda = [_state_bytes(x, "a CUDA random-number state") for x in cuda]
        torch.set_rng_state(cpu)
        if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)

    def _load_model(self, path, saved, state):
        own = self.model.state_dict()
        sharded = fsdp.sharded_names(self.model)
        for name, t in own.items():  # the first tensor that does not fit is named
            if not t.is_floating_point():
                continue
            shape = list(sharded[name][0].entries[sharded[name][1]][2]) if name in sharded else list(t.shape)
            if name not in saved:
                raise ValueError(f"{path} is from a different model: it has no tensor {name}")
            if list(saved[name].shape) != (shape or [1]):
                raise ValueError(f"{path} is from a different model: {name} is {list(saved[name].shape)} there, "
                                 f"{shape} here")
        extra = [n for n in saved if n not in own]
        if extra:
            raise ValueError(f"{path} is from a different model: it has {extra[0]}, which this model lacks")
        buffers = state.get("buffers", {})
        whole = {name: saved[name] if name in saved else torch.tensor(buffers[name], dtype=t.dtype)
                 for name, t in own.items() if name in saved or name in buffers}
        fsdp.load_full_state_dict(self.model, whole)  # cast back to each tensor's own dtype

    def _load_optimizer(self, saved, meta):
        groups = meta["param_groups"]
        if isinstance(groups, dict):  # hyperparameters that are not plain numbers: tensors, read as data
            try:
                groups = torch.load(io.BytesIO(bytes.fromhex(groups["pickled"])), weights_only=True)
            except Exception as e:  # noqa: BLE001 - whatever the unpickler refused, it is named
                raise CheckpointError(f"its optimizer hyperparameters cannot be read as data: {e}") from None
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise CheckpointError("its optimizer's param_groups are not a list of groups")
        st = {}
        for key, (dtype, shape) in meta["tensors"].items():
            idx, name = key.split(".", 1)
            if dtype not in _DTYPES:
                raise CheckpointError(f"optimizer tensor {key} has the dtype {dtype!r}, not one of {sorted(_DTYPES)}")
            if key not in saved or saved[key].numel() != _numel(shape):
                raise CheckpointError(f"optimizer tensor {key} is not the {list(shape)} its description says")
            st.setdefault(int(idx), {})[name] = saved[key].reshape(shape).to(_DTYPES[dtype])
        for key, v in meta["plain"].items():
            idx, name = key.split(".", 1)
            st.setdefault(int(idx), {})[name] = v
        if self._sharded():
            st = fsdp.shard_optimizer_state(self.model, self.optimizer, st)
        self.optimizer.load_state_dict({"state": st, "param_groups": groups})
        self._check_moments()
        loom = getattr(self.optimizer, "_loom", None)
        if loom is not None and meta.get("steps") is not None:
            loom.step_no = int(meta["steps"])

    def _check_moments(self):
        """Each restored moment has its parameter's shape: a crafted file's [1] would otherwise be
        broadcast, or read past its end, by the optimizer's next step."""
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                for name, v in self.optimizer.state.get(p, {}).items():
                    if torch.is_tensor(v) and v.dim() > 0 and v.shape != p.shape:
                        raise CheckpointError(f"the optimizer's {name} is {list(v.shape)}, its parameter {list(p.shape)}")


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n
