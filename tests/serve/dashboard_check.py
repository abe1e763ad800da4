"""contrib/grafana/loom.json against real /metrics pages: every metric family a panel queries that
starts with one of PREFIXES exists in METRICS (a file of Prometheus text, several pages joined).
Prints the families checked; exits 1 naming the missing ones.

    python3 dashboard_check.py DASHBOARD.json METRICS.txt PREFIX...
"""
import json
import re
import sys

dash, metrics, prefixes = sys.argv[1], open(sys.argv[2]).read(), tuple(sys.argv[3:])
exprs = [t["expr"] for p in json.load(open(dash))["panels"] for t in p.get("targets", [])]
names = {n for e in exprs for n in re.findall(r"\b(?:loom|nv)_[a-z_]+\b", e)}
families = {re.sub(r"_bucket$", "", n) for n in names if n.startswith(prefixes)}
present = set(re.findall(r"^# TYPE (\S+) ", metrics, re.M))
missing = sorted(f for f in families if f not in present)
print(f"dashboard: {len(families)} families of {', '.join(prefixes)}: {sorted(families)}")
if missing:
    print("missing:", missing)
sys.exit(1 if missing or not families else 0)
