#!/usr/bin/env bash
# NVTX ranges for Nsight, end to end at 2 ranks: lockstep-train run under a stand-in for a
# profiler's injection library (tests/helpers/nvtx_probe.cpp, loaded through NVTX_INJECTION64_PATH
# as nsys does) emits, on every rank,
#  - one "step" range per update, holding the phases data wait, forward, backward, all_reduce and
#    optimizer, with the layers' ranges (dense0, ...) inside forward and backward;
#  - an "evaluate" range, and the MPI collectives ("mpi all_reduce") on the thread named
#    "mpi progress"; the loader's thread is named "prefetch";
#  - pushes and pops that balance on every thread, and named categories (colours in Nsight).
# ctest sets LOCKSTEP_BIN, MPIEXEC and LOCKSTEP_NVTX_PROBE (empty when the build found no nvtx3).
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
probe="${LOCKSTEP_NVTX_PROBE:-}"
[[ -n $probe ]] || { echo "skipped: this build found no nvtx3 headers (CUDA Toolkit), so it emits no NVTX ranges"; exit 77; }
[[ -f $probe ]] || { echo "skipped: the NVTX probe library $probe is not built"; exit 77; }
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data
e2e_require_commands python3

e2e_workdir nvtx
cd "$work" || exit 1

"$bin/lockstep-data" regression --out reg.h5 --samples 256 --features 8 >/dev/null 2>&1 ||
  { echo "FAIL: regression data"; exit 1; }

NVTX_INJECTION64_PATH=$probe LOCKSTEP_NVTX_PROBE_OUT=$work/ranges \
  $mpiexec -x NVTX_INJECTION64_PATH -x LOCKSTEP_NVTX_PROBE_OUT -n 2 "$bin/lockstep-train" \
  --data reg.h5 --model mlp:16 --global-batch 32 --steps 6 --progress none >out.txt 2>err.txt
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: training under the NVTX probe exits $rc"; cat out.txt err.txt; exit 1; }

python3 - ranges.* <<'PY' || failures=$((failures + 1))
import sys
from collections import defaultdict
problems = []
files = sys.argv[1:]
if len(files) != 2:
    problems.append(f"expected one probe file per rank (2), got {files}")
for path in files:
    stacks = defaultdict(list)      # os tid -> open ranges
    ranges = defaultdict(list)      # os tid -> [(name, parent)]
    threads, categories = {}, {}
    for line in open(path):
        kind, rest = line.rstrip("\n").split(" ", 1)
        if kind == "push":
            tid, cat, name = rest.split(" ", 2)
            parent = stacks[tid][-1] if stacks[tid] else None
            stacks[tid].append(name)
            ranges[tid].append((name, parent))
        elif kind == "pop":
            if not stacks[rest]:
                problems.append(f"{path}: pop without a push on thread {rest}")
            else:
                stacks[rest].pop()
        elif kind == "thread":
            tid, name = rest.split(" ", 1)
            threads[name] = tid
        elif kind == "category":
            cid, name = rest.split(" ", 1)
            categories[name] = cid
    for tid, open_ranges in stacks.items():
        if open_ranges:
            problems.append(f"{path}: ranges left open on thread {tid}: {open_ranges}")
    main = max(ranges, key=lambda t: sum(1 for n, _ in ranges[t] if n == "step"))
    names = [n for n, _ in ranges[main]]
    if names.count("step") != 6:
        problems.append(f"{path}: {names.count('step')} step ranges for 6 steps")
    for phase in ("data wait", "forward", "backward", "all_reduce", "optimizer"):
        inside = [p for n, p in ranges[main] if n == phase]
        if len(inside) < 6 or any(p != "step" for p in inside):
            problems.append(f"{path}: '{phase}' ranges: {len(inside)}, parents {set(inside)}")
    parents = {p for n, p in ranges[main] if n == "dense0"}
    if parents != {"forward", "backward", "evaluate"} and not {"forward", "backward"} <= parents:
        problems.append(f"{path}: dense0 ranges inside {parents}, expected forward and backward")
    if "evaluate" not in names:
        problems.append(f"{path}: no evaluate range")
    progress = threads.get("mpi progress")
    if progress is None:
        problems.append(f"{path}: no thread named 'mpi progress' (threads: {threads})")
    elif not any(n == "mpi all_reduce" for n, _ in ranges[progress]):
        problems.append(f"{path}: no 'mpi all_reduce' range on the mpi progress thread")
    if "prefetch" not in threads:
        problems.append(f"{path}: no thread named 'prefetch' (threads: {threads})")
    for cat in ("forward", "collective", "optimizer"):
        if cat not in categories:
            problems.append(f"{path}: category '{cat}' not named (got {sorted(categories)})")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
PY

[[ $failures -eq 0 ]] || { echo "$failures check(s) failed"; exit 1; }
echo "nvtx: ranges balanced and complete on both ranks"
