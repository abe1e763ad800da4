#!/usr/bin/env python3
"""load_http.py — closed-loop KServe v2 REST load for the controller's tests: N clients, each
on its own kept-alive connection, send one-row FP32 requests to MODEL for S seconds (or until
the file STOP exists) and the answers are counted by status; prints one JSON object:
{"counts": {"200": n, "503": m, ...}, "p50_ms": x}. --rows N sends N rows a request, so that a
request spends its time in the server rather than in these Python clients (a tiny model answers
a row faster than a client sends the next).

    load_http.py HOST:PORT MODEL FEATURES CLIENTS SECONDS [--rows N] [--token T] [--stop FILE]
"""
import argparse, collections, http.client, json, os, threading, time

p = argparse.ArgumentParser()
p.add_argument("addr"); p.add_argument("model"); p.add_argument("features", type=int)
p.add_argument("clients", type=int); p.add_argument("seconds", type=float)
p.add_argument("--token", default=""); p.add_argument("--stop", default=""); p.add_argument("--rows", type=int, default=1)
a = p.parse_args()
host, port = a.addr.rsplit(":", 1)
body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [a.rows, a.features],
                               "data": [0.25] * (a.rows * a.features)}]})
headers = {"Content-Type": "application/json"}
if a.token:
    headers["Authorization"] = "Bearer " + a.token
counts, lat, lock = collections.Counter(), [], threading.Lock()
end = time.time() + a.seconds

def worker():
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    while time.time() < end and not (a.stop and os.path.exists(a.stop)):
        t0 = time.perf_counter()
        try:
            c.request("POST", f"/v2/models/{a.model}/infer", body, headers)
            r = c.getresponse()
            r.read()
            s = str(r.status)
            if r.status == 503 and r.getheader("Retry-After") is None:
                s = "503-without-Retry-After"
            if r.status == 503:
                time.sleep(0.01)
        except Exception as e:  # a dropped connection: counted, and a new one
            s = "error:" + type(e).__name__
            c = http.client.HTTPConnection(host, int(port), timeout=60)
        with lock:
            counts[s] += 1
            if s == "200":
                lat.append(time.perf_counter() - t0)

ts = [threading.Thread(target=worker) for _ in range(a.clients)]
for t in ts:
    t.start()
for t in ts:
    t.join()
lat.sort()
print(json.dumps({"counts": dict(counts), "p50_ms": round(lat[len(lat) // 2] * 1e3, 3) if lat else None}))
