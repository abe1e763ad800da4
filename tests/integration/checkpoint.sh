#!/usr/bin/env bash
# checkpoint.sh — loom-train checkpoints (Contract 4): a run stopped by SIGUSR1 at an arbitrary
# step and resumed gives bitwise the same losses and weights as an uninterrupted run (1 rank and
# 2 MPI ranks, with and without --ckpt-async); a 4-rank checkpoint resumes on 2 ranks and on 1
# (resharding); truncated, corrupted, wrong-version and foreign checkpoints are refused and
# --resume auto falls back to the previous good one; SIGKILL during writes never leaves a file
# that would load; h5py, h5dump and PyTorch read the files; a token file truncated mid-run fails
# after a checkpoint of the steps done.
. "$(dirname "$0")/lib.sh"
T=$LOOM_BUILDDIR/loom-train
[ -x "$T" ] || skip "loom-train not built"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$LOOM_TMP" || exit 99
cat >rankenv.sh <<'SH'
#!/bin/sh
export LOOM_DEVICE_WEIGHT=$((2 * ${OMPI_COMM_WORLD_RANK:-0} + 1))
exec "$@"
SH
chmod +x rankenv.sh
common="--steps 300 --global-batch 64 --seed 3 --lr 0.05 --log-every 1 --balance static"

launch() {  # NP ARGS...: loom-train on NP ranks (1: no mpirun)
  local np=$1
  shift
  if [ "$np" = 1 ]; then "$T" "$@"; else mpirun -np "$np" --oversubscribe ./rankenv.sh "$T" "$@"; fi
}
# interrupt NAME NP ARGS...: runs in the background, sends SIGUSR1 to every rank once rank 0 has
# logged step 20 + a random number of steps (< 70); leaves the exit status in $rc.
interrupt() {
  local name=$1 np=$2 at=$((20 + RANDOM % ${SPAN:-50}))
  shift 2
  rm -f "$name.jsonl"
  launch "$np" "$@" --metrics-file "$name.jsonl" 2>"$name.err" &
  local pid=$! n=0
  until grep -q "\"step\":$at," "$name.jsonl" 2>/dev/null || [ $n -gt 3000 ]; do sleep 0.01; n=$((n + 1)); done
  pkill -USR1 -f "^$T .*--metrics-file $name.jsonl" || true  # the ranks, not mpirun
  wait $pid
  rc=$?
}
losses() { /usr/bin/python3 -c 'import json,sys; [print(l["step"], repr(l["loss"])) for l in map(json.loads, open(sys.argv[1])) if "rank_batch" in l]' "$1"; }

for np in 1 2; do
  launch "$np" $common --metrics-file "full$np.jsonl" --export "full$np.h5" 2>/dev/null
  for mode in sync async; do
    name=r$np$mode
    extra="--ckpt-dir $name.d --ckpt-every 50"
    [ $mode = async ] && extra="$extra --ckpt-async"
    [ $np$mode = 2sync ] && extra="$extra --mllog $name.mllog"  # both runs append their MLPerf log
    interrupt "$name" "$np" $common $extra
    expect_eq "$np rank(s) $mode: stopped on SIGUSR1 with status 75" 75 "$rc"
    expect_match "$np rank(s) $mode: stop checkpoint" "stopping at step [0-9]+ on a signal, checkpoint written" "$(cat "$name.err")"
    stop=$(grep -oE "stopping at step [0-9]+" "$name.err" | grep -oE "[0-9]+$")
    run_cmd launch "$np" $common $extra --metrics-file "$name.2.jsonl" --export "$name.h5"
    expect_eq "$np rank(s) $mode: resumed run exit" 0 "$rc"
    expect_match "$np rank(s) $mode: resumed where it stopped" "resumed from $name.d/ckpt-0*$stop.h5 at step $stop" "$err"
    h5diff "full$np.h5" "$name.h5" /params /params >/dev/null && pass ||
      fail "$np rank(s) $mode: final weights differ from the uninterrupted run (stopped at $stop)"
    # Every loss after the resume equals the uninterrupted run's, bit for bit.
    diff <(losses "full$np.jsonl" | awk -v s="$stop" '$1 > s') <(losses "$name.2.jsonl") >/dev/null && pass ||
      fail "$np rank(s) $mode: losses after step $stop differ"
    echo "checkpoint: $np rank(s), $mode: stopped at step $stop, resumed, bitwise equal"
  done
done
# The MLPerf log of the stopped and the resumed 2-rank run: rank 0's lines only, JSON with the
# MLCommons keys in their order; the stopped run ends aborted, the resumed one is a new run.
verdict=$(/usr/bin/python3 - r2sync.mllog "$(grep -oE "stopping at step [0-9]+" r2sync.err | grep -oE "[0-9]+$")" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert all(l.startswith(":::MLLOG {") for l in lines), "a line without the :::MLLOG prefix"
ev = [json.loads(l[len(":::MLLOG "):]) for l in lines]
assert all(list(e) == ["namespace", "time_ms", "event_type", "key", "value", "metadata"] for e in ev), "key order"
assert all("file" in e["metadata"] and "lineno" in e["metadata"] for e in ev), "metadata without file and lineno"
runs, cur = [], None
for e in ev:
    if e["key"] == "init_start":
        cur = []
        runs.append(cur)
    cur.append(e)
assert len(runs) == 2, f"{len(runs)} runs (rank 1 must not write)"
for r in runs:
    keys = [e["key"] for e in r]
    for k in ("submission_benchmark", "global_batch_size", "opt_base_learning_rate", "train_samples", "eval_samples"):
        assert k in keys, k
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("epoch_start"), keys[:12]
    assert keys[-1] == "run_stop", keys[-1]
assert runs[0][-1]["metadata"]["status"] == "aborted", runs[0][-1]
assert runs[1][-1]["metadata"]["status"] == "success", runs[1][-1]
assert runs[1][[e["key"] for e in runs[1]].index("run_start")]["metadata"]["resumed_at_step"] == int(sys.argv[2])
acc = [e for e in runs[1] if e["key"] == "eval_accuracy"]
assert acc and 0 < acc[-1]["value"] <= 1 and "epoch_num" in acc[-1]["metadata"], acc
print("ok")
PY
)
expect_eq "MLPerf log of the stopped and resumed run" ok "$verdict"
grep -h "async: the copy" r1async.err r1async.2.jsonl 2>/dev/null | head -2
# Two ranks write their shards in parallel, rank 0 the index last; --inspect verifies them all.
for mode in sync async; do
  idx=$(ls r2$mode.d/ckpt-*.h5 | grep -v shard | tail -1)
  for r in 0 1; do
    [ -f "${idx%.h5}.shard-$r-of-2.h5" ] && pass || fail "2 ranks $mode: no shard $r next to $idx"
  done
  run_cmd "$T" --inspect "$idx"
  expect_match "2 ranks $mode: --inspect verifies the shards" "sharded: 2 shards, every one verified" "$out"
done
expect_match "2 ranks async: shards written in the background, index by rank 0" \
  "and 2 shards written in parallel \([0-9.]+ MiB; rank 0 took [0-9.]+ s, async: the copy of the state took [0-9.]+ ms beside the next step, which waited [0-9.]+ ms" \
  "$(cat r2async.err)"

# PowerSGD keeps per-rank state (error feedback, warm-started Q); it is in each rank's shard, and
# a resumed PowerSGD run is bitwise the uninterrupted one.
psgd="$common --grad-compress powersgd:rank=4,start=10"
launch 2 $psgd --metrics-file psgd-full.jsonl --export psgd-full.h5 2>/dev/null
interrupt psgd 2 $psgd --ckpt-dir psgd.d --ckpt-every 50 --ckpt-async
expect_eq "PowerSGD: stopped" 75 "$rc"
stop=$(grep -oE "stopping at step [0-9]+" psgd.err | grep -oE "[0-9]+$")
run_cmd launch 2 $psgd --ckpt-dir psgd.d --ckpt-every 50 --ckpt-async --metrics-file psgd.2.jsonl --export psgd.h5
expect_eq "PowerSGD: resumed run exit" 0 "$rc"
expect_no_match "PowerSGD: its state is restored" "start again from zero" "$err"
run_cmd "$T" --inspect "$(ls psgd.d/ckpt-*.h5 | grep -v shard | tail -1)"
expect_match "PowerSGD: each shard holds its rank's state" "shard-0-of-2.h5 \(6 rank tensors\) .*shard-1-of-2.h5 \(6 rank tensors\)" "$out"
h5diff psgd-full.h5 psgd.h5 /params /params >/dev/null && pass || fail "PowerSGD: final weights differ (stopped at $stop)"
diff <(losses psgd-full.jsonl | awk -v s="$stop" '$1 > s') <(losses psgd.2.jsonl) >/dev/null && pass ||
  fail "PowerSGD: losses after step $stop differ"
echo "checkpoint: 2 ranks PowerSGD: stopped at step $stop, resumed, bitwise equal"

# Augmentation and synthetic samples draw from (seed, epoch, sample): a stopped and resumed
# augmented 2-rank run is bitwise the uninterrupted one, and differs from the plain run.
aug="$common --train-subset 3000 --synthetic 500 --augment shift:1,flip,noise:0.05"
launch 2 $aug --metrics-file aug-full.jsonl --export aug-full.h5 2>aug-full.err
expect_match "augmented run: the epoch has the synthetic samples" "on 3000 Fashion-MNIST images \+ 500 synthetic" "$(cat aug-full.err)"
interrupt aug 2 $aug --ckpt-dir aug.d --ckpt-every 50
expect_eq "augmented run: stopped" 75 "$rc"
stop=$(grep -oE "stopping at step [0-9]+" aug.err | grep -oE "[0-9]+$")
run_cmd launch 2 $aug --ckpt-dir aug.d --ckpt-every 50 --metrics-file aug.2.jsonl --export aug.h5
expect_eq "augmented run: resumed" 0 "$rc"
h5diff aug-full.h5 aug.h5 /params /params >/dev/null && pass || fail "augmented run: final weights differ (stopped at $stop)"
diff <(losses aug-full.jsonl | awk -v s="$stop" '$1 > s') <(losses aug.2.jsonl) >/dev/null && pass ||
  fail "augmented run: losses after step $stop differ"
h5diff full2.h5 aug-full.h5 /params /params >/dev/null && fail "augmentation changed nothing" || pass
echo "checkpoint: 2 ranks augmented: stopped at step $stop, resumed, bitwise equal"
# A finished run resumed again has nothing to train: it says so, evaluates and exports (a requeued
# job can end this way).
run_cmd "$T" $common --ckpt-dir r1sync.d --export again.h5 --log-every 1000
expect_eq "nothing left to train: exit" 0 "$rc"
expect_match "nothing left to train: said" "already at step 300 of 300: nothing to train" "$err"
h5diff full1.h5 again.h5 /params /params >/dev/null && pass || fail "nothing left to train: export differs"

# A stopped run exports nothing (its weights are not the model it was asked for: a serving
# folder polled with --poll-s would take them), and its last line says it stopped, claiming no
# test accuracy (none was measured). The resumed run that finishes writes the export.
interrupt stopexp 1 $common --ckpt-dir stopexp.d --ckpt-every 50 --export stopexp.h5
expect_eq "stopped run: status 75" 75 "$rc"
[ ! -e stopexp.h5 ] && pass || fail "a stopped run wrote its unfinished model to --export"
expect_match "stopped run: says it does not export" "not exporting stopexp.h5: the run stopped at step [0-9]+ of 300" "$(cat stopexp.err)"
expect_match "stopped run: last line" "^loom-train: stopped: [0-9]+ of 300 steps" "$(tail -n 1 stopexp.err)"
expect_no_match "stopped run: no test accuracy claimed" "test accuracy" "$(tail -n 1 stopexp.err)"
/usr/bin/python3 -c 'import json,sys; s=[json.loads(l) for l in open(sys.argv[1])][-1]; assert s["event"]=="summary" and s["test_accuracy"] is None and s["preempted"] is True, s' \
  stopexp.jsonl && pass || fail "stopped run: the summary line claims an accuracy"
run_cmd "$T" $common --ckpt-dir stopexp.d --ckpt-every 50 --export stopexp.h5 --log-every 1000
expect_eq "stopped run resumed: exit" 0 "$rc"
h5diff full1.h5 stopexp.h5 /params /params >/dev/null && pass || fail "stopped run resumed: the export differs"

# Training longer than the checkpoint's run planned: with a constant learning rate it resumes,
# bitwise the run that planned the longer total from the start; a cosine schedule depends on the
# total, so it is refused with the option to pass, and re-planned with --lr-replan. Any other
# difference is still refused.
"$T" $common --steps 200 --ckpt-dir longer.d 2>/dev/null
run_cmd "$T" $common --ckpt-dir longer.d --export longer.h5 --log-every 1000
expect_eq "longer --steps, constant lr: exit" 0 "$rc"
expect_match "longer --steps, constant lr: resumed" "resumed from longer.d/ckpt-0*200.h5 at step 200" "$err"
h5diff full1.h5 longer.h5 /params /params >/dev/null && pass || fail "longer --steps: weights differ from the 300-step run"
run_cmd "$T" $common --ckpt-dir longer.d --steps 400 --lr 0.1
expect_eq "longer --steps and another lr: refused" 1 "$rc"
expect_match "longer --steps and another lr: named" "checkpoint of another configuration \(lr.base" "$err"
cos="$common --lr-schedule cosine --warmup-steps 20"
"$T" $cos --steps 100 --ckpt-dir cos.d 2>/dev/null
run_cmd "$T" $cos --steps 150 --ckpt-dir cos.d
expect_eq "longer --steps, cosine: refused" 1 "$rc"
expect_match "longer --steps, cosine: says what to pass" "planned 100 steps, this run 150.*pass --lr-replan" "$err"
run_cmd "$T" $cos --steps 150 --ckpt-dir cos.d --lr-replan --log-every 50
expect_eq "longer --steps, cosine, --lr-replan: exit" 0 "$rc"
expect_match "longer --steps, cosine: re-planned" "re-planning the cosine schedule over 150 steps" "$err"
expect_match "longer --steps, cosine: resumed" "resumed from cos.d/ckpt-0*100.h5 at step 100" "$err"
expect_match "longer --steps, cosine: trained on" "step 150/150" "$err"

# Resharding: a 4-rank checkpoint resumed on 2 ranks and on 1 follows the same loss curve (within
# fp32 tolerance: the sums are taken in another order; this training is chaotic enough that
# such differences grow from 1e-7 to 1e-2 between steps 100 and 150, so the run stops at 100).
short="$common --steps 100"
launch 4 $short --metrics-file full4.jsonl --export full4.h5 2>/dev/null
SPAN=20 interrupt r4 4 $short --ckpt-dir r4.d  # well before the end: 4 small ranks run fast
expect_eq "4 ranks: stopped" 75 "$rc"
stop=$(grep -oE "stopping at step [0-9]+" r4.err | grep -oE "[0-9]+$")
for np in 2 1; do
  rm -rf "rs$np.d" && cp -r r4.d "rs$np.d"
  run_cmd launch "$np" $short --ckpt-dir "rs$np.d" --metrics-file "rs$np.jsonl" --export "rs$np.h5"
  expect_eq "4 -> $np ranks exit" 0 "$rc"
  expect_match "4 -> $np ranks: resharding said" "resharding: the checkpoint was written by 4 ranks, resuming on $np" "$err"
  h5diff -d 1e-4 full4.h5 "rs$np.h5" /params /params >/dev/null && pass || fail "4 -> $np ranks: final weights differ"
  /usr/bin/python3 - full4.jsonl "rs$np.jsonl" "$stop" <<'PY' && pass || fail "4 -> $np ranks: loss curve"
import json, sys
def losses(p):
    return {l["step"]: l["loss"] for l in map(json.loads, open(p)) if "rank_batch" in l}
a, b, stop = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
print(f"checkpoint: resharded after step {stop}: largest relative loss difference {worst:.2e} over {len(b)} steps")
assert min(b) == stop + 1 and worst < 1e-3, (min(b), worst)
PY
done

# Bad checkpoints: refused with a message; --resume auto falls back to the previous good one.
"$T" $common --steps 30 --ckpt-dir bad.d --ckpt-every 10 --ckpt-keep 5 --metrics-file bad.jsonl 2>/dev/null
newest=bad.d/ckpt-0000000030.h5
cp "$newest" keep.h5
check_bad() {  # WHAT REGEX: --resume FILE of the damaged newest file, then --resume auto
  run_cmd "$T" $common --steps 30 --resume "$newest"
  expect_eq "$1: --resume FILE exit" 1 "$rc"
  expect_match "$1: --resume FILE message" "$2" "$err"
  run_cmd "$T" $common --steps 30 --ckpt-dir bad.d --log-every 100
  expect_eq "$1: --resume auto exit" 0 "$rc"
  expect_match "$1: --resume auto skips it, naming it" "skipping a checkpoint that does not verify: $newest" "$err"
  expect_match "$1: --resume auto takes the previous" "resumed from bad.d/ckpt-0000000020.h5 at step 20" "$err"
  rm -f bad.d/*.tmp.* && cp keep.h5 "$newest"
}
head -c 100000 keep.h5 >"$newest"
check_bad "truncated" "not an HDF5 file \(or truncated\)|truncated or corrupt"
/usr/bin/python3 - "$newest" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:  # flip a byte inside the largest dataset's data
    ds = f["params/fc1.weight"]
    off = ds.id.get_offset() if ds.chunks is None else ds.id.get_chunk_info(0).byte_offset
data = bytearray(open(sys.argv[1], "rb").read())
data[off + 1000] ^= 0x5A
open(sys.argv[1], "wb").write(bytes(data))
PY
check_bad "flipped byte" "fails its checksum"
/usr/bin/python3 -c 'import h5py, numpy, sys; f = h5py.File(sys.argv[1], "r+"); f.attrs["loom.version"] = numpy.int32(99)' "$newest"
check_bad "wrong version" "format version 99 is not supported"
# Crafted state (checkpoints are files people copy between users): each value a resume would trip
# on is named, --inspect says a resume would refuse it, and --resume auto falls back.
craft() {  # FILE PYTHON-EDIT through h5py: f the open file; state(), put_state(s[, raw]), put(name, values)
  /usr/bin/python3 - "$1" "$2" <<'PY'
import h5py, json, sys
import numpy as np
f = h5py.File(sys.argv[1], "r+")
def state(name="state/json"):
    return json.loads(bytes(f[name][()]).decode())
def put_state(s, raw=None, name="state/json"):
    raw = raw if raw is not None else json.dumps(s).encode()
    del f[name]
    f.create_dataset(name, data=np.frombuffer(raw, dtype=np.uint8), chunks=True, fletcher32=True)
def put(name, values):
    del f[name]
    f.create_dataset(name, data=np.asarray(values, dtype=np.float32), chunks=True, fletcher32=True)
exec(sys.argv[2])
f.close()
PY
}
check_crafted() {  # WHAT REGEX PYTHON-EDIT
  cp keep.h5 "$newest"
  craft "$newest" "$3"
  run_cmd "$T" --inspect "$newest"
  expect_eq "$1: --inspect exit" 1 "$rc"
  expect_match "$1: --inspect says a resume would refuse it" "a resume would refuse it: .*$2" "$err"
  check_bad "$1" "$2"
}
run_cmd "$T" --inspect "$newest"
expect_match "--inspect of a good checkpoint: a resume would use it" "resume: the state is whole" "$out"
check_crafted "a moment of shape [1]" "optimizer/m/fc1.weight is \\[1\\], its parameter \\[" 'put("optimizer/m/fc1.weight", [0.0])'
check_crafted "a moment of no parameter" "optimizer/m/ghost belongs to no parameter" 'put("optimizer/m/fc1.bias", [0.0]); f.move("optimizer/m/fc1.bias", "optimizer/m/ghost")'
check_crafted "a negative batch" "state/json's batch is -1000000" 's = state(); s["batch"] = -1000000; put_state(s)'
check_crafted "a negative step" "state/json's step is -5" 's = state(); s["step"] = -5; put_state(s)'
check_crafted "a negative epoch" "state/json's epoch is -3" 's = state(); s["epoch"] = -3; put_state(s)'
check_crafted "a loss scale of infinity" "loss_scale is not a positive finite number" 's = state(); s["loss_scale"] = 1e39; put_state(s)'
check_crafted "state/json that is not JSON" "state/json: not valid JSON" 'put_state(None, b"{not json")'
check_crafted "train.config nested 30,000 deep" "train.config: JSON nested deeper than 64 levels" \
  'f.attrs["train.config"] = np.bytes_(b"[" * 30000 + b"]" * 30000)'
# AdamW's state with its first moment and not its second.
"$T" $common --steps 20 --optimizer adamw --ckpt-dir adam.d --ckpt-every 10 2>/dev/null
craft adam.d/ckpt-0000000020.h5 'del f["optimizer/v"]'
run_cmd "$T" $common --steps 20 --optimizer adamw --resume adam.d/ckpt-0000000020.h5
expect_eq "AdamW without optimizer/v: exit" 1 "$rc"
expect_match "AdamW without optimizer/v: named" "AdamW's state has one of its two moments" "$err"
run_cmd "$T" $common --steps 20 --optimizer adamw --ckpt-dir adam.d --log-every 100
expect_match "AdamW without optimizer/v: --resume auto takes the previous" "resumed from adam.d/ckpt-0000000010.h5 at step 10" "$err"
"$T" --layers 784,64,10 --steps 10 --global-batch 64 --ckpt-dir other.d --ckpt-every 10 2>/dev/null
run_cmd "$T" $common --steps 30 --resume other.d/ckpt-0000000010.h5
expect_eq "another configuration: exit" 1 "$rc"
expect_match "another configuration: named" "checkpoint of another configuration \(model.layers" "$err"
run_cmd "$T" $common --steps 30 --resume "$LOOM_TMP/full1.h5"
expect_match "a model file is not a checkpoint" "a Loom model file, not a checkpoint" "$err"
run_cmd "$T" $common --ckpt-every 5
expect_eq "--ckpt-every without --ckpt-dir" 2 "$rc"

# Bad shards: a missing one, a flipped byte, another checkpoint's shard in its place. The index
# is refused naming the shard, and --resume auto falls back to the previous checkpoint.
launch 2 $common --steps 30 --ckpt-dir bads.d --ckpt-every 10 --ckpt-keep 5 2>/dev/null
newest=bads.d/ckpt-0000000030.h5
shard=bads.d/ckpt-0000000030.shard-1-of-2.h5
cp "$shard" keep-shard.h5
check_bad_shard() {  # WHAT REGEX [THE FILE NAMED: the shard by default]; then the shard is put back
  run_cmd launch 2 $common --steps 30 --resume "$newest"
  expect_ne "$1: --resume FILE refused" 0 "$rc"
  expect_match "$1: --resume FILE message" "$2" "$err"
  run_cmd launch 2 $common --steps 30 --ckpt-dir bads.d --log-every 100
  expect_eq "$1: --resume auto exit" 0 "$rc"
  expect_match "$1: --resume auto skips it" "skipping a checkpoint that does not verify: $newest.*${3:-$shard}" "$err"
  expect_match "$1: --resume auto takes the previous" "resumed from bads.d/ckpt-0000000020.h5 at step 20" "$err"
  cp keep-shard.h5 "$shard"
}
rm "$shard"
check_bad_shard "missing shard" "$shard: No such file"
/usr/bin/python3 - "$shard" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    off = f["shard/data"].id.get_chunk_info(0).byte_offset
data = bytearray(open(sys.argv[1], "rb").read())
data[off + 1000] ^= 0x5A
open(sys.argv[1], "wb").write(bytes(data))
PY
check_bad_shard "flipped byte in a shard" "$shard: /shard/data fails its checksum"
cp bads.d/ckpt-0000000020.shard-1-of-2.h5 "$shard"
check_bad_shard "another checkpoint's shard" "$shard: the shard does not match its index"
# An index whose total claims 2^28 or 2^40 values: refused at the first shard that does not hold
# them, before anything of that size is allocated.
cp "$newest" keep-index.h5
for total in 268435456 1099511627776; do
  craft "$newest" "s = state('state/shards'); s['total'] = $total; put_state(s, name='state/shards')"
  check_bad_shard "a total of $total" "shard-0-of-2.h5: the shard does not match its index" shard-0-of-2.h5
  cp keep-index.h5 "$newest"
done
run_cmd "$T" --inspect "$shard"
expect_match "a shard is not an index" "a shard of a checkpoint; load its index" "$err"
# Shards whose index was never written (the ranks were killed before it) are removed at start.
cp keep-shard.h5 bads.d/ckpt-0000000040.shard-1-of-2.h5
run_cmd launch 2 $common --steps 30 --ckpt-dir bads.d --log-every 100
expect_eq "an orphan shard is removed" "" "$(ls bads.d | grep 0000000040 || true)"

# SIGKILL while checkpoints are being written (one every step): whatever is left in the folder
# verifies, and temporary files are never taken for checkpoints.
for i in 1 2 3 4 5; do
  "$T" $common --steps 100000 --ckpt-dir kill.d --ckpt-every 1 --ckpt-keep 2 --log-every 1000 2>/dev/null &
  pid=$!
  sleep "0.$((RANDOM % 9 + 1))"; sleep 1
  kill -KILL $pid
  wait $pid 2>/dev/null
done
n=0
for f in kill.d/ckpt-*.h5; do
  "$T" --inspect "$f" >/dev/null 2>&1 && pass || fail "after SIGKILL: $f does not verify"
  n=$((n + 1))
done
echo "checkpoint: after 5 SIGKILLs during writes: $n checkpoint files, all verify; $(ls kill.d | grep -c tmp || true) temporary files left"
run_cmd "$T" $common --steps 100000 --ckpt-dir kill.d --steps 3 --resume never --log-every 1000
expect_eq "no temporary file left once a writer starts again" "" "$(ls kill.d | grep tmp || true)"

# Readers: --inspect, h5dump, h5py, and the parameters load into PyTorch.
run_cmd "$T" --inspect r1sync.d/ckpt-0000000300.h5
expect_eq "--inspect exit" 0 "$rc"
expect_match "--inspect output" "Loom checkpoint, format version 1, every checksum verified" "$out"
expect_match "--inspect state" "\"step\":300" "$out"
run_cmd "$T" --inspect "$newest.nope"
expect_eq "--inspect a missing file" 1 "$rc"
h5dump -H r1sync.d/ckpt-0000000300.h5 | grep -q 'DATASET "fc1.weight"' && pass || fail "h5dump cannot read a checkpoint"
/usr/bin/python3 - r1sync.d/ckpt-0000000300.h5 <<'PY' && pass || fail "h5py / PyTorch"
import h5py, json, sys, torch
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["loom.format"] in (b"checkpoint", "checkpoint")
    state = json.loads(bytes(f["state/json"][()]).decode())
    sd = {k: torch.from_numpy(f["params"][k][()]) for k in f["params"]}
    assert set(f["optimizer/m"]) == set(sd)
m = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
m.load_state_dict({k.replace("fc1", "0").replace("fc2", "2").replace("fc3", "4"): v for k, v in sd.items()})
assert state["step"] == 300
PY

# A token file truncated under a running job (issue 33, item 13; SIGBUS and no checkpoint before):
# the run fails naming the file, after a checkpoint of the steps it finished (none was due);
# with the file restored, --resume auto goes on from that step.
/usr/bin/python3 - <<'PY' || exit 99
import numpy as np
h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = 20240520, 1, 50000
open("tk.bin", "wb").write(h.tobytes() + np.tile(np.arange(3, 203), 250).astype(np.uint16).tobytes())
PY
cp tk.bin tk.orig
tk="--model gpt --data tokens:$LOOM_TMP/tk.bin --vocab 256 --context 32 --n-embd 32 --n-head 4 --global-batch 8 --seed 1 --log-every 1 --ckpt-dir tk.d --ckpt-every 1000000"
"$T" $tk --steps 100000 --metrics-file tk.jsonl 2>tk.err &
tpid=$! n=0
until grep -q '"step":30,' tk.jsonl 2>/dev/null || [ $n -gt 3000 ]; do sleep 0.01; n=$((n + 1)); done
truncate -s 2048 tk.bin
wait $tpid
expect_eq "a token file truncated while training: exit 1 (not SIGBUS)" 1 $?
expect_match "the error names the file and the checkpoint of the steps done" \
  "tk.bin: the token file changed while in use.*checkpoint .*tk.d/ckpt-[0-9]+.h5 holds the [0-9]+ steps done: repair the file and resume" \
  "$(tail -3 tk.err)"
done_steps=$(grep -oE 'holds the [0-9]+ steps done' tk.err | grep -oE '[0-9]+')
[ "${done_steps:-0}" -ge 30 ] && pass || fail "the checkpoint holds ${done_steps:-no} steps, not the 30 or more logged"
cp tk.orig tk.bin
run_cmd "$T" $tk --steps $((done_steps + 5)) --resume auto
expect_eq "resumed after the file was repaired: exit" 0 "$rc"
expect_match "resumed at the step the failure saved" "resumed from .*ckpt-0*$done_steps.h5 at step $done_steps" "$err"

# loom-bench checkpoint runs (the figures come from `make bench`; here only that it works).
run_cmd "$LOOM_BUILDDIR/loom-bench" checkpoint --bytes 8388608 --dir "$LOOM_TMP" --reps 1 --format json
expect_eq "loom-bench checkpoint exit" 0 "$rc"
expect_match "loom-bench checkpoint figures" '"loom_write_gbps":[0-9.]+,"dd_write_gbps":[0-9.]+,"ratio"' "$out"
finish
