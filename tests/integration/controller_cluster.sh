#!/usr/bin/env bash
# controller_cluster.sh — loom-serve --controller on the local cluster (Contract 9): replicas are
# real sbatch jobs named loom-<service> with the spec's --gpus and --mem; a burst scales 1 -> max,
# idling scales back to min, a cancelled replica is replaced, a controller killed and started
# again adopts its running replica instead of submitting another, SIGTERM ends the replicas; in
# every phase each request gets 200 or 503 (with Retry-After) and nothing else; REST and gRPC
# go through the router with the token, Triton's client's everyday calls too; bad specs and options fail at once with one error; a
# pipeline step `service: ctl-tiny` finds the controller by name, again after it comes back on
# other ports, and says which step and service are gone once it has stopped.
. "$(dirname "$0")/lib.sh"
require_cluster
S=$LOOM_BUILDDIR/loom-serve
G=$LOOM_BUILDDIR/tests/serve/kserve_grpc_client
L="/usr/bin/python3 $LOOM_SRCDIR/tests/serve/load_http.py"
[ -x "$S" ] || skip "loom-serve not built"
chmod 0755 "$LOOM_TMP"
cd "$LOOM_TMP" || exit 99
export LOOM_SERVICES_DIR=$LOOM_TMP/services  # where the controllers announce themselves by name
"$LOOM_BUILDDIR/loom-train" --layers 784,64,10 --steps 5 --global-batch 64 --export model.h5 2>/dev/null
printf 'ctl-token\n' >token && chmod 600 token
spec() {  # FILE MIN MAX QUEUE_LENGTH
  cat >"$1" <<YAML
apiVersion: loom.ai/v1
kind: InferenceService
metadata:
  name: ctl-tiny
spec:
  model:
    path: $LOOM_TMP/model.h5
  resources:
    requests: {gpu: 1, memory: 1Gi}
  autoscaling:
    minReplicas: $2
    maxReplicas: $3
    metrics:
      - type: Requests
        queueLength: $4
YAML
}
jobs_now() { squeue -h -n loom-ctl-tiny -t PENDING,RUNNING,CONFIGURING -o %i | sort -n | tr '\n' ' '; }
ready_count() { curl -s -H 'Authorization: Bearer ctl-token' "$http/metrics" | sed -n 's/^loom_controller_replicas{state="ready"} //p'; }
wait_ready() {  # N SECONDS: until N replicas are ready (and no more are coming)
  local i
  for i in $(seq $(($2 * 4))); do
    [ "$(ready_count)" = "$1" ] && [ "$(jobs_now | wc -w)" = "$1" ] && return 0
    sleep 0.25
  done
  return 1
}
controller() {  # extra options
  serve_start ctl --controller --spec svc.yaml --state-dir state --grpc-port 0 --auth-token-file token \
    --tick-s 0.5 --stable-window-s 8 --panic-window-s 2 --scale-down-delay-s 4 --log-format json "$@"
}

# --- bad specs and options: one error at load, nothing submitted --------------------------------
spec bad1.yaml 3 2 1
spec bad2.yaml 1 2 0
sed '/metrics:/,$d' bad1.yaml | sed 's/minReplicas: 3/minReplicas: 1/' >bad3.yaml
before=$(jobs_now)
run_cmd "$S" --controller --spec bad1.yaml --state-dir state
expect_eq "min > max: exit 2" 2 "$rc"
expect_match "min > max: names the fields" "minReplicas exceeds maxReplicas" "$err"
run_cmd "$S" --controller --spec bad2.yaml --state-dir state
expect_eq "queueLength 0: exit 2" 2 "$rc"
expect_match "queueLength 0: names the field" "queueLength" "$err"
run_cmd "$S" --controller --spec bad3.yaml --state-dir state
expect_match "no queueLength at all: the controller says it needs one" "needs a Requests metric with queueLength" "$err"
spec svc.yaml 1 3 1
run_cmd "$S" --controller --spec svc.yaml
expect_match "no --state-dir: a usage error" "needs --state-dir" "$err"
expect_eq "nothing was submitted for the bad starts" "$before" "$(jobs_now)"

# --- a spec the cluster cannot satisfy: sbatch's own words, said once; the router answers 503 ----
sed 's/memory: 1Gi/memory: 100000Gi/' svc.yaml >huge.yaml
serve_start huge --controller --spec huge.yaml --state-dir state-huge --grpc-port -1 --tick-s 0.2 --activation-timeout-s 1
sleep 2
expect_match "sbatch's refusal is in the log" "cannot submit a replica.*(Memory specification can not be satisfied|Requested node configuration is not available)" "$(cat huge.log)"
expect_eq "once, not every tick" 1 "$(grep -c 'cannot submit a replica' huge.log)"
expect_eq "no replica: the router says 503" 503 "$(curl -s -o /dev/null -w '%{http_code}' -d '{}' "$http/v2/models/ctl-tiny/infer")"
expect_eq "and is not ready" 503 "$(curl -s -o /dev/null -w '%{http_code}' "$http/v2/health/ready")"
expect_match "the metrics count the failures" "loom_controller_submit_failures_total [1-9]" "$(curl -s "$http/metrics")"
kill -TERM "$pid"
wait "$pid"
expect_eq "and it still stops cleanly" 0 "$?"

# --- a replica that waits for resources is reported with Slurm's reason, and counts as coming ---
# Two replicas of 3 GPUs each on a node of 4: the second pends (Resources), none is added.
sed 's/gpu: 1/gpu: 3/; s/minReplicas: 1/minReplicas: 2/; s/maxReplicas: 3/maxReplicas: 2/' svc.yaml >gpus.yaml
serve_start gpus --controller --spec gpus.yaml --state-dir state-gpus --grpc-port -1 --tick-s 0.2 --pending-warn-s 1
for _ in $(seq 120); do grep -q "has been pending" gpus.log && break; sleep 0.25; done
expect_match "the pending replica is reported with Slurm's reason" "replica job [0-9]+ has been pending for [0-9]+ s: Slurm's reason: (Resources|Priority)" "$(cat gpus.log)"
expect_eq "pending jobs count as coming: two jobs, not more" 2 "$(squeue -h -n loom-ctl-tiny -o %i | wc -l)"
kill -TERM "$pid"
wait "$pid"
for _ in $(seq 40); do [ -z "$(jobs_now)" ] && break; sleep 0.25; done
expect_eq "SIGTERM cancels the pending one too" "" "$(jobs_now)"

# --- start: min replicas, as real jobs with the spec's resources --------------------------------
controller
wait_ready 1 60 || fail "the first replica did not become ready: $(tail -5 ctl.log)"
jid=$(jobs_now | tr -d ' ')
info=$(scontrol show job "$jid")
expect_match "the replica job is named loom-<service>" "JobName=loom-ctl-tiny" "$info"
expect_match "with the spec's memory" "MinMemoryNode=1G" "$info"
expect_match "and GPU" "TresPerJob=gres[:/]gpu[:=]1" "$info"
if srun --help 2>&1 | grep -q -- --loom-bind; then  # the Loom plugin is loaded: it placed the replica
  rpid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "state/replicas/$jid.json")
  expect_match "the replica runs where the Loom plugin placed it (on its GPU, with its cores and NIC)" \
    "LOOM_BIND=gpu LOOM_GPU=[0-9]" "$(tr '\0' '\n' <"/proc/$rpid/environ" 2>&1 | grep -E '^LOOM_(BIND|GPU)=' | sort | tr '\n' ' ')"
fi
# Prometheus (Debian's) with contrib/prometheus/loom.yml's jobs: the controller, and the replicas
# from the file_sd targets the controller writes; every target up, Loom's metrics scraped.
targets=state/prometheus-targets.json
expect_match "the controller lists the ready replica for Prometheus" "\"slurm_job_id\": \"$jid\"" "$(cat "$targets" 2>&1)"
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  echo ctl-token >prom-token
  pport=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  sed -e "s|/etc/loom/token|$PWD/prom-token|; s|127.0.0.1:8000|${http#http://}|; s|/var/lib/loom/ctl/prometheus-targets.json|$PWD/$targets|" \
    -e "s|scrape_interval: 15s|scrape_interval: 1s|; s|refresh_interval: 5s|refresh_interval: 1s|" \
    "$LOOM_SRCDIR/contrib/prometheus/loom.yml" >prom.yml
  prometheus --config.file=prom.yml --storage.tsdb.path=prom-data --web.listen-address=127.0.0.1:$pport >prom.log 2>&1 &
  ppid=$!
  up=
  for _ in $(seq 60); do
    up=$(promtool query instant "http://127.0.0.1:$pport" 'sum by (job) (up)' 2>/dev/null | sort | tr '\n' ' ')
    [[ $up == *loom-controller*" => 1 "*loom-replicas*" => 1 "* ]] && break
    sleep 0.5
  done
  expect_match "Prometheus: the controller and the replica are up ($up)" '\{job="loom-controller"\} => 1 .*\{job="loom-replicas"\} => 1 ' "$up"
  got=$(promtool query instant "http://127.0.0.1:$pport" "count({__name__=~\"loom_serve_.+\", job=\"loom-replicas\", slurm_job_id=\"$jid\"})" 2>&1)
  expect_match "Prometheus: the replica's own metrics, labelled with its Slurm job ($got)" '=> [1-9]' "$got"
  # The Grafana dashboard: its serving panels query what the controller and a replica serve, and
  # Prometheus takes every panel's query.
  replica=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["targets"][0])' "$targets")
  { curl -s -H 'Authorization: Bearer ctl-token' "$http/metrics"; curl -s -H 'Authorization: Bearer ctl-token' "http://$replica/metrics"; } >serve-metrics.txt
  run_cmd /usr/bin/python3 "$LOOM_SRCDIR/tests/serve/dashboard_check.py" "$LOOM_SRCDIR/contrib/grafana/loom.json" serve-metrics.txt \
    loom_serve_ loom_controller_ nv_inference_
  expect_eq "the Grafana dashboard's serving panels query what is served ($out)" 0 "$rc"
  bad=
  while read -r q; do
    promtool query instant "http://127.0.0.1:$pport" "$q" >/dev/null 2>prom-q.err || bad="$bad [$q: $(head -c 200 prom-q.err)]"
  done < <(/usr/bin/python3 -c 'import json, sys; [print(t["expr"]) for p in json.load(open(sys.argv[1]))["panels"] for t in p.get("targets", [])]' \
             "$LOOM_SRCDIR/contrib/grafana/loom.json")
  expect_eq "Prometheus takes every query of the Grafana dashboard" "" "$bad"
  kill "$ppid"
  wait "$ppid" 2>/dev/null
else
  echo "SKIP (part): no prometheus (Debian's)"
fi
expect_eq "the router needs the token" 401 "$(curl -s -o /dev/null -w '%{http_code}' -d '{}' "$http/v2/models/ctl-tiny/infer")"
expect_eq "health needs none" 200 "$(curl -s -o /dev/null -w '%{http_code}' "$http/v2/health/ready")"
out=$($L "$http" ctl-tiny 784 2 1 --token ctl-token)
expect_match "REST through the router" '"counts": \{"200": [0-9]+\}' "$out"
if [ -x "$G" ]; then
  head -c 3136 /dev/zero >x.bin
  run_cmd env LOOM_TOKEN=ctl-token "$G" "$grpc" infer ctl-tiny 1 FP32 1,784 x.bin
  expect_match "gRPC through the router" '"model_name":"ctl-tiny".*"shape":\[1,10\]' "$out"
  run_cmd "$G" "$grpc" infer ctl-tiny 1 FP32 1,784 x.bin
  expect_match "gRPC without the token is refused" '"code":16' "$out$err"
  run_cmd env LOOM_TOKEN=ctl-token "$G" "$grpc" stream ctl-tiny 50 x.bin 5
  expect_match "a ModelStreamInfer stream through the router: in order, request 5's error in turn" \
    '^\{"answers":50,"ids_in_order":true,"one_row_answers":49,"errors":\["[^"]*no-such-model' "$out"
  run_cmd "$G" "$grpc" stream ctl-tiny 2 x.bin
  expect_match "a stream without the token is refused" '"code":16' "$out$err"
  m=$(curl -s -H 'Authorization: Bearer ctl-token' "$http/metrics")
  promtool_lint "the controller's metrics" "$m"
  expect_match "the router counts gRPC requests under their model: 1 + 49 answered" \
    'loom_serve_requests_total\{model="ctl-tiny",protocol="grpc",code="0"\} 50' "$m"
  expect_match "the refused one" 'loom_serve_requests_total\{model="ctl-tiny",protocol="grpc",code="16"\} 1' "$m"
  expect_match "and the unknown model's under the shared label" \
    'loom_serve_requests_total\{model="_unknown",protocol="grpc",code="5"\} 1' "$m"
fi
# Triton's own client through the router, with the token: every everyday call a replica answers.
if peer=$("$LOOM_SRCDIR/contrib/peer-venv.sh" triton "${TRITON_PEER[@]}" 2>peer.err); then
  run_cmd "$peer/bin/python" "$LOOM_SRCDIR/tests/serve/triton_everyday.py" "$http" "$grpc" ctl-tiny 2 --token ctl-token
  echo "$out" | grep -v "^ok: " | sed 's/^/  /'
  [ -n "$err" ] && echo "$err" | tail -n 5 | sed 's/^/  /'
  expect_eq "Triton's client through the router: metadata, index, config, stats, infer, async, stream, token" 0 "$rc"
  expect_match "it ran its checks" "^ok: grpc: the stream answers each request in order" "$out"
else
  echo "controller_cluster: Triton's client not checked: $(cat peer.err)"
fi

# --- a pipeline finds the controller by its service name ---------------------------------------
expect_match "the controller announced itself by name" "\"grpc_port\":${grpc##*:}," "$(cat services/ctl-tiny.json 2>&1)"
cat >by-name.yaml <<'YAML'
apiVersion: loom.ai/v1
kind: InferencePipeline
metadata:
  name: by-name
spec:
  steps:
    - name: tiny
      service: ctl-tiny
      model: ctl-tiny
      inputs: {input: request.input}
  outputs:
    logits: tiny.logits
YAML
ctl=("$pid" "$http" "$grpc")
serve_start pipe --spec by-name.yaml --grpc-port 0 --auth-token-file token
pipe=("$pid" "$http" "$grpc")
pid=${ctl[0]} http=${ctl[1]} grpc=${ctl[2]}
expect_match "the pipeline's step is the controller's address" "tiny \(ctl-tiny at $grpc, service ctl-tiny\)" "$(cat pipe.log)"
pipe_infer() { [ -x "$G" ] && run_cmd env LOOM_TOKEN=ctl-token "$G" "${pipe[2]}" infer by-name 1 FP32 1,784 x.bin; }
if pipe_infer; then expect_match "a request through the pipeline and the router" '"model_name":"by-name".*"shape":\[1,10\]' "$out"; fi

# --- a burst scales to max; every request 200 or 503 -------------------------------------------
# The status page in headless Chromium watches it: 1 ready replica, then 3 and the scale event.
page=
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && /usr/bin/python3 -c 'import selenium' 2>/dev/null; then
  rm -f page-ready
  /usr/bin/python3 "$LOOM_SRCDIR/tests/serve/status_page.py" "$http" ctl-token 1 3 90 page-ready >page.out 2>&1 &
  page=$!
  for _ in $(seq 120); do [ -e page-ready ] || ! kill -0 $page 2>/dev/null && break; sleep 0.25; done
else
  echo "SKIP (part): no chromium, chromium-driver and python3-selenium: the status page is checked with curl only"
fi
expect_match "the status page asks for the token without one" '<form id="login">' "$(curl -s "$http/")"
expect_match "with it: the replica's row" '<tr class="replica ready"><td>[0-9]+</td>' \
  "$(curl -s -H 'Authorization: Bearer ctl-token' "$http/")"
expect_match "/v2/status: the replicas as JSON" '"replicas":\[\{' "$(curl -s -H 'Authorization: Bearer ctl-token' "$http/v2/status")"
expect_eq "/v2/status needs the token" 401 "$(curl -s -o /dev/null -w '%{http_code}' "$http/v2/status")"
# 32 rows a request (the replica's most): the requests, not the Python clients, hold the time, so
# 8 clients keep about 8 in flight even on a loaded machine (one row each kept 1.3 in flight
# there, and the burst asked for 2 replicas, not 3).
$L "$http" ctl-tiny 784 8 60 --rows 32 --token ctl-token --stop stop >burst.json &
load=$!
t0=$(date +%s.%N)
wait_ready 3 45 && t3=$(date +%s.%N) || fail "the burst did not scale to 3 replicas: $(grep '"scale"' ctl.log | tail -3)"
touch stop
wait $load
rm -f stop
expect_match "during the burst: only 200s and 503s" '^\{"counts": \{("(200|503)": [0-9]+(, )?)+\}' "$(cat burst.json)"
expect_match "the scale-up was a panic decision" '"event":"scale".*"panic":true' "$(cat ctl.log)"
if [ -n "$page" ]; then
  wait "$page"
  expect_eq "the status page in Chromium: the token, 1 then 3 replicas, the event, no console error ($(cat page.out))" 0 "$?"
fi
echo "controller_cluster: burst through the router: $(cat burst.json)"
expect_match "the router counts the burst under the service's model" \
  'loom_serve_requests_total\{model="ctl-tiny",protocol="http",code="200"\} [1-9]' \
  "$(curl -s -H 'Authorization: Bearer ctl-token' "$http/metrics")"
[ -n "${t3:-}" ] && echo "controller_cluster: 1 -> 3 replicas ready $(echo "$t3 - $t0" | bc) s after the burst began"

# --- idle scales back to min ----------------------------------------------------------------------
t0=$(date +%s.%N)
wait_ready 1 60 && echo "controller_cluster: back to 1 replica $(echo "$(date +%s.%N) - $t0" | bc) s after the burst ended" ||
  fail "idling did not scale back to 1: $(grep '"scale"' ctl.log | tail -3)"
/usr/bin/python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
down = [e for e in ev if e.get("event") == "scale" and e["to"] < e["from"]]
sys.exit(0 if down and not any(e["panic"] for e in down) else 1)' ctl.log && pass ||
  fail "scale-down happened, never in panic: $(grep '"scale"' ctl.log)"

# --- a cancelled replica is replaced, requests meanwhile get 200 or 503 --------------------------
# One client: at queueLength 1 two closed-loop clients may rightly ask for a second replica.
$L "$http" ctl-tiny 784 1 60 --token ctl-token --stop stop >cancel.json &
load=$!
old=$(jobs_now | tr -d ' ')
echo '{"host":"127.0.0.1","http_port":1,"grpc_port":-1,"pid":1}' >state/replicas/99999.json  # a killed replica's
scancel "$old"
sleep 1
wait_ready 1 60 || fail "the cancelled replica was not replaced"
touch stop
wait $load
rm -f stop
new=$(jobs_now | tr -d ' ')
echo "controller_cluster: while job $old was cancelled and replaced by $new: $(cat cancel.json)"
expect_eq "the ready files of ended replicas are cleared, the live one's kept" "$new.json" \
  "$(cd state/replicas && ls -- *.json | tr '\n' ' ' | sed 's/ $//')"
expect_ne "a new job replaced the cancelled one" "$old" "$new"
expect_match "the log says why" "replica job $old ended on its own" "$(cat ctl.log)"
expect_match "while it was replaced: only 200s and 503s" '^\{"counts": \{("(200|503)": [0-9]+(, )?)+\}' "$(cat cancel.json)"

expect_match "the scaled-down replicas drained and ended" '"event":"replica_end".*scaled down' "$(cat ctl.log)"

# --- a killed controller comes back and adopts its replica ----------------------------------------
kill -9 "$pid"
wait "$pid" 2>/dev/null
controller
wait_ready 1 30 || fail "the restarted controller has no ready replica"
sleep 2
expect_eq "it adopted the running replica (no new job)" "$new" "$(jobs_now | tr -d ' ')"
expect_match "and says so" "adopted replica job $new" "$(cat ctl.log)"
if pipe_infer; then
  expect_match "the pipeline finds the controller again on its new port ${grpc##*:}" '"shape":\[1,10\]' "$out$err"
fi

# --- SIGTERM drains and ends the replicas -----------------------------------------------------------
kill -TERM "$pid"
wait "$pid"
expect_eq "the controller exits 0 on SIGTERM" 0 "$?"
left=
for _ in $(seq 40); do
  left=$(jobs_now)
  [ -z "$left" ] && break
  sleep 0.25
done
expect_eq "its replicas ended with it" "" "$left"
expect_eq "and it withdrew its announcement" "no" "$([ -e services/ctl-tiny.json ] && echo yes || echo no)"
if pipe_infer; then
  expect_match "with the service gone, the pipeline names the step and the service" \
    "\"code\":14.*step 'tiny' \(model ctl-tiny at [0-9.:]+, service ctl-tiny\)" "$out$err"
fi
kill -TERM "${pipe[0]}"
wait "${pipe[0]}"

# --- generate_stream and OpenAI streams through the router: each event as the replica sends it ----
head -c 20000 /usr/share/common-licenses/GPL-3 >text.txt
"$LOOM_BUILDDIR/loom-train" --model gpt --data text:"$LOOM_TMP/text.txt" --context 32 --n-embd 16 --n-head 2 \
  --global-batch 8 --steps 10 --log-every 1000 --export gpt.h5 2>/dev/null
sed -e 's/name: ctl-tiny/name: ctl-gpt/' -e "s#$LOOM_TMP/model.h5#$LOOM_TMP/gpt.h5#" -e 's/gpu: 1/gpu: 0/' \
  -e 's/maxReplicas: 3/maxReplicas: 1/' svc.yaml >gpt.yaml
serve_start gctl --controller --spec gpt.yaml --state-dir state-gpt --grpc-port -1 --tick-s 0.5
for _ in $(seq 240); do
  [ "$(curl -s "$http/metrics" | sed -n 's/^loom_controller_replicas{state="ready"} //p')" = 1 ] && break
  sleep 0.25
done
body='{"text_input":"This License ","parameters":{"max_tokens":12}}'
whole=$(curl -s -d "$body" "$http/v2/models/ctl-gpt/generate")
curl -sN -d "$body" "$http/v2/models/ctl-gpt/generate_stream" >stream.txt
/usr/bin/python3 - "$whole" stream.txt <<'PY' && pass || fail "generate_stream through the router: $(head -c 300 stream.txt)"
import json, sys
events = [json.loads(l[5:]) for l in open(sys.argv[2]) if l.startswith("data:")]
text = "".join(e.get("text_output", "") for e in events)
whole = json.loads(sys.argv[1])["text_output"]
print(f"controller_cluster: generate_stream through the router: {len(events)} events, {text!r} (whole answer {whole!r})")
assert len(events) > 1 and text == whole, (events, whole)
PY
# OpenAI completions streamed through the router: server-sent events ending in [DONE], the same text.
curl -sN -d '{"model":"ctl-gpt","prompt":"This License ","max_tokens":12,"temperature":0,"stream":true}' "$http/v1/completions" >oai.txt
/usr/bin/python3 - "$whole" oai.txt <<'PY' && pass || fail "OpenAI stream through the router: $(head -c 300 oai.txt)"
import json, sys
data = [l[5:].strip() for l in open(sys.argv[2]) if l.startswith("data:")]
assert data and data[-1] == "[DONE]", data[-3:]
chunks = [json.loads(d) for d in data[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks)
assert len(chunks) > 1 and text == json.loads(sys.argv[1])["text_output"], (chunks[:3], sys.argv[1])
assert chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-1]
PY
kill -TERM "$pid"
wait "$pid"
finish
