"""`import loom.torch` before `import torch` (the order PyTorch's CUDA wheels broke): loom.torch
loads PyTorch before its own library, so the CUDA libraries the process keeps (NCCL, the CUDA
runtime) are PyTorch's; then a collective and a CUDA check work. Rank 0 prints one line: the order seen on every rank."""
import sys

events = []


def audit(event, args):
    if event == "ctypes.dlopen" and "loomtorch" in str(args[0]):
        events.append(("libloomtorch", "torch" in sys.modules))


sys.addaudithook(audit)
import loom.torch as lt  # noqa: E402  (first, on purpose)
import torch  # noqa: E402

assert events, "libloomtorch.so was not loaded through ctypes"
assert all(torch_first for _, torch_first in events), "libloomtorch.so was loaded before PyTorch"
lt.init()
total = lt.allreduce(torch.ones(3), op=lt.Sum)
assert total.tolist() == [float(lt.size())] * 3, total
cuda = torch.cuda.is_available()  # initialises the CUDA libraries the wheel brought, where there are
ranks = sum(lt.allgather_object(1))
if lt.rank() == 0:
    print(f"import order: loom.torch first, PyTorch {torch.__version__} loaded before libloomtorch; "
          f"allreduce ok on {ranks} ranks; CUDA available: {cuda}", flush=True)
