#!/usr/bin/env bash
# objectives.sh NAME METRICS_FILE X1 X2 ... — test functions for the sweep figures; writes {"value": v}
set -eu
name=$1 out=$2; shift 2
awk -v f="$name" -v xs="$*" '
function branin(x,   pi, b, c, t) { pi = atan2(0, -1); b = 5.1 / (4 * pi * pi); c = 5 / pi; t = 1 / (8 * pi)
  return (x[2] - b * x[1] * x[1] + c * x[1] - 6) ^ 2 + 10 * (1 - t) * cos(x[1]) + 10 }
function rosenbrock(x, n,   i, s) { s = 0; for (i = 1; i < n; ++i) s += 100 * (x[i + 1] - x[i] ^ 2) ^ 2 + (1 - x[i]) ^ 2; return s }
function hartmann6(x,   A, P, al, i, j, s, e) {
  split("10 3 17 3.5 1.7 8 0.05 10 17 0.1 8 14 3 3.5 1.7 10 17 8 17 8 0.05 10 0.1 14", A, " ")
  split("1312 1696 5569 124 8283 5886 2329 4135 8307 3736 1004 9991 2348 1451 3522 2883 3047 6650 4047 8828 8732 5743 1091 381", P, " ")
  split("1.0 1.2 3.0 3.2", al, " ")
  s = 0
  for (i = 1; i <= 4; ++i) { e = 0; for (j = 1; j <= 6; ++j) e += A[(i - 1) * 6 + j] * (x[j] - P[(i - 1) * 6 + j] / 10000) ^ 2; s -= al[i] * exp(-e) }
  return s }
BEGIN { n = split(xs, x, " ")
  if (f == "branin") v = branin(x); else if (f == "rosenbrock") v = rosenbrock(x, n); else if (f == "hartmann6") v = hartmann6(x)
  else { print "objectives.sh: unknown function " f > "/dev/stderr"; exit 2 }
  printf "{\"value\": %.9f}\n", v }' >"$out"
