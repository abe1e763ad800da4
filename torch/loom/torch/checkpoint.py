"""Checkpoint: Contract 4's HDF5 checkpoints (the runtime's writer: Fletcher32 on every dataset,
a temporary name, flushed and renamed) of a PyTorch model, its optimizer and the sampler's
place; restore() from the newest that verifies; on SIGUSR1/SIGTERM every rank finishes its step,
the checkpoint is written and the process exits REQUEUE (75) for the batch script to requeue."""
import ctypes
import glob
import io
import json
import os
import pickle
import re
import sys
import threading
import time

import torch

from . import _core
from . import collectives as C
from . import stop

REQUEUE = 75
_PARAMS, _OPT = 0, 1


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

    def save(self, step, wait=False):
        """Rank 0 writes the checkpoint of `step` (the ranks hold the same weights and moments)."""
        self._last_write = time.monotonic()
        if C.rank() != 0:
            return
        self.wait()
        h = self._build(step)
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

    def _build(self, step):
        h = ctypes.c_void_p()
        _core.check(_core.lib.lt_ckpt_new(ctypes.byref(h)))
        state = {"step": step, "format": "loom.torch 1", "world": C.size()}
        if self.model is not None:
            extra = {}
            for name, t in self.model.state_dict().items():
                if t.is_floating_point():
                    _add(h, _PARAMS, name, t)
                    if t.dtype != torch.float32:  # stored as float32, cast back on restore
                        state.setdefault("dtypes", {})[name] = str(t.dtype)
                else:
                    extra[name] = t.tolist()
            state["buffers"] = extra
        if self.optimizer is not None:
            state["optimizer"] = self._optimizer_state(h)
        if self.sampler is not None:
            loom = getattr(self.optimizer, "_loom", None)
            state["sampler"] = self.sampler.state(step * (loom.passes if loom is not None else 1))
        rng = pickle.dumps({"torch": torch.get_rng_state(),
                            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []})
        model_config = json.dumps({"type": "torch", "class": type(self.model).__name__ if self.model else None})
        train_config = json.dumps({"every_steps": self.every_steps, "every_minutes": self.every_minutes, "keep": self.keep})
        for which, text in ((0, model_config.encode()), (1, train_config.encode()), (2, json.dumps(state).encode()), (3, rng)):
            _core.check(_core.lib.lt_ckpt_set_text(h, which, text, len(text)))
        return h

    def _optimizer_state(self, h):
        sd = self.optimizer.state_dict()
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
            state = json.loads(_text(h, 2))
            if state.get("format") != "loom.torch 1":
                raise ValueError(f"{chosen} is not a loom.torch checkpoint (a loom-train one?)")
            if self.model is not None:
                self._load_model(chosen, _tensors(h, _PARAMS), state)
            if self.optimizer is not None and "optimizer" in state:
                self._load_optimizer(_tensors(h, _OPT), state["optimizer"])
            rng = pickle.loads(_text(h, 3))
        finally:
            _core.lib.lt_ckpt_free(h)
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(rng["cuda"])
        self.steps = int(state["step"])
        if self.sampler is not None and "sampler" in state:
            self.sampler.restore(state["sampler"], same_world=state.get("world") == C.size())
        if C.rank() == 0:
            print(f"loom.torch: resumed from {chosen} (step {self.steps})", file=sys.stderr, flush=True)
        return self.steps

    def _load_model(self, path, saved, state):
        own = self.model.state_dict()
        for name, t in own.items():  # the first tensor that does not fit is named
            if not t.is_floating_point():
                continue
            if name not in saved:
                raise ValueError(f"{path} is from a different model: it has no tensor {name}")
            if list(saved[name].shape) != list(t.shape if t.dim() else [1]):
                raise ValueError(f"{path} is from a different model: {name} is {list(saved[name].shape)} there, "
                                 f"{list(t.shape)} here")
        extra = [n for n in saved if n not in own]
        if extra:
            raise ValueError(f"{path} is from a different model: it has {extra[0]}, which this model lacks")
        with torch.no_grad():
            for name, t in own.items():
                if t.is_floating_point():
                    t.copy_(saved[name].reshape(t.shape))  # cast back to the tensor's own dtype
                elif name in state.get("buffers", {}):
                    t.copy_(torch.tensor(state["buffers"][name], dtype=t.dtype))

    def _load_optimizer(self, saved, meta):
        groups = meta["param_groups"]
        if isinstance(groups, dict):
            groups = torch.load(io.BytesIO(bytes.fromhex(groups["pickled"])))
        st = {}
        for key, (dtype, shape) in meta["tensors"].items():
            idx, name = key.split(".", 1)
            st.setdefault(int(idx), {})[name] = saved[key].reshape(shape).to(getattr(torch, dtype.split(".")[-1]))
        for key, v in meta["plain"].items():
            idx, name = key.split(".", 1)
            st.setdefault(int(idx), {})[name] = v
        self.optimizer.load_state_dict({"state": st, "param_groups": groups})
        loom = getattr(self.optimizer, "_loom", None)
        if loom is not None and meta.get("steps") is not None:
            loom.step_no = int(meta["steps"])
