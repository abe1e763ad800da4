#!/usr/bin/env python3
"""optuna_peer.py SPEC.yaml — Optuna's TPE on a loom-sweep spec, the peer of sweep_vs_optuna.sh.

Reads the same spec loom-sweep runs (command, metric, goal, trials, parallel, seed, float
parameters), runs the same command for each trial and prints the best value. With parallel > 1
trials are asked `parallel` at a time and told together, with TPE's constant liar for the pending
ones, as a study with that many workers proposes.
"""
import json
import os
import subprocess
import sys
import tempfile

import optuna
import yaml


def run_trial(spec, params, tmp):
    metrics = os.path.join(tmp, "metrics.json")
    cmd = spec["command"].replace("{metrics_file}", metrics)
    for k, v in params.items():
        cmd = cmd.replace("{%s}" % k, repr(v))
    subprocess.run(["bash", "-c", cmd], check=True)
    with open(metrics) as f:
        return float(json.loads(f.readline())[spec["metric"]])


def main():
    with open(sys.argv[1]) as f:
        spec = yaml.safe_load(f)
    params = spec["parameters"]
    for name, p in params.items():
        if p.get("type") != "float":
            sys.exit("optuna_peer: parameter %s: only float parameters" % name)
    parallel = int(spec.get("parallel", 1))
    goal = spec.get("goal", "min")
    direction = "maximize" if goal in ("max", "maximize") else "minimize"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=int(spec["seed"]), constant_liar=parallel > 1)
    study = optuna.create_study(direction=direction, sampler=sampler)
    left = int(spec["trials"])
    with tempfile.TemporaryDirectory() as tmp:
        while left > 0:
            batch = [study.ask() for _ in range(min(parallel, left))]
            values = []
            for t in batch:
                x = {k: t.suggest_float(k, float(p["min"]), float(p["max"])) for k, p in params.items()}
                values.append(run_trial(spec, x, tmp))
            for t, v in zip(batch, values):
                study.tell(t, v)
            left -= len(batch)
    print("%.9g" % study.best_value)


if __name__ == "__main__":
    main()
