#!/usr/bin/env bash
# controller_serverless.sh — a service with minReplicas: 0 on the local cluster: no job until the
# first request; 16 concurrent first requests (REST and gRPC) are held and all answered 200 once
# the replica job is ready; back to zero jobs after the scale-to-zero grace period; with
# warmPool: 1 the replica is parked (its job SUSPENDED, its process stopped) and a request
# resumes it within a second, also after the controller was killed and started again; a full hold answers 429 with Retry-After and drops nothing held;
# a replica that never becomes ready: held requests get 503 at the activation timeout, the log
# has its last words and the backoff; a spot replica preempted by a higher-tier job is replaced
# with every request answered; a controller killed while holding requests gives its clients an
# error, not a hang; a controller that Slurm refuses scontrol suspend ends replicas instead.
. "$(dirname "$0")/lib.sh"
require_cluster
S=$LOOM_BUILDDIR/loom-serve
G=$LOOM_BUILDDIR/tests/serve/kserve_grpc_client
L="/usr/bin/python3 $LOOM_SRCDIR/tests/serve/load_http.py"
[ -x "$S" ] || skip "loom-serve not built"
chmod 0755 "$LOOM_TMP"
cd "$LOOM_TMP" || exit 99
export LOOM_SERVICES_DIR=$LOOM_TMP/services
"$LOOM_BUILDDIR/loom-train" --layers 784,64,10 --steps 5 --global-batch 64 --export model.h5 2>/dev/null
spec() {  # FILE NAME MODEL EXTRA-AUTOSCALING-LINES [SPEC-LINES]
  cat >"$1" <<YAML
apiVersion: loom.ai/v1
kind: InferenceService
metadata:
  name: $2
spec:
  model:
    path: $3
  resources:
    requests: {gpu: 1, memory: 1Gi}
  autoscaling:
    minReplicas: 0
    maxReplicas: 1
    scaleToZeroGracePeriod: 2s
${4:-}
    metrics:
      - type: Requests
        queueLength: 4
${5:-}
YAML
}
jobs_of() { squeue -h -n "loom-$1" -t PENDING,RUNNING,CONFIGURING,SUSPENDED,COMPLETING -o '%i %T' | sort -n | tr '\n' ' '; }
metric() { curl -s "$http/metrics" | sed -n "s/^$1 //p"; }
controller() {  # NAME SPEC [options]
  local name=$1 file=$2
  shift 2
  serve_start "$name" --controller --spec "$file" --state-dir "state-$name" --grpc-port 0 --tick-s 0.5 --stable-window-s 3 \
    --panic-window-s 1 --scale-down-delay-s 1 --log-format json "$@"
}
infer_x() {  # URL: one request, its HTTP code and seconds
  curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -H 'Content-Type: application/json' \
    -d "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,784],\"datatype\":\"FP32\",\"data\":[$(seq -s, 0 783 | sed 's/[0-9]*/0.1/g')]}]}" \
    "$1/v2/models/$2/infer"
}
wait_jobs() {  # NAME WANT SECONDS: until the service's jobs are WANT ("" for none)
  local i
  for i in $(seq $(($3 * 4))); do
    [ "$(jobs_of "$1")" = "$2" ] && return 0
    sleep 0.25
  done
  return 1
}

# --- minReplicas 0: no job until the first request; 16 at once are held and all answered --------
spec zero.yaml sz "$LOOM_TMP/model.h5" ""
controller sz zero.yaml
sleep 2
expect_eq "minReplicas 0: no job while no request came" "" "$(jobs_of sz)"
expect_eq "yet the controller is ready: a load balancer must send it the request that starts a replica" 200 \
  "$(curl -s -o /dev/null -w '%{http_code}' "$http/v2/health/ready")"
t0=$(date +%s.%N)
clients=()
for i in $(seq 15); do
  infer_x "$http" sz >"first.$i" &
  clients+=($!)
done
if [ -x "$G" ]; then
  head -c 3136 /dev/zero >x.bin
  (run_cmd "$G" "$grpc" infer sz 1 FP32 1,784 x.bin; echo "$rc $out$err" >first.grpc) &
else
  infer_x "$http" sz >first.grpc &
fi
clients+=($!)
wait "${clients[@]}"
t1=$(date +%s.%N)
codes=$(cat first.* | awk '{print $1}' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
expect_eq "16 concurrent first requests, held while the replica started: all answered" "15 200;" "$(cat first.[0-9]* | awk '{print $1}' | sort | uniq -c | tr -s ' ' | tr '\n' ';' | sed 's/^ //')"
[ -x "$G" ] && expect_match "the gRPC one too" '^0 .*"shape":\[1,10\]' "$(cat first.grpc)"
echo "controller_serverless: from zero (a job submitted, the model loaded): first answers after $(echo "$t1 - $t0" | bc) s; $codes"
m=$(curl -s "$http/metrics")
expect_match "the hold forwarded them all" 'loom_controller_held_total\{outcome="forwarded"\} 16' "$m"
expect_match "the cold start is in the histogram" 'loom_controller_cold_start_seconds_count\{from="job"\} 1' "$m"
promtool_lint "the controller's metrics" "$m"
expect_match "the log gives the cold start" '"cold_start_s":[0-9.]+,"event":"ready"' "$(cat sz.log)"
wait_jobs sz "" 40 || fail "not back to zero jobs after the grace period: $(jobs_of sz)"
expect_match "scaled to zero after the grace period" '"event":"scale","from":1,.*"to":0' "$(cat sz.log)"
kill -TERM "$pid"
wait "$pid"

# --- warmPool 1: parked (SUSPENDED, stopped, model kept), resumed by a request in under a second --
spec warm.yaml sw "$LOOM_TMP/model.h5" "    warmPool: 1"
controller sw warm.yaml
expect_eq "first request from zero" 200 "$(infer_x "$http" sw | cut -d' ' -f1)"
parked=
for _ in $(seq 80); do
  parked=$(jobs_of sw)
  [[ $parked == *SUSPENDED* ]] && break
  sleep 0.25
done
expect_match "idle: the replica is parked, its job suspended" '^[0-9]+ SUSPENDED $' "$parked"
job=${parked%% *}
echo "controller_serverless: while parked, the node: $(scontrol show node -o | grep -oE '(CPUAlloc|AllocMem)=[0-9]+|AllocTRES=[^ ]*' | tr '\n' ' ')"
rpid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "state-sw/replicas/$job.json")
if [ -n "$rpid" ] && [ -r "/proc/$rpid/stat" ]; then
  expect_eq "its process is stopped" T "$(awk '{print $3}' "/proc/$rpid/stat")"
  echo "controller_serverless: a parked replica still holds $(awk '/VmRSS/ {print $2, $3}' "/proc/$rpid/status") of memory (RSS)"
fi
# Slurm's slurmd completes a suspend (SIGTSTP, then SIGSTOP) over about 2 s, and a resume waits
# for it: the requests come once the replica has been parked that long, as after an idle spell.
times=
for k in 1 2 3; do
  sleep 2.5
  r=$(infer_x "$http" sw)
  expect_eq "request $k from parked: 200" 200 "${r%% *}"
  times="$times ${r#* }"
  [ "$(jobs_of sw)" = "$job RUNNING " ] || fail "the same job resumed: $(jobs_of sw)"
  [ $k = 3 ] && break
  for _ in $(seq 80); do [[ $(jobs_of sw) == *SUSPENDED* ]] && break; sleep 0.25; done
done
echo "controller_serverless: from parked, first answer after:$times s"
slowest=$(echo "$times" | tr ' ' '\n' | sort -g | tail -1)
expect_eq "from parked, each first answer within 1 s (slowest $slowest s)" 1 "$(echo "$slowest < 1" | bc)"
m=$(curl -s "$http/metrics")
expect_match "parks counted" 'loom_controller_parked_total [3-9]' "$m"
expect_match "resumes counted" 'loom_controller_resumed_total 3' "$m"
expect_match "the cold start from parked in its histogram" 'loom_controller_cold_start_seconds_count\{from="parked"\} 3' "$m"
# A controller killed while its replica is parked: started again, it adopts the suspended job as
# parked and resumes it for the next request (no new job).
for _ in $(seq 80); do [[ $(jobs_of sw) == *SUSPENDED* ]] && break; sleep 0.25; done
kill -9 "$pid"
wait "$pid" 2>/dev/null
controller sw warm.yaml
for _ in $(seq 40); do grep -q '"event":"adopt"' sw.log && break; sleep 0.25; done  # its first tick
expect_match "restarted, it adopts the parked replica" "adopted replica job $job \\(SUSPENDED\\)" "$(cat sw.log)"
expect_eq "and resumes it for a request" 200 "$(infer_x "$http" sw | cut -d' ' -f1)"
expect_eq "the same job, no new one" "$job RUNNING " "$(jobs_of sw)"
for _ in $(seq 80); do [[ $(jobs_of sw) == *SUSPENDED* ]] && break; sleep 0.25; done
kill -TERM "$pid"
wait "$pid"
expect_eq "SIGTERM ends the parked replica too" 0 "$(wait_jobs sw "" 30 && echo 0 || jobs_of sw)"

# --- Slurm refuses scontrol suspend (a controller without operator rights): said once, the
# replicas are ended instead of parked, and requests are still answered --------------------------
if id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null; then
  sed 's/name: sw/name: sn/' warm.yaml >refused.yaml
  mkdir -p state-sn && chown nobody state-sn
  LOOM_SERVE_AS=nobody controller sn refused.yaml
  for k in 1 2; do
    expect_eq "as nobody, request $k from zero" 200 "$(infer_x "$http" sn | cut -d' ' -f1)"
    wait_jobs sn "" 40 || fail "as nobody, the replica was not ended: $(jobs_of sn)"
  done
  expect_match "the refusal is logged with Slurm's words" '"event":"park_refused".*(Access/permission denied|Invalid user)' "$(cat sn.log)"
  expect_eq "once" 1 "$(grep -c '"event":"park_refused"' sn.log)"
  expect_match "no replica was parked" 'loom_controller_parked_total 0' "$(curl -s "$http/metrics")"
  kill -TERM "$pid"
  wait "$pid"
else
  echo "SKIP (part): no user nobody or no setpriv: the refused suspend is not checked"
fi

# --- a replica that never becomes ready; a full hold -----------------------------------------------
head -c 4096 /dev/urandom >broken.h5
spec broken.yaml sb "$LOOM_TMP/broken.h5" ""
controller sb broken.yaml --activation-timeout-s 4 --max-held-requests 2
clients=()
for i in 1 2 3 4; do
  curl -s -D "hdr.$i" -o "body.$i" -w '%{http_code}\n' -d '{}' "$http/v2/models/sb/infer" >"code.$i" &
  clients+=($!)
  sleep 0.2
done
wait "${clients[@]}"
codes=$(cat code.1 code.2 code.3 code.4 | sort | tr '\n' ' ')
expect_eq "a hold of 2: two wait and get 503 at the activation timeout, two are refused 429 at once" "429 429 503 503 " "$codes"
expect_match "the 429 says to retry" 'Retry-After: 1' "$(cat hdr.3 hdr.4)"
expect_match "the 503 names the timeout" 'no replica became ready within 4 s' "$(cat body.1)"
for _ in $(seq 60); do grep -q '"event":"start_failed"' sb.log && break; sleep 0.25; done
expect_match "the replica's failure is logged with its last words and the backoff" \
  '"backoff_s":[0-9.]+,"event":"start_failed"' "$(cat sb.log)"
kill -TERM "$pid"
wait "$pid"
wait_jobs sb "" 30

# --- the controller killed while it holds requests: the clients get an error, not a hang --------
controller sk broken.yaml --activation-timeout-s 60
clients=()
for i in 1 2; do
  (curl -s -m 30 -o /dev/null -d '{}' "$http/v2/models/sk/infer"; echo $? >"killed.$i") &
  clients+=($!)
done
sleep 1
kill -9 "$pid"
wait "${clients[@]}"
expect_eq "killed with requests held: each client gets an error at once (curl: 52 empty reply)" "52 52" "$(cat killed.1 killed.2 | tr '\n' ' ' | sed 's/ $//')"
scancel -n loom-sk 2>/dev/null

# --- a spot replica preempted under load: replaced, every request answered -----------------------
spec spot.yaml sp "$LOOM_TMP/model.h5" "" "  slurm:
    partition: spot
    preemptible: true"
sed -i 's/minReplicas: 0/minReplicas: 1/' spot.yaml
controller sp spot.yaml --activation-timeout-s 120
for _ in $(seq 120); do [ "$(metric 'loom_controller_replicas{state="ready"}')" = 1 ] && break; sleep 0.25; done
old=$(jobs_of sp | cut -d' ' -f1)
expect_match "the replica runs in the spot partition" "Partition=spot" "$(scontrol show job "$old")"
$L "$http" sp 784 2 120 --stop stop >spot.json &
load=$!
hog=$(sbatch --parsable --gpus=4 --job-name=gpu-hog --wrap 'sleep 3')
for _ in $(seq 240); do grep -q '"event":"preempted"' sp.log && break; sleep 0.25; done
expect_match "the preemption is logged" "\"event\":\"preempted\",\"job\":\"$old\"" "$(cat sp.log)"
for _ in $(seq 240); do
  new=$(jobs_of sp | grep -o '^[0-9]* RUNNING' | cut -d' ' -f1)
  [ -n "$new" ] && [ "$new" != "$old" ] && [ "$(metric 'loom_controller_replicas{state="ready"}')" = 1 ] && break
  sleep 0.25
done
sleep 1
touch stop
wait $load
rm -f stop
echo "controller_serverless: under load while spot replica $old was preempted and replaced by $new: $(cat spot.json)"
expect_ne "a new job replaced the preempted one" "$old" "$new"
expect_match "every request answered 200" '^\{"counts": \{"200": [0-9]+\}' "$(cat spot.json)"
expect_match "the preemption is counted" 'loom_controller_preemptions_total 1' "$(curl -s "$http/metrics")"
kill -TERM "$pid"
wait "$pid"
scancel -n gpu-hog 2>/dev/null
finish
