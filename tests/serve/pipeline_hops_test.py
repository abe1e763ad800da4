"""pipeline_hops_test.py — a pipeline's hops are other servers, and what they answer is checked
(issue 33, items 7 and 8). A step served by a scripted KServe v2 gRPC server (grpcio, in this
process) whose metadata says FP32 [-1, 4] answers, by the request's first value: the truth; 3
bytes for [2, 4]; shape [-7, 4]; shape [2^31, 2^31]; INT64 instead of FP32; or a 12 MB tensor
(over gRPC's default 4 MiB, as a BERT hidden state at batch 32 is). loom-serve serves the pipeline;
each bad answer must end as an error naming the step and the fault, never a 200; the large one
must pass through whole.

usage: pipeline_hops_test.py LOOM_SERVE SRC_DIR WORK_DIR
"""
import json
import os
import sys
import urllib.error
import urllib.request
from concurrent import futures

import numpy as np

serve, src, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kserve_py import Checks, kserve_messages, start_server  # noqa: E402

pb = kserve_messages(f"{src}/serve/proto", work)
import grpc  # noqa: E402

check = Checks()
BIG = 64 << 20


def metadata(req, ctx):
    r = pb.ModelMetadataResponse(name=req.name, platform="scripted")
    r.inputs.add(name="x", datatype="FP32", shape=[-1, 4])
    r.outputs.add(name="y", datatype="FP32", shape=[-1, 4])
    return r


def infer(req, ctx):
    x = np.frombuffer(req.raw_input_contents[0], np.float32).reshape(list(req.inputs[0].shape))
    mode = int(x.flat[0])
    r = pb.ModelInferResponse(model_name=req.model_name)
    o = r.outputs.add(name="y", datatype="FP32", shape=list(x.shape))
    data = (x * 2).astype(np.float32).tobytes()
    if mode == 1:
        data = data[:3]
    elif mode == 2:
        o.ClearField("shape")
        o.shape.extend([-7, 4])
    elif mode == 3:
        o.ClearField("shape")
        o.shape.extend([1 << 31, 1 << 31])
    elif mode == 4:
        o.datatype = "INT64"
    r.raw_output_contents.append(data)
    return r


handlers = {
    "ModelMetadata": grpc.unary_unary_rpc_method_handler(metadata, pb.ModelMetadataRequest.FromString,
                                                         pb.ModelMetadataResponse.SerializeToString),
    "ModelInfer": grpc.unary_unary_rpc_method_handler(infer, pb.ModelInferRequest.FromString,
                                                      pb.ModelInferResponse.SerializeToString),
}
step = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.max_receive_message_length", BIG),
                                                           ("grpc.max_send_message_length", BIG)])
step.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers)])
port = step.add_insecure_port("127.0.0.1:0")
step.start()

spec = os.path.join(work, "hops.yaml")
open(spec, "w").write(f"""apiVersion: loom.ai/v1
kind: InferencePipeline
metadata:
  name: hops
spec:
  steps:
    - name: double
      url: grpc://127.0.0.1:{port}
      model: scripted
      inputs: {{x: request.x}}
  outputs: {{y: double.y}}
""")
p, (http, gaddr), text = start_server([serve, "--spec", spec, "--http-port", "0", "--grpc-port", "0",
                                      "--max-request-bytes", str(BIG)], os.path.join(work, "pipeline.log"))
try:
    check(http is not None, f"the pipeline did not start: {text}")

    def rest(first, rows=2):
        x = np.full((rows, 4), 0.5, np.float32)
        x.flat[0] = first
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                       "data": x.ravel().tolist()}]}).encode()
        req = urllib.request.Request(f"http://{http}/v2/models/hops/infer", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    st, r = rest(0)
    check(st == 200 and r["outputs"][0]["data"][:2] == [0.0, 1.0], f"the truth: {st} {r}")
    for mode, what, words in ((1, "3 bytes for FP32 [2,4]", "holds 3 bytes; shape [2, 4] of FP32 needs 32"),
                              (2, "shape [-7, 4]", "has shape [-7, 4]"),
                              (3, "shape [2^31, 2^31]", "has shape [2147483648, 2147483648]"),
                              (4, "INT64 where the metadata says FP32", "is INT64, but its model's metadata says FP32")):
        st, r = rest(mode)
        err = r.get("error", "")
        check(st == 500 and "step 'double'" in err and words in err, f"a hop answering {what}: {st} {r}")
    # 12 MB through the hop, over gRPC both ways.
    rows = 12 * (1 << 20) // 16
    x = np.random.default_rng(1).random((rows, 4), dtype=np.float32) + 10
    req = pb.ModelInferRequest(model_name="hops")
    req.inputs.add(name="x", datatype="FP32", shape=[rows, 4])
    req.raw_input_contents.append(x.tobytes())
    ch = grpc.insecure_channel(gaddr, options=[("grpc.max_receive_message_length", BIG),
                                               ("grpc.max_send_message_length", BIG)])
    call = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer", request_serializer=pb.ModelInferRequest.SerializeToString,
                          response_deserializer=pb.ModelInferResponse.FromString)
    try:
        out = call(req, timeout=60)
        y = np.frombuffer(out.raw_output_contents[0], np.float32).reshape(rows, 4)
        check(np.array_equal(y, x * 2), "the 12 MB hop came back changed")
    except grpc.RpcError as e:
        check(False, f"a 12 MB hop failed: {e.code()} {e.details()}")
    check(p.poll() is None, "the pipeline server exited")
finally:
    p.terminate()
    p.wait(timeout=30)
    step.stop(0)

check.done("pipeline_hops")
