"""kserve_peer.py — the peer of serve_kserve_figures.sh: KServe's own Python model server (PyPI
kserve) serving a model.onnx with ONNX Runtime, as a KServe user writes it (a kserve.Model whose
predict runs an InferenceSession), bound to 127.0.0.1.

Usage: python kserve_peer.py NAME MODEL.onnx HTTP_PORT THREADS
"""
import sys
import uuid

import numpy as np
import onnxruntime as ort
import uvicorn

import kserve
from kserve import InferOutput, InferRequest, InferResponse

name, path, port, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

# KServe's REST server binds every interface; the figures compare servers on 127.0.0.1 only.
_config = uvicorn.Config.__init__


def _local(self, *args, **kw):
    kw["host"] = "127.0.0.1"
    _config(self, *args, **kw)


uvicorn.Config.__init__ = _local

DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32"}


class OnnxModel(kserve.Model):
    def __init__(self):
        super().__init__(name)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.ready = True

    def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        feeds = {i.name: i.as_numpy() for i in payload.inputs}
        names = [o.name for o in payload.request_outputs or []] or [o.name for o in self.session.get_outputs()]
        outs = self.session.run(names, feeds)
        result = []
        for n, a in zip(names, outs):
            o = InferOutput(name=n, shape=list(a.shape), datatype=DATATYPES[a.dtype])
            o.set_data_from_numpy(a, binary_data=False)
            result.append(o)
        return InferResponse(model_name=name, infer_outputs=result, response_id=payload.id or str(uuid.uuid4()))


if __name__ == "__main__":
    kserve.ModelServer(http_port=port, enable_grpc=False, workers=1).start([OnnxModel()])
