"""mllog_compliance.py — MLCommons' own compliance checker (PyPI mlperf-logging, training rules)
on a loom-train --mllog file.

The checker runs its common rules, then the division's, then the benchmark's own file, which
exists only for MLPerf's reference benchmarks (the checker itself stops with FileNotFoundError on
any other). Loom's models are not those, so this runs every rule file the log leads to that the
checker has and names the ones it lacks; the division's list of benchmark names is the one rule
expected to fail (doc/operations.md says why).

Usage: python mllog_compliance.py FILE.mllog [RULESET]
Prints each message of the checker and a last line "verdict: ..."; exits 1 when any rule other
than the benchmark-specific ones failed.
"""
import os
import sys

from mlperf_logging.compliance_checker import mlp_compliance as mc

path = sys.argv[1]
ruleset = sys.argv[2] if len(sys.argv) > 2 else "6.1.0"
checker = mc.make_checker("training", ruleset, False, True)  # werror: every CHECK failure is a message
rules = os.path.dirname(os.path.abspath(mc.__file__))
absent = []
real_checks = checker.configured_checks


def configured_checks(loglines, config_file):
    if not os.path.exists(config_file):
        absent.append(os.path.basename(config_file))
        return
    real_checks(loglines, config_file)


checker.configured_checks = configured_checks
loglines, errors = mc.mlp_parser.parse_file(path, ruleset=ruleset)
for line, error in errors:
    print(f"parse error: {error}: {line}")
checker.check_loglines(loglines, f"training_{ruleset}/common.yaml")
messages = list(checker.not_overwritable) + list(checker.overwritable.values())
benchmark_only = [m for m in messages if "submission_benchmark" in m or "Could not find config file" in m]
other = [m for m in messages if m not in benchmark_only]
for m in messages:
    print("message:", m.replace("\n", " | ")[:300])
print("rule files without Loom's benchmark:", ", ".join(absent) or "none")
ok = not errors and not other
print(f"verdict: {'common and division rules pass' if ok else 'FAILED'}; "
      f"{len(benchmark_only)} benchmark-specific messages, {len(other)} others")
sys.exit(0 if ok else 1)
