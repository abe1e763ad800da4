#!/usr/bin/env bash
# layout.sh — the source tree keeps the shape doc/runtime.md describes: the runtime's folders
# include one another only along the dependency rule, serve/'s folders likewise and never into the
# runtime's comm/ or train/, no product source file is over 500 lines and no function over 100 (issue 34's rule; tests and
# generated code aside).
. "$(dirname "$0")/lib.sh"
cd "$LOOM_SRCDIR" || exit 99
/usr/bin/python3 - <<'PY' && pass || fail "the layout rules (above)"
import os, re, sys
allowed = {  # folder -> folders of the runtime it may include
    "tensor": set(), "nn": {"tensor"}, "comm": {"tensor"}, "io": {"tensor", "nn", "graph", "proc"},
    "train": {"tensor", "nn", "comm", "io", "graph", "train", "proc"},
    "graph": {"tensor", "proc"},  # the ONNX graph, its reader and executor
    "proc": set(),  # running programs and the one atomic file write: depends on nothing
    "sweep": {"proc", "io"},  # loom-sweep runs programs; of the rest it links io/tensorboard.cpp alone
    "python": {"tensor", "comm", "io"},  # loom.torch's C ABI: collectives, exchange, checkpoints
}
serve_allowed = {  # serve/ folder -> serve/ folders it may include (serve/'s main: any)
    "core": set(), "llm": {"core"}, "spec": {"core"}, "repository": {"core", "llm", "spec"},
    "pipeline": {"core", "spec"}, "frontend": {"core", "llm", "spec", "repository", "pipeline"},
    "controller": {"core", "spec", "frontend"},
}
include = re.compile(r'#include "loom/rt/([a-z_]+)/')
serve_include = re.compile(r'#include "(?:([a-z_]+)/)?[a-z_]+\.hpp"')
bad = []
def folder_of(path):
    parts = path.split("/")
    if parts[0] == "runtime":
        if parts[1] == "include": return parts[4] if len(parts) > 5 else None
        return parts[1] if len(parts) > 2 else None
    return parts[0]
sources = []
for top in ("runtime", "serve", "topology", "spank_plugin", "compress"):
    for root, _, files in os.walk(top):
        for f in files:
            if f.endswith((".cpp", ".hpp", ".cu", ".h")): sources.append(os.path.join(root, f))
for path in sorted(sources):
    text = open(path, encoding="utf-8").read()
    me = folder_of(path)
    for dep in include.findall(text):
        if me in allowed and dep not in allowed[me] | {me}:
            bad.append(f"{path}: {me}/ includes {dep}/ (doc/runtime.md: {me}/ may use {sorted(allowed[me]) or 'nothing'})")
        if me == "serve" and dep in ("comm", "train"):
            bad.append(f"{path}: serve/ includes runtime {dep}/ (inference only)")
        if me in ("topology", "spank_plugin"):
            bad.append(f"{path}: {me}/ includes the runtime")
    if me == "serve" and path.count("/") == 2:
        group = path.split("/")[1]
        for dep in serve_include.findall(text):
            if dep and dep != group and dep in serve_allowed and dep not in serve_allowed.get(group, set()):
                bad.append(f"{path}: serve/{group}/ includes serve/{dep}/ (doc/runtime.md: it may use "
                           f"{sorted(serve_allowed.get(group, set())) or 'nothing'})")
        if '#include "../' in text:
            bad.append(f"{path}: an include that climbs out of its folder (name the folder instead)")
    lines = text.split("\n")
    if len(lines) > 500:
        bad.append(f"{path}: {len(lines)} lines (at most 500)")
    def is_definition(i):  # a header's lines reach '{' before ';' (not a declaration split over lines)
        for line in lines[i:i + 8]:
            end = line.split("//")[0].rstrip()
            if end.endswith(";"): return False
            if end.endswith("{"): return True
        return False
    start = None  # functions at column 0 (clang-format style): a header line, then '}' at column 0
    for i, line in enumerate(lines):
        header = re.match(r"^[A-Za-z_].*\(", line) and not line.rstrip().endswith(";") and \
            not line.startswith(("namespace", "struct", "class", "enum", "using", "template", "extern \"C\" {"))
        if start is None and header and is_definition(i):
            start = i
        elif start is not None and line.startswith("}"):
            if i - start - 1 > 100:
                bad.append(f"{path}:{start + 1}: a function of {i - start - 1} lines (at most 100)")
            start = None
for b in bad: print("layout:", b)
print(f"layout: {len(sources)} source files checked")
sys.exit(1 if bad else 0)
PY
finish
