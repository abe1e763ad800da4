#!/usr/bin/env bash
# controller_figures.sh — issue 15's serving-controller figures on the local cluster (SLURM_CONF
# set): the router's added latency (p50 through the controller minus p50 direct to the replica it
# routes to, one client, gRPC with loom-bench and REST with load_http.py; target <= 0.3 ms), and
# the scaling times with the controller's default windows (stable 60 s, panic 6 s, scale-down
# delay 30 s, tick 2 s): a burst's start to the second replica ready, and the burst's end to the
# first scale-down and to min replicas.
set -u
B=${LOOM_BUILDDIR:-.}
S=$B/loom-serve
L="/usr/bin/python3 ${LOOM_SRCDIR:-.}/tests/serve/load_http.py"
[ -x "$S" ] || { echo "controller_figures: loom-serve not built, skipped"; exit 0; }
[ -n "${SLURM_CONF:-}" ] && sinfo -h >/dev/null 2>&1 || { echo "controller_figures: no local cluster (SLURM_CONF), skipped"; exit 0; }
tmp=$(mktemp -d)
chmod 755 "$tmp"
trap 'kill $ctl 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
"$B/loom-train" --layers 784,16,10 --steps 5 --global-batch 64 --export model.h5 2>/dev/null
cat >svc.yaml <<YAML
apiVersion: loom.ai/v1
kind: InferenceService
metadata: {name: bench-tiny}
spec:
  model: {path: $tmp/model.h5}
  autoscaling:
    minReplicas: 1
    maxReplicas: 3
    metrics: [{type: Requests, queueLength: 2}]
YAML
"$S" --controller --spec svc.yaml --state-dir state --http-port 0 --grpc-port 0 --log-format json 2>ctl.log &
ctl=$!
now() { date +%s.%N; }
ready() { curl -s "$http/metrics" | sed -n 's/^loom_controller_replicas{state="ready"} //p'; }
until grep -q '"event":"ready"' ctl.log 2>/dev/null; do sleep 0.2; done
http=$(grep -oE '"http_port":[0-9]+' ctl.log | head -1 | cut -d: -f2)
grpc=$(grep -oE '"grpc_port":[0-9]+' ctl.log | head -1 | cut -d: -f2)
http=127.0.0.1:$http
rfile=$(ls state/replicas/*.json | head -1)
rhttp=127.0.0.1:$(sed -n 's/.*"http_port":\([0-9]*\).*/\1/p' "$rfile")
rgrpc=127.0.0.1:$(sed -n 's/.*"grpc_port":\([0-9]*\).*/\1/p' "$rfile")
"$B/loom-bench" serve --compare "127.0.0.1:$grpc" "$rgrpc" --model bench-tiny --seconds 12
a=$($L "$http" bench-tiny 784 1 4 | sed -n 's/.*"p50_ms": \([0-9.]*\).*/\1/p')
d=$($L "$rhttp" bench-tiny 784 1 4 | sed -n 's/.*"p50_ms": \([0-9.]*\).*/\1/p')
echo "controller: REST, one client (Python http.client): p50 through the router $a ms; peer: direct to the replica $d ms; added $(echo "$a - $d" | bc) ms"
# Let the latency runs fall out of the windows, then a burst of 8 clients for 30 s.
sleep 70
t0=$(now)
$L "$http" bench-tiny 784 8 30 >burst.json &
load=$!
t2=
while kill -0 $load 2>/dev/null; do
  [ -z "$t2" ] && [ "$(ready)" -ge 2 ] 2>/dev/null && t2=$(now)
  sleep 0.2
done
t1=$(now)
peak=$(grep -c '"event":"ready"' ctl.log)
echo "controller: burst (8 clients, queueLength 2): second replica ready $(echo "${t2:-$t1} - $t0" | bc) s after it began" \
  "(panic window 6 s, tick 2 s); replicas started in all: $peak; answers $(cat burst.json)"
down=
until [ "$(ready)" = 1 ] && [ "$(squeue -h -n loom-bench-tiny -t RUNNING,PENDING | wc -l)" = 1 ]; do
  [ -z "$down" ] && grep -q '"event":"replica_end"' ctl.log && down=$(now)
  sleep 0.5
done
echo "controller: idle: first replica ended $(echo "${down:-$(now)} - $t1" | bc) s after the burst, back to 1 replica" \
  "$(echo "$(now) - $t1" | bc) s after (stable window 60 s, panic held 60 s from its last trigger, scale-down delay 30 s)"
kill -TERM $ctl
wait $ctl
