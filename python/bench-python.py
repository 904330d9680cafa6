"""What the module costs (issue 37): CPU time of json dumps/loads, a
regex loop, dict and list churn, in one process: plain (before import)
is measured by a child without the module; then imported, no limit; then
inside a limit block.  Interleaved rounds, the median of each; run it
with the library's build on LD_LIBRARY_PATH, PYTHONPATH at the package:

    python3 python/bench-python.py [ROUNDS]

Wall-clock ratios on a shared machine vary: read the medians and spread."""
import json
import os
import re
import subprocess
import sys
import time

WORK = r'''
import json, re, time
def work():
    doc = {"k%d" % i: [i, str(i), {"x": i * 1.5}] for i in range(2000)}
    for _ in range(20):
        json.loads(json.dumps(doc))
    pat = re.compile(r"(\w+)@(\w+)\.com")
    text = " ".join("user%d@host%d.com" % (i, i) for i in range(2000))
    for _ in range(20):
        pat.findall(text)
    for _ in range(20):
        d = {}
        for i in range(20000):
            d[i] = [i] * 3
        del d
def cpu():
    t = time.process_time(); work(); return time.process_time() - t
'''


def child(mode):
    code = WORK + r'''
import sys
mode = sys.argv[1]
if mode != "plain":
    import memlimits
if mode == "limit":
    with memlimits.limit(held="4GiB"):
        print(cpu())
else:
    print(cpu())
'''
    out = subprocess.run([sys.executable, "-c", code, mode], check=True,
                         capture_output=True, text=True)
    return float(out.stdout)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    res = {"plain": [], "imported": [], "limit": []}
    for _ in range(rounds):
        for m in res:
            res[m].append(child(m))
    med = {m: sorted(v)[len(v) // 2] for m, v in res.items()}
    for m, v in res.items():
        print("%-9s median %.3f s  (min %.3f, max %.3f)  %+.1f %%" % (
            m, med[m], min(v), max(v), 100 * (med[m] / med["plain"] - 1)))


if __name__ == "__main__":
    main()
