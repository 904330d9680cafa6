"""What the module costs (issue 37): json dumps/loads, a regex loop, dict
and list churn and `python3 -m test test_json test_re`, each run four
ways: plain (no memlimits), with the module imported and no limit
("imported"), after one limit block was entered and left (the wrappers
are in, this thread is in no task: "after"), and inside a `limit`
block.  `make bench-python` runs it against the build tree (PYTHONPATH
at the built package, LD_LIBRARY_PATH at the library):

    python3 python/bench-python.py [--cpu ROUNDS] [WORKLOAD...]

Instructions by default: each (workload, mode) is one process under
callgrind, less the same mode's process with an empty workload (start-up,
the import and the block's entry are then not the workload's), so the
ratio is exact and repeatable on a loaded machine.  PYTHONHASHSEED=0 and
MEMLIMITS_SEED=1: the same instructions run to run.  --cpu ROUNDS: user +
system time of the workload instead, interleaved rounds, the median
(±30 % run to run on a shared machine: read the spread)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

WORK = {
    "none": "pass",
    "json": r'''
import json
doc = {"k%d" % i: [i, str(i), {"x": i * 1.5}] for i in range(2000)}
for _ in range(20):
    json.loads(json.dumps(doc))
''',
    "regex": r'''
import re
pat = re.compile(r"(\w+)@(\w+)\.com")
text = " ".join("user%d@host%d.com" % (i, i) for i in range(2000))
for _ in range(40):
    pat.findall(text)
    pat.sub(r"\2@\1", text)
''',
    "churn": r'''
for _ in range(20):
    d = {}
    for i in range(20000):
        d[i] = [i] * 3
    del d
lst = []
for i in range(200000):
    lst.append(str(i))
    if len(lst) > 1000:
        del lst[:500]
''',
    "regrtest": r'''
import sys
from test.libregrtest import main
sys.argv = ["regrtest", "-q", "test_json", "test_re"]
try:
    main()
except SystemExit as e:
    if e.code:
        raise
''',
}

# json and re are imported first in every mode: memlimits imports re,
# and the workloads' own imports of it would otherwise count in plain
# mode only (json -4 % "imported").
CHILD = r'''
import sys, time, json, re
mode, body = sys.argv[1], sys.argv[2]
if mode != "plain":
    import memlimits
if mode == "after":
    with memlimits.limit(held="4GiB"):
        pass
code = compile(body, "<workload>", "exec")
task = memlimits.limit(held="4GiB") if mode == "limit" else None
# The cyclic collector at the same points of the workload in every mode:
# when a full collection runs depends on how many objects survived the
# last one (it waits for 25 % more), which the module's own objects
# changed (a collection less read as -2.6 % "imported" on the regex
# loop).  Frozen, then collected: none survive, in any mode.
import gc
gc.collect()
gc.freeze()
gc.collect()
t = time.process_time()
if task is not None:
    with task:
        exec(code, {"__name__": "__work__"})
else:
    exec(code, {"__name__": "__work__"})
print(time.process_time() - t)
'''

MODES = ("plain", "imported", "after", "limit")


def env():
    e = dict(os.environ, PYTHONHASHSEED="0", MEMLIMITS_SEED="1")
    # The children run in a scratch directory: paths made absolute.
    for var in ("PYTHONPATH", "LD_LIBRARY_PATH"):
        if e.get(var):
            e[var] = os.pathsep.join(os.path.abspath(p)
                                     for p in e[var].split(os.pathsep))
    return e


def run_ir(valgrind, mode, work, tmp):
    out = os.path.join(tmp, "cg.out")
    subprocess.run([valgrind, "--tool=callgrind", "--callgrind-out-file=" +
                    out, sys.executable, "-c", CHILD, mode, WORK[work]],
                   check=True, env=env(), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, cwd=tmp)
    with open(out) as f:
        for line in f:
            m = re.match(r"(?:summary|totals): (\d+)", line)
            if m:
                return int(m.group(1))
    raise SystemExit("bench-python: no totals in callgrind's output")


def run_cpu(mode, work, tmp):
    r = subprocess.run([sys.executable, "-c", CHILD, mode, WORK[work]],
                       check=True, env=env(), capture_output=True,
                       text=True, cwd=tmp)
    return float(r.stdout.split()[-1])


def main():
    args = sys.argv[1:]
    rounds = 0
    if args[:1] == ["--cpu"]:
        rounds = int(args[1])
        args = args[2:]
    works = args or ["json", "regex", "churn", "regrtest"]
    for w in works:
        if w not in WORK or w == "none":
            raise SystemExit("bench-python: no workload %r (%s)" % (
                w, ", ".join(k for k in WORK if k != "none")))
    valgrind = shutil.which(os.environ.get("VALGRIND") or "valgrind")
    if not rounds and not valgrind:
        raise SystemExit("bench-python: no valgrind: give --cpu ROUNDS")
    with tempfile.TemporaryDirectory() as tmp:
        if not rounds:
            print("instructions (callgrind), less each mode's empty "
                  "workload; %s" % sys.executable)
            base = {m: run_ir(valgrind, m, "none", tmp) for m in MODES}
            for w in works:
                ir = {m: run_ir(valgrind, m, w, tmp) - base[m]
                      for m in MODES}
                print("%-9s plain %13d  imported %+6.1f %%  after %+6.1f %%"
                      "  limit %+6.1f %%" % (
                          w, ir["plain"],
                          100 * (ir["imported"] / ir["plain"] - 1),
                          100 * (ir["after"] / ir["plain"] - 1),
                          100 * (ir["limit"] / ir["plain"] - 1)), flush=True)
            return
        print("CPU time (s), medians of %d interleaved rounds; %s" % (
            rounds, sys.executable))
        for w in works:
            res = {m: [] for m in MODES}
            for _ in range(rounds):
                for m in MODES:
                    res[m].append(run_cpu(m, w, tmp))
            med = {m: sorted(v)[len(v) // 2] for m, v in res.items()}
            print("%-9s plain %.3f (%.3f-%.3f)" % (
                w, med["plain"], min(res["plain"]), max(res["plain"])) +
                "".join("  %s %+6.1f %% (%.3f-%.3f)" % (
                    m, 100 * (med[m] / med["plain"] - 1), min(res[m]),
                    max(res[m])) for m in MODES[1:]), flush=True)


if __name__ == "__main__":
    main()
