#!/usr/bin/env bash
# quickstart.sh — Loom's main job, end to end on this machine: install, build, bring up a local
# Slurm cluster with 2 (fake) A100 and 2 (fake) V100 GPUs described by a topology file, show
# the node as loom-topo sees it, the gres.conf and slurm.conf lines it wrote for Slurm, the
# placement Loom gives 4 tasks, run a real job through srun on those GPUs, train the MLP, and
# run the heterogeneous data-parallel example on a two-node (A100 node + V100 node) cluster.
# The cluster stays up afterwards; `contrib/local-cluster.sh stop` ends it.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_BUILD:-$src/_build}
export LOOM_CLUSTER_DIR=${LOOM_CLUSTER_DIR:-/tmp/loom-cluster} LOOM_BUILDDIR=$build
banner() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
summary=()
note() { summary+=("$*"); }  # a line of the summary printed at the end
started=$(date +%s)

banner "1. Dependencies (Debian packages)"
[ "${LOOM_SKIP_DEPS:-0}" = 1 ] || "$src/contrib/install-deps.sh"

banner "2. Build"
mkdir -p "$build"
(cd "$src" && ./autogen.sh >/dev/null 2>&1)
(cd "$build" && "$src/configure" >configure.log 2>&1) || { tail -30 "$build/configure.log"; exit 1; }
sed -n '/configuration summary/,$p' "$build/configure.log"
make -C "$build" -j"$(nproc)" >"$build/make.log" 2>&1 || { tail -30 "$build/make.log"; exit 1; }
echo "built $build/loom-topo"

topo=$src/tests/fixtures/topology/local-mixed.xml
banner "3. The node's topology (loom-topo show, from $topo)"
"$build/loom-topo" --xml "$topo" show

banner "4. Local Slurm cluster: munge, slurmctld, slurmd with gres written by loom-topo"
"$src/contrib/local-cluster.sh" stop >/dev/null 2>&1 || true
"$src/contrib/local-cluster.sh" start --gpus a100:2,v100:2
export SLURM_CONF=$LOOM_CLUSTER_DIR/slurm.conf
echo "--- gres.conf"; cat "$LOOM_CLUSTER_DIR/gres.conf"
echo "--- slurm.conf node line"; cat "$LOOM_CLUSTER_DIR/nodes.conf"

banner "5. Loom's placement of 4 tasks on this node (what the SPANK plugin applies)"
"$build/loom-topo" --xml "$topo" place --ntasks 4 --oversubscribe

show='echo "rank $SLURM_PROCID: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES LOOM_GPU_CLASS=${LOOM_GPU_CLASS:--} LOOM_NIC=${LOOM_NIC:--} CPUs $(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
banner "6. A real job without Loom: srun -n4 --overcommit -c2 --gpus=4"
srun -n4 --overcommit -c2 --gpus=4 bash -c "$show" | sort

banner "7. The same job with spank_loom.so: srun ... --loom-bind=ring --loom-verbose"
if grep -q spank_loom.so "$LOOM_CLUSTER_DIR/plugstack.conf"; then
  srun -n4 --overcommit -c2 --gpus=4 --loom-bind=ring --loom-verbose bash -c "$show" | sort | tee "$build/placed.txt"
  note "placement: $(grep -c 'LOOM_GPU_CLASS=[a-z]' "$build/placed.txt") of 4 tasks placed by spank_loom.so ($(grep -oE 'LOOM_GPU_CLASS=[a-z0-9]+' "$build/placed.txt" | sort | uniq -c | awk '{printf "%s%s x%s", sep, substr($2, 16), $1; sep=", "}'))"
else
  echo "spank_loom.so was not built (Slurm headers missing?): skipped"
  note "placement: skipped (spank_loom.so was not built)"
fi

banner "8. Train the MLP on Fashion-MNIST (one process), with checkpoints, and export it"
if [ -x "$build/loom-train" ]; then
  rm -rf "$build/ckpt"
  "$build/loom-train" --epochs 3 --threads 2 --lr 0.1 --lr-schedule cosine --warmup-steps 200 --log-every 200 \
    --ckpt-dir "$build/ckpt" --ckpt-every 500 --ckpt-async --export "$build/fashion-mlp.h5" 2>&1 | tee "$build/train.log"
  note "training: the MLP, 3 epochs on one process: $(grep -oE 'test accuracy [0-9.]+' "$build/train.log" | tail -1)"
  h5dump -H "$build/fashion-mlp.h5" | head -12
  echo "--- the last checkpoint (loom-train --inspect; a rerun with --resume auto continues from it)"
  last=$(ls "$build"/ckpt/ckpt-*.h5 | tail -1)
  "$build/loom-train" --inspect "$last" | head -4
fi

banner "9. Compress it: prune 30% of the hidden neurons (one epoch of fine-tuning), then quantize to INT8"
if [ -x "$build/loom-compress" ] && [ -f "$build/fashion-mlp.h5" ]; then
  "$build/loom-compress" prune "$build/fashion-mlp.h5" -o "$build/fashion-mlp-pruned.h5" --sparsity 0.3 \
    --finetune-epochs 1 --threads 2 2>/dev/null
  "$build/loom-compress" quantize "$build/fashion-mlp-pruned.h5" -o "$build/fashion-mlp-int8.h5" --calib-samples 2000
  echo "--- side by side (loom-compress eval)"
  for m in fashion-mlp fashion-mlp-pruned fashion-mlp-int8; do "$build/loom-compress" eval "$build/$m.h5"; done | tee "$build/eval.txt"
  bytes() { grep "^$build/$1.h5:" "$build/eval.txt" | grep -oE '[0-9]+ bytes' | cut -d' ' -f1; }
  acc() { grep "^$build/$1.h5:" "$build/eval.txt" | grep -oE 'test accuracy [0-9.]+' | cut -d' ' -f3; }
  note "$(awk -v f="$(bytes fashion-mlp)" -v p="$(bytes fashion-mlp-pruned)" -v q="$(bytes fashion-mlp-int8)" \
    -v a="$(acc fashion-mlp)" -v b="$(acc fashion-mlp-pruned)" -v c="$(acc fashion-mlp-int8)" \
    'BEGIN { printf "compression: pruned %.2fx smaller (accuracy %s), pruned+INT8 %.2fx smaller (accuracy %s), from %s", f / p, b, f / q, c, a }')"
fi

banner "10. Serve the float and the INT8 model over KServe v2 (REST and gRPC), classify test images, then serve as Slurm replicas"
if [ -x "$build/loom-serve" ] && [ -f "$build/fashion-mlp.h5" ]; then
  rm -rf "$build/models" && mkdir -p "$build/models/fashion-mlp/1" "$build/models/fashion-mlp-int8/1"
  cp "$build/fashion-mlp.h5" "$build/models/fashion-mlp/1/model.h5"
  [ -f "$build/fashion-mlp-int8.h5" ] && cp "$build/fashion-mlp-int8.h5" "$build/models/fashion-mlp-int8/1/model.h5"
  "$build/loom-serve" --model-repository "$build/models" --http-port 0 --grpc-port 0 2>"$build/serve.log" &
  serve_pid=$!
  for _ in $(seq 100); do grep -q "listening:" "$build/serve.log" && break; sleep 0.1; done
  cat "$build/serve.log"
  http=$(grep -oE "http [0-9.]+:[0-9]+" "$build/serve.log" | cut -d' ' -f2)
  curl -s "$http/v2/models/fashion-mlp"; echo
  curl -s "$http/v2/models/fashion-mlp-int8"; echo
  /usr/bin/python3 - "$http" "$build/served.txt" <<'PY'
import gzip, json, sys, urllib.request
names = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:16 + 8 * 784]
labels = gzip.open("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz").read()[8:16]
body = json.dumps({"inputs": [{"name": "input", "shape": [8, 784], "datatype": "UINT8", "data": list(raw)}]}).encode()
def classify(model):
    req = urllib.request.Request("http://" + sys.argv[1] + "/v2/models/" + model + "/infer", body)
    logits = json.loads(urllib.request.urlopen(req).read())["outputs"][0]["data"]
    return [names[max(range(10), key=lambda c: logits[i * 10 + c])] for i in range(8)]
fp32, int8 = classify("fashion-mlp"), classify("fashion-mlp-int8")
for i in range(8):
    print(f"test image {i}: fp32 {fp32[i]:12s} int8 {int8[i]:12s} (label {names[labels[i]]})")
print(f"serving: 8 test images over KServe v2: fp32 {sum(f == names[l] for f, l in zip(fp32, labels))}/8 right, "
      f"int8 {sum(q == names[l] for q, l in zip(int8, labels))}/8, the two agree on {sum(f == q for f, q in zip(fp32, int8))}/8",
      file=open(sys.argv[2], "w"))
PY
  kill -TERM "$serve_pid" && wait "$serve_pid" && echo "loom-serve stopped cleanly on SIGTERM"
  note "$(cat "$build/served.txt")"

  echo "--- the same model as replicas on Slurm: loom-serve --controller"
  cat >"$build/fashion-mlp.yaml" <<YAML
apiVersion: loom.ai/v1
kind: InferenceService
metadata: {name: fashion-mlp}
spec:
  model: {path: $build/fashion-mlp.h5}
  resources: {requests: {memory: 512Mi}}
  autoscaling: {minReplicas: 1, maxReplicas: 2, metrics: [{type: Requests, queueLength: 1}]}
YAML
  rm -rf "$build/controller"
  "$build/loom-serve" --controller --spec "$build/fashion-mlp.yaml" --state-dir "$build/controller" --http-port 0 \
    --grpc-port 0 --tick-s 1 --stable-window-s 10 --panic-window-s 2 --scale-down-delay-s 5 2>"$build/controller.log" &
  ctl_pid=$!
  for _ in $(seq 300); do grep -q "ready at" "$build/controller.log" 2>/dev/null && break; sleep 0.1; done
  http=$(grep -oE "http [0-9.]+:[0-9]+" "$build/controller.log" | head -1 | cut -d' ' -f2)
  squeue -n loom-fashion-mlp -o "%.8i %.18j %.8T %.10m %R"
  /usr/bin/python3 "$src/tests/serve/load_http.py" "$http" fashion-mlp 784 4 8 | sed 's/^/4 clients for 8 s through the router: /' |
    tee "$build/routed.txt"
  note "replicas: $(grep -c 'ready at' "$build/controller.log") replica job(s) came up; through the router, $(sed 's/^[^{]*//' "$build/routed.txt" |
    /usr/bin/python3 -c "import json, sys; r = json.load(sys.stdin); c = r['counts']; print('%d answers 200 to 4 clients in 8 s, p50 %.1f ms, other codes %s' % (c.get('200', 0), r['p50_ms'], sorted(k for k in c if k != '200') or 'none'))")"
  grep -E "scale |ready at" "$build/controller.log" | sed 's/^loom-serve: //'
  curl -s "$http/metrics" | grep -E '^loom_controller_(replicas|desired|routed)'
  kill -TERM "$ctl_pid" && wait "$ctl_pid" && echo "the controller stopped on SIGTERM and ended its replica jobs"
fi

banner "11. Tune the learning rate and batch size: a Bayesian sweep whose trials are one Slurm job array"
if [ -x "$build/loom-sweep" ] && [ -x "$build/loom-train" ]; then
  rm -rf "$build/sweep-lr"
  LOOM_TRAIN=$build/loom-train "$build/loom-sweep" --spec "$src/examples/sweep.yaml" --dir "$build/sweep-lr" | tee "$build/sweep.txt" ||
    echo "the sweep stopped early; see $build/sweep-lr/logs"
  note "sweep: $(grep -E '^best:' "$build/sweep.txt" || echo 'no best trial (see the sweep folder)')"
fi

banner "12. Heterogeneous data parallelism: an A100 node and a V100 node as one MPI world"
# examples/train-hetero.sbatch: a heterogeneous job (an a100 component and a v100 component)
# launched with srun --het-group=0,1; the V100 rank is emulated at 0.4 of the speed. Run once
# with dynamic shares and once with an equal split, and compare.
if [ -x "$build/loom-train" ] && command -v mpirun >/dev/null; then
  "$src/contrib/local-cluster.sh" stop >/dev/null 2>&1 || true
  "$src/contrib/local-cluster.sh" start --nodes "a100:2 v100:2"
  run_hetero() {  # BALANCE -> the job's output file
    local out=$build/hetero-$1.out
    rm -f "$out"
    BALANCE=$1 EMULATE_V100_SPEED=0.4 LOOM_TRAIN=$build/loom-train timeout 300 \
      sbatch --wait --quiet -o "$out" "$src/examples/train-hetero.sbatch" --steps 100 --global-batch 1024 \
      --log-every 50 >/dev/null 2>&1 && grep -q "done:" "$out" && return 0
    echo "(the $1 run did not finish: $(tail -n 3 "$out" 2>/dev/null))"
    return 1
  }
  if run_hetero dynamic && run_hetero off; then
    grep -E "spank_loom: rank|emulating|balance dynamic|allreduce" "$build/hetero-dynamic.out" | sort -u
    shares=$(grep -E "(re-planned shares|balance dynamic: shares)" "$build/hetero-dynamic.out" | tail -1 | grep -oE "[0-9]+,[0-9]+$")
    dyn=$(grep -oE "done: .* ([0-9.]+) samples/s" "$build/hetero-dynamic.out" | awk '{print $4}')
    off=$(grep -oE "done: .* ([0-9.]+) samples/s" "$build/hetero-off.out" | awk '{print $4}')
    echo "per-rank shares of the global batch of 1024 (dynamic): rank 0 (a100) ${shares%,*}, rank 1 (v100, 0.4x) ${shares#*,}"
    speedup=$(awk -v d="$dyn" -v o="$off" 'BEGIN { printf "%.2f", d / o }')
    echo "samples/s: dynamic shares $dyn, equal split $off: speedup ${speedup}x over an equal split"
    note "heterogeneous: dynamic shares ${shares:-?} train ${speedup}x as fast as an equal split ($dyn against $off samples/s)"
    # Why, when the figure misses 1.3x: the step's compute against its gradient-exchange wait.
    per_step() { grep -m1 -oE "time per step: .*" "$build/hetero-$1.out" | sed 's/ (share.*//'; }
    if awk -v s="$speedup" 'BEGIN { exit !(s < 1.3) }'; then
      note "  below 1.3x: dynamic $(per_step dynamic); equal split $(per_step off). Both namespace nodes share this machine's $(nproc) cores and one bridge: the exchange wait is what the balance cannot remove here"
    fi
  else
    echo "the heterogeneous job did not finish; see $build/hetero-*.out"
    note "heterogeneous: the job did not finish (see $build/hetero-*.out)"
  fi
fi

banner "Summary ($(( ($(date +%s) - started) / 60 )) min)"
printf '%s\n' "${summary[@]}"
echo
echo "The cluster is still up. To use it and run the examples as written:"
echo "  export SLURM_CONF=$SLURM_CONF PATH=$build:\$PATH"
echo "  sbatch $src/examples/train-one-node.sbatch; LOOM_MODEL_REPOSITORY=$build/models sbatch $src/examples/serve.sbatch"
echo "Stop it with: LOOM_CLUSTER_DIR=$LOOM_CLUSTER_DIR $src/contrib/local-cluster.sh stop"
