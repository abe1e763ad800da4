#!/usr/bin/env bash
# serverless_figures.sh — cold starts of a service with minReplicas: 0 on the local cluster
# (SLURM_CONF set), first request to first answer: with a replica job submitted and the model
# loaded, and from a parked replica (warmPool: 1, resumed with scontrol resume), for Loom's MLP,
# an ONNX BERT (4 layers, d 256, exported by Debian's PyTorch) and a GPT-2 folder (124M
# parameters, config.json + model.safetensors); then requests lost across 20 scale-to-zero /
# scale-from-zero cycles (4 concurrent requests each) and across 5 preemptions of a spot replica
# under load (target 0 each).
set -u
B=${LOOM_BUILDDIR:-.}
S=${LOOM_SRCDIR:-.}
[ -x "$B/loom-serve" ] || { echo "serverless_figures: loom-serve not built, skipped"; exit 0; }
[ -n "${SLURM_CONF:-}" ] && sinfo -h >/dev/null 2>&1 || { echo "serverless_figures: no local cluster (SLURM_CONF), skipped"; exit 0; }
T=$(mktemp -d)
chmod 755 "$T"
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; scancel -n gpu-hog 2>/dev/null; rm -rf "$T"' EXIT
cd "$T" || exit 1
CYCLES=${CYCLES:-5}

"$B/loom-train" --layers 784,64,10 --steps 5 --global-batch 64 --export mlp.h5 2>/dev/null
/usr/bin/python3 - "$S/tests/parity" "$T" <<'PY'
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
import onnx_models as om
w = sys.argv[2]
torch.manual_seed(0)
m = om.Bert(vocab=1000, d=256, heads=4, layers=4, maxlen=128).eval()
ids, mask = torch.randint(0, 1000, (1, 128)), torch.ones(1, 128, dtype=torch.long)
with torch.no_grad():
    torch.onnx.export(m, (ids, mask), f"{w}/bert.onnx", opset_version=17, input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "pooler_output"],
                      dynamic_axes={"input_ids": {0: "b", 1: "t"}, "attention_mask": {0: "b", 1: "t"},
                                    "last_hidden_state": {0: "b"}, "pooler_output": {0: "b"}})
json.dump({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 128], "data": ids.flatten().tolist()},
                      {"name": "attention_mask", "datatype": "INT64", "shape": [1, 128], "data": mask.flatten().tolist()}],
           "outputs": [{"name": "pooler_output"}]}, open(f"{w}/bert.json", "w"))
json.dump({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 784], "data": [0.1] * 784}]}, open(f"{w}/mlp.json", "w"))
json.dump({"model": "gpt2", "prompt": [464, 2068, 7586, 21831], "max_tokens": 1}, open(f"{w}/gpt2.json", "w"))
PY
mkdir -p gpt2
/usr/bin/python3 "$S/tests/serve/gpt2_ref.py" write "$T/gpt2" --seed 5 --layers 12 --heads 12 --embd 768 --positions 1024 \
  --vocab 50257 --prefix transformer.
chmod -R go-w "$T"

spec() {  # NAME PATH FORMAT WARM [SLURM-LINES]
  cat >"$1.yaml" <<YAML
apiVersion: loom.ai/v1
kind: InferenceService
metadata: {name: $1}
spec:
  model: {path: $2, format: $3}
  resources: {requests: {gpu: 1, memory: 2Gi}}
  autoscaling:
    minReplicas: 0
    maxReplicas: 1
    scaleToZeroGracePeriod: 1s
    warmPool: $4
    metrics: [{type: Requests, queueLength: 4}]
${5:-}
YAML
}
start() {  # NAME SPEC: sets http, ctl
  "$B/loom-serve" --controller --spec "$2" --state-dir "st-$1" --http-port 0 --grpc-port -1 --tick-s 0.5 --stable-window-s 2 \
    --panic-window-s 1 --scale-down-delay-s 1 --activation-timeout-s 300 --log-format json 2>"$1.log" &
  ctl=$!
  until grep -q '"event":"listening"' "$1.log" 2>/dev/null; do sleep 0.1; done
  http=127.0.0.1:$(grep -oE '"http_port":[0-9]+' "$1.log" | head -1 | cut -d: -f2)
}
stop() { kill -TERM "$ctl"; wait "$ctl"; }
jobs_of() { squeue -h -n "loom-$1" -t PENDING,RUNNING,CONFIGURING,SUSPENDED,COMPLETING -o '%T' | tr '\n' ' '; }
ask() {  # NAME URL-PATH BODY-FILE: HTTP code and seconds
  curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -H 'Content-Type: application/json' --data-binary "@$3" "http://$http$2"
}
path_of() { case $1 in gpt2) echo "/v1/completions" ;; *) echo "/v2/models/$1/infer" ;; esac; }
stats() {  # seconds...: p50 and max (the p99 of so few)
  printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {printf "p50 %.3f s, max %.3f s (n=%d)", a[int((NR+1)/2)], a[NR], NR}'
}

echo "serverless_figures: cold start, first request to first answer (local cluster, $(nproc) cores)"
for m in mlp bert gpt2; do
  case $m in mlp) p=$T/mlp.h5 f=loom-hdf5 ;; bert) p=$T/bert.onnx f=onnx ;; gpt2) p=$T/gpt2 f=huggingface ;; esac
  # From zero: a job submitted, the model loaded.
  spec "$m" "$p" "$f" 0
  start "$m" "$m.yaml"
  cold=()
  for _ in $(seq "$CYCLES"); do
    until [ -z "$(jobs_of "$m")" ]; do sleep 0.25; done
    r=$(ask "$m" "$(path_of "$m")" "$m.json")
    [ "${r%% *}" = 200 ] || echo "  $m: from zero answered ${r%% *}"
    cold+=("${r#* }")
  done
  stop
  # From parked: the job suspended, resumed by the request (parked 3 s, past slurmd's suspend).
  spec "$m" "$p" "$f" 1
  start "$m" "$m.yaml"
  ask "$m" "$(path_of "$m")" "$m.json" >/dev/null
  warm=()
  for _ in $(seq "$CYCLES"); do
    until [[ $(jobs_of "$m") == *SUSPENDED* ]]; do sleep 0.25; done
    sleep 3
    r=$(ask "$m" "$(path_of "$m")" "$m.json")
    [ "${r%% *}" = 200 ] || echo "  $m: from parked answered ${r%% *}"
    warm+=("${r#* }")
  done
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' st-"$m"/replicas/*.json | head -1)/status" 2>/dev/null)
  stop
  echo "  $m: from zero $(stats "${cold[@]}"); from parked $(stats "${warm[@]}"); a parked replica's RSS ${rss:-?} kB"
done

# 20 scale-to-zero / scale-from-zero cycles, 4 concurrent requests each.
spec mlp "$T/mlp.h5" loom-hdf5 0
start mlp mlp.yaml
lost=0 sent=0
for _ in $(seq 20); do
  until [ -z "$(jobs_of mlp)" ]; do sleep 0.25; done
  pids=()
  for i in 1 2 3 4; do
    ask mlp /v2/models/mlp/infer mlp.json >"c.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  sent=$((sent + 4))
  lost=$((lost + $(cat c.1 c.2 c.3 c.4 | grep -vc '^200 ')))
done
stop
echo "serverless_figures: 20 scale-to-zero / from-zero cycles: $lost of $sent requests not answered 200 (target 0)"

# 5 preemptions of a spot replica under load (2 clients, closed loop).
spec mlp "$T/mlp.h5" loom-hdf5 0 "  slurm: {partition: spot, preemptible: true}"
sed -i 's/minReplicas: 0/minReplicas: 1/' mlp.yaml
start mlp mlp.yaml
until [[ $(jobs_of mlp) == RUNNING* ]] && grep -q '"event":"ready"' mlp.log; do sleep 0.25; done
/usr/bin/python3 "$S/tests/serve/load_http.py" "$http" mlp 784 2 900 --stop stop >load.json &
load=$!
for k in 1 2 3 4 5; do
  sbatch --parsable --gpus=4 --job-name=gpu-hog --wrap 'sleep 2' >/dev/null
  until [ "$(grep -c '"event":"preempted"' mlp.log)" -ge $k ]; do sleep 0.25; done
  until [ "$(grep -c '"event":"ready"' mlp.log)" -ge $((k + 1)) ]; do sleep 0.25; done
done
touch stop
wait $load
stop
echo "serverless_figures: 5 preemptions under load: $(cat load.json) (every request answered 200 is the target)"
