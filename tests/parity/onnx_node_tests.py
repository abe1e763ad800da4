"""ONNX's own backend node tests through Loom's graph executor.

    onnx_node_tests.py ONNX_RUN FILTERS WORKDIR [--json OUT]

Debian's python3-onnx carries the generators of ONNX's node tests (onnx.backend.test.case.node):
each case is a model of one operator (or a small function of several) with inputs and the outputs
ONNX's reference computes. This writes every case's model and inputs, runs them all through
`onnx_run --batch` (one process), and compares each output as ONNX's backend runner does
(numpy.testing.assert_allclose, rtol 1e-3, atol 1e-7; exact for integers and booleans).

A case is
  passed       every output matches;
  unsupported  the executor refused it saying what "is not supported" (an operator, an opset, a
               data type; at load, or at run where only an input's value says it: Dropout's
               training_mode), or an input is of a type it takes no tensor of (float64, strings,
               sequences, ...): refused, never answered;
  failed       anything else: an answer that differs, a run that throws, a load refused for
               another reason.
Every case whose operators the executor claims (`onnx_run --operators`) must pass, or be named in
FILTERS with the reason it does not (ONNX Runtime keeps its own skips the same way, in
onnxruntime/test/testdata/onnx_backend_test_series_filters.jsonc). Exit 1 when one does not.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

# NumPy 1.24 removed the aliases ONNX 1.12's case generators still use.
for alias, real in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if alias not in np.__dict__:
        setattr(np, alias, real)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnx.backend.test.case import node as node_cases  # noqa: E402

DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.int64): "int64", np.dtype(np.int32): "int32",
          np.dtype(np.uint8): "uint8", np.dtype(np.bool_): "bool", np.dtype(np.int8): "int8",
          np.dtype(np.float16): "float16"}
NP = {v: k for k, v in DTYPES.items()}


def read_filters(path):
    out = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()  # comments
        if not line:
            continue
        name, _, why = line.partition(" ")
        if not why.strip():
            sys.exit(f"{path}: '{name}' has no reason")
        out[name] = why.strip()
    return out


def write_case(case, root):
    """The case's model and first data set's inputs; the manifest line, or why it is unsupported."""
    d = os.path.join(root, case.name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    inputs, outputs = case.data_sets[0]
    specs = []
    graph_inputs = [i for i in case.model.graph.input]
    for k, (gi, x) in enumerate(zip(graph_inputs, inputs)):
        if not gi.type.HasField("tensor_type"):
            return None, outputs, "input '%s' is not a tensor" % gi.name
        a = np.asarray(x)
        if a.dtype not in DTYPES:
            return None, outputs, "input '%s' is %s, a type the executor takes no tensor of" % (gi.name, a.dtype)
        path = os.path.join(d, "in_%d.bin" % k)
        np.ascontiguousarray(a).tofile(path)
        specs.append("%s:%s:%s:%s" % (gi.name, DTYPES[a.dtype], "x".join(str(s) for s in a.shape), path))
    for o in case.model.graph.output:
        if not o.type.HasField("tensor_type"):
            return None, outputs, "output '%s' is not a tensor" % o.name
    return " ".join([d, os.path.join(d, "model.onnx")] + specs), outputs, None


def compare(expected, d, produced):
    """None when every output matches, else what differs."""
    if len(produced) != len(expected):
        return "%d outputs, expected %d" % (len(produced), len(expected))
    for k, (want, (dtype, shape)) in enumerate(zip(expected, produced)):
        want = np.asarray(want)
        if dtype not in NP:
            return "output %d is %s" % (k, dtype)
        got = np.fromfile(os.path.join(d, "out_%d.bin" % k), dtype=NP[dtype])
        if got.size != int(np.prod(shape)):
            return "output %d: %d values for shape %s" % (k, got.size, shape)
        got = got.reshape(shape)
        if tuple(got.shape) != tuple(want.shape):
            return "output %d has shape %s, expected %s" % (k, list(got.shape), list(want.shape))
        if want.dtype.kind in "fc":
            try:
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-7)
            except AssertionError as e:
                return "output %d differs: %s" % (k, " ".join(str(e).split())[:200])
        elif not np.array_equal(got.astype(want.dtype), want):
            return "output %d differs (exact: %s)" % (k, want.dtype)
    return None


def main():
    onnx_run, filters_path, root = sys.argv[1:4]
    json_out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    claimed = set(subprocess.run([onnx_run, "--operators"], check=True, capture_output=True, text=True).stdout.split())
    filters = read_filters(filters_path)
    cases = [c for c in node_cases.collect_testcases(None) if c.kind == "node"]
    results, manifest, expected, ops_of = {}, [], {}, {}
    for c in cases:
        ops_of[c.name] = sorted({n.op_type for n in c.model.graph.node})
        line, outs, why = write_case(c, root)
        expected[c.name] = outs
        if why:
            results[c.name] = ("unsupported", why)
        else:
            manifest.append(line)
    with open(os.path.join(root, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    run = subprocess.run([onnx_run, "--batch", os.path.join(root, "manifest.txt")], capture_output=True, text=True)
    if run.returncode not in (0, 1):
        sys.exit("onnx_run --batch ended with status %d: %s" % (run.returncode, run.stderr[-2000:]))
    for line in run.stdout.splitlines():
        d, status, rest = (line.split("\t") + ["", ""])[:3]
        name = os.path.basename(d)
        if status == "ok":
            produced = [(o.split()[0], [int(s) for s in o.split()[1].split("x") if s] if len(o.split()) > 1 else [])
                        for o in rest.split(";") if o]
            diff = compare(expected[name], d, produced)
            results[name] = ("passed", "") if diff is None else ("failed", diff)
        elif re.search(r"is not supported", rest):  # refused by name, at load or (an input's value) at run
            results[name] = ("unsupported", "%s: %s" % (status, rest))
        else:
            results[name] = ("failed", "%s: %s" % (status, rest))
    for c in cases:  # a case the batch never reported: it took the runner down
        results.setdefault(c.name, ("failed", "no answer from onnx_run (it stopped before this case)"))
    counts = {k: sum(1 for s, _ in results.values() if s == k) for k in ("passed", "failed", "unsupported")}
    total = len(results)  # distinct case names
    bad, stale = [], []
    for name, (status, why) in sorted(results.items()):
        mine = all(op in claimed for op in ops_of[name])
        if status != "passed" and mine and name not in filters:
            bad.append("%s (%s): %s: %s" % (name, "+".join(ops_of[name]), status, why))
        if status == "passed" and name in filters:
            stale.append(name)
    print("onnx node tests: %d cases, %d passed (%.1f%%), %d failed, %d unsupported; %d filtered with a reason"
          % (total, counts["passed"], 100.0 * counts["passed"] / total, counts["failed"], counts["unsupported"], len(filters)))
    by_op = {}
    for name, (status, _) in results.items():
        for op in ops_of[name]:
            by_op.setdefault(op, [0, 0])
            by_op[op][0] += status == "passed"
            by_op[op][1] += 1
    claimed_cases = sum(1 for n in results if all(op in claimed for op in ops_of[n]))
    print("cases of the %d operators the executor claims: %d, passed %d" %
          (len(claimed), claimed_cases, sum(1 for n, (s, _) in results.items() if s == "passed" and all(op in claimed for op in ops_of[n]))))
    for s in stale:
        print("filtered but passes now (take it out of the filter file): " + s)
    for b in bad:
        print("FAIL: " + b)
    if json_out:
        json.dump({"total": total, **counts, "results": {k: list(v) for k, v in results.items()}}, open(json_out, "w"), indent=1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
