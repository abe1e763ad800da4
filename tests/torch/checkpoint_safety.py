"""A loom.torch checkpoint is data: crafted files (pickles that run a command, moments of the
wrong shape, dtypes that are not dtypes, negative steps) are refused by name or, for the random
state of an older format, skipped with a warning; none runs code, none crashes the resume. One
process; prints 'checkpoint safety: N checks passed' or exits 1 naming the first that failed."""
import ctypes
import io
import json
import os
import pickle
import sys
import tempfile

import torch

import loom.torch as lt
from loom.torch import _core
from loom.torch.checkpoint import _OPT, _PARAMS, _tensors, _text

tmp = tempfile.mkdtemp(prefix="loom-ckpt-safety-")
marker = os.path.join(tmp, "code-ran")
checks = 0


class RunsCode:  # what a crafted pickle holds: unpickling it runs a shell command
    def __reduce__(self):
        return os.system, (f"touch {marker}",)


def ok(cond, what):
    global checks
    if not cond:
        print(f"checkpoint safety: FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


def trained(directory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(8, 6)).pow(2).mean().backward()
        opt.step()
    lt.Checkpoint(directory, model=model, optimizer=opt).save(2)
    return model, opt


def craft(src, dst_dir, texts=None, opt=None):
    """dst_dir/ckpt-0000000002.h5: src's tensors and texts, with `texts` (slot: bytes) and `opt`
    (name: tensor) put in their place; written by the runtime's own checkpoint writer."""
    h = ctypes.c_void_p()
    _core.check(_core.lib.lt_ckpt_load(src.encode(), ctypes.byref(h)))
    params, moments = _tensors(h, _PARAMS), _tensors(h, _OPT)
    old = {k: _text(h, k) for k in range(4)}
    _core.lib.lt_ckpt_free(h)
    moments.update(opt or {})
    out = ctypes.c_void_p()
    _core.check(_core.lib.lt_ckpt_new(ctypes.byref(out)))
    for group, tensors in ((_PARAMS, params), (_OPT, moments)):
        for name, t in tensors.items():
            t = t.contiguous()
            shape = (ctypes.c_int64 * max(1, t.dim()))(*t.shape)
            _core.check(_core.lib.lt_ckpt_add(out, group, name.encode(), ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_float)),
                                              t.dim(), shape))
    old.update(texts or {})
    for k, text in old.items():
        _core.check(_core.lib.lt_ckpt_set_text(out, k, text, len(text)))
    os.makedirs(dst_dir, exist_ok=True)
    path = os.path.join(dst_dir, "ckpt-0000000002.h5")
    _core.check(_core.lib.lt_ckpt_save(out, path.encode()))
    _core.lib.lt_ckpt_free(out)
    return path


def restore(directory):
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    try:
        step = lt.Checkpoint(directory, model=model, optimizer=opt).restore()
        opt.zero_grad()
        model(torch.randn(8, 6)).pow(2).mean().backward()
        opt.step()  # the step after a resume runs on what was restored
        return step, model, None
    except lt.CheckpointError as e:
        return None, model, str(e)


lt.init()
good = os.path.join(tmp, "good")
model, _ = trained(good)
src = os.path.join(good, "ckpt-0000000002.h5")

# The random state round-trips as data: the numbers after a resume are those after the save.
torch.manual_seed(7)
lt.Checkpoint(os.path.join(tmp, "rng"), model=model).save(2)
expected = torch.rand(3)
torch.manual_seed(99)
lt.Checkpoint(os.path.join(tmp, "rng"), model=model).restore()
ok(torch.equal(torch.rand(3), expected), "the random state restored")

# A pickle in the random-state slot (what older versions wrote, and what an attacker would):
# not read, said, and the rest restored.
step, restored, err = restore(os.path.dirname(craft(src, os.path.join(tmp, "rng-pickle"),
                                                    texts={3: pickle.dumps({"torch": RunsCode()})})))
ok(not os.path.exists(marker), "a pickled random state ran code")
ok(err is None and step == 2, f"a checkpoint with a pickled random state is restored without it ({err})")


def refused(name, why, texts=None, opt=None):
    step, _, err = restore(os.path.dirname(craft(src, os.path.join(tmp, name), texts=texts, opt=opt)))
    ok(not os.path.exists(marker), f"{name}: code ran")
    ok(err is not None and why in err and "ckpt-0000000002.h5" in err, f"{name}: refused naming '{why}' and the file, got {err!r}")


h = ctypes.c_void_p()
_core.check(_core.lib.lt_ckpt_load(src.encode(), ctypes.byref(h)))
state = json.loads(_text(h, 2))
_core.lib.lt_ckpt_free(h)


def with_state(change):
    s = json.loads(json.dumps(state))
    change(s)
    return {2: json.dumps(s).encode()}


buf = io.BytesIO()
torch.save([{"lr": RunsCode()}], buf)
refused("groups-torch-save", "cannot be read as data",
        texts=with_state(lambda s: s["optimizer"].update(param_groups={"pickled": buf.getvalue().hex()})))
refused("groups-pickle", "cannot be read as data",
        texts=with_state(lambda s: s["optimizer"].update(param_groups={"pickled": pickle.dumps([RunsCode()]).hex()})))
key = next(k for k in state["optimizer"]["tensors"] if k.endswith("exp_avg"))
refused("moment-shape", "its parameter", opt={key: torch.zeros(1)},
        texts=with_state(lambda s: s["optimizer"]["tensors"].update({key: ["torch.float32", [1]]})))
refused("moment-size", "is not the", opt={key: torch.zeros(1)})
refused("dtype", "not one of", texts=with_state(lambda s: s["optimizer"]["tensors"].update({key: ["torch.load", [1]]})))
refused("step", "step -5", texts=with_state(lambda s: s.update(step=-5)))
refused("state-json", "not a checkpoint loom.torch can restore", texts={2: b"[" * 100000})
refused("rng-shape", "random-number", texts={3: json.dumps({"format": "loom.torch rng 1", "torch": "zz"}).encode()})
print(f"checkpoint safety: {checks} checks passed")
