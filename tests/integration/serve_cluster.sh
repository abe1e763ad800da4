#!/usr/bin/env bash
# serve_cluster.sh — examples/serve.sbatch as a real Slurm job on the local cluster: the replica
# comes up on the node, answers KServe v2 over REST and gRPC with its token, logs JSON, and on
# `scancel --signal=TERM` drains and ends the job with exit code 0.
. "$(dirname "$0")/lib.sh"
require_cluster
S=$LOOM_BUILDDIR/loom-serve
G=$LOOM_BUILDDIR/tests/serve/kserve_grpc_client
[ -x "$S" ] || skip "loom-serve not built"
[ -x "$G" ] || skip "loom-serve built without gRPC"
chmod 0755 "$LOOM_TMP"
cd "$LOOM_TMP" || exit 99
mkdir -p repo/tiny/1
"$LOOM_BUILDDIR/loom-train" --layers 784,16,10 --steps 5 --global-batch 64 --export repo/tiny/1/model.h5 2>/dev/null
printf 'cluster-token\n' >token && chmod 600 token
read -r hp gp < <(/usr/bin/python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
jid=$(PATH=$LOOM_BUILDDIR:$PATH LOOM_MODEL_REPOSITORY=$LOOM_TMP/repo LOOM_TOKEN_FILE=$LOOM_TMP/token \
  LOOM_HTTP_PORT=$hp LOOM_GRPC_PORT=$gp sbatch --parsable -n1 -c1 -o "$LOOM_TMP/job.out" "$LOOM_SRCDIR/examples/serve.sbatch")
expect_match "sbatch accepted the replica" "^[0-9]+$" "$jid"
ready=
for _ in $(seq 120); do
  ready=$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$hp/v2/health/ready")
  [ "$ready" = 200 ] && break
  sleep 0.5
done
expect_eq "the replica job is ready" 200 "$ready"
expect_match "it listens on every interface, with a token" "listening: http 0\.0\.0\.0:$hp grpc 0\.0\.0\.0:$gp, bearer token required" "$(cat job.out)"
expect_eq "REST needs the token" 401 "$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$hp/v2/models/tiny")"
head -c 3136 /dev/zero >x.bin
run_cmd env LOOM_TOKEN=cluster-token "$G" "127.0.0.1:$gp" infer tiny 1 FP32 1,784 x.bin
expect_match "gRPC inference through the replica" '"model_name":"tiny","model_version":"1",.*"shape":\[1,10\]' "$out"
scancel --batch --signal=TERM "$jid"
state=
for _ in $(seq 60); do
  info=$(scontrol show job "$jid" 2>/dev/null)
  state=$(grep -oE "JobState=[A-Z_]+" <<<"$info" | cut -d= -f2)
  case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT) break ;; esac
  sleep 0.5
done
expect_eq "SIGTERM ends the replica job cleanly" COMPLETED "$state"
expect_match "with exit code 0" "ExitCode=0:0" "$info"
# (slurmstepd adds its own "*** JOB ... CANCELLED ***" line for scancel; the rest is loom-serve's.)
/usr/bin/python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1]) if l.strip() and not l.startswith("slurmstepd")]' job.out && pass ||
  fail "the replica's log is not JSON lines: $(head -3 job.out)"
expect_match "it drained before it stopped" '"msg":"stopped"' "$(cat job.out)"
finish
