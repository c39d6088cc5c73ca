#!/usr/bin/env bash
# lockstep-train --trace and the straggler report, end to end at 2 ranks:
#  - the trace is one valid JSON file (Chrome trace-event format) with a track per rank (pid 0 and
#    1), holding data wait, forward, backward (per layer too), all_reduce with its bytes, optimizer
#    and evaluate spans, the MPI progress thread's collectives with their bytes on a second track,
#    and no per-rank part files are left behind;
#  - --straggler-every N puts one straggler line per N steps on stderr and in the metrics file,
#    with one step time per rank.
# ctest sets LOCKSTEP_BIN and MPIEXEC. Needs python3 for the JSON checks.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data
e2e_require_commands python3

e2e_workdir trace
cd "$work" || exit 1

"$bin/lockstep-data" regression --out reg.h5 --samples 256 --features 8 >/dev/null 2>&1 ||
  { echo "FAIL: regression data"; exit 1; }

$mpiexec -n 2 "$bin/lockstep-train" --data reg.h5 --model mlp:16 --global-batch 32 --steps 12 \
  --log-every 4 --progress lines --trace trace.json --straggler-every 5 --metrics m.jsonl \
  >out.txt 2>err.txt
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: training with --trace exits $rc"; cat out.txt err.txt; exit 1; }


ls trace.json.rank* >/dev/null 2>&1 && fail "per-rank part files left behind: $(ls trace.json.rank*)"

python3 - trace.json <<'PY' || failures=$((failures + 1))
import json, sys
with open(sys.argv[1]) as f:
    events = json.load(f)["traceEvents"]
spans = [e for e in events if e.get("ph") == "X"]
problems = []
for pid in (0, 1):
    names = {e["name"] for e in spans if e["pid"] == pid}
    for want in ("data wait", "forward", "backward", "all_reduce", "optimizer", "evaluate"):
        if want not in names:
            problems.append(f"rank {pid} has no '{want}' span")
    layers = {e["name"] for e in spans if e["pid"] == pid and e["cat"] == "backward" and e["name"] != "backward"}
    if "dense0" not in layers:
        problems.append(f"rank {pid} has no per-layer backward span (got {sorted(layers)})")
    # The MPI backend's progress thread records each collective it runs, on its own track.
    if not any(e["pid"] == pid and e["name"] == "mpi all_reduce" and e["tid"] != 0
               and e["args"].get("bytes", 0) > 0 for e in spans):
        problems.append(f"rank {pid} has no 'mpi all_reduce' span with bytes on a helper track")
    steps = [e for e in spans if e["pid"] == pid and e["name"] == "optimizer"]
    if len(steps) != 12:
        problems.append(f"rank {pid} has {len(steps)} optimizer spans for 12 steps")
for e in spans:
    if e["name"] == "all_reduce" and not e["args"].get("bytes", 0) > 0:
        problems.append(f"all_reduce without bytes: {e}")
        break
    if e["dur"] < 0 or e["ts"] < 0:
        problems.append(f"negative time: {e}")
        break
if {e["pid"] for e in events} != {0, 1}:
    problems.append(f"pids {sorted({e['pid'] for e in events})}, expected [0, 1]")
for p in problems:
    print("FAIL: trace:", p)
sys.exit(1 if problems else 0)
PY

[[ $(grep -c '^straggler step=' err.txt) -eq 2 ]] ||
  fail "expected 2 straggler lines (steps 5 and 10) on stderr: $(grep straggler err.txt)"
python3 - m.jsonl <<'PY' || failures=$((failures + 1))
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = [r for r in rows if r.get("kind") == "straggler"]
ok = [r["step"] for r in s] == [5, 10] and all(len(r["step_s"]) == 2 and 0 <= r["slowest_rank"] < 2 for r in s)
if not ok:
    print("FAIL: straggler metrics lines:", s)
sys.exit(0 if ok else 1)
PY

# scripts/trace-summary.py reads it: rank 1's training track after 2 warm-up steps holds 10
# optimizer phases and 10 backward passes of each layer; a file that is not a trace exits 1.
summary_py="$(dirname "$0")/../scripts/trace-summary.py"
summary=$(python3 "$summary_py" trace.json --rank 1 --skip-steps 2) || fail "trace-summary.py exits $?"
for want in "optimizer" "dense0 \(backward\)" "relu1 \(backward\)" "dense2 \(backward\)"; do
  grep -qE "^training +$want +10 " <<<"$summary" || fail "trace-summary.py: no '$want' row of 10: $summary"
done
# The GPU comparison counts compute spans inside the steps' phases only (an evaluation's forward
# passes run between steps): two phases of 100 us, kernels of 50 + 30 us inside them, one of 80
# us outside, one of 20 us straddling a phase's end by 10 us: 90 of 200 us, 45.0%.
cat >gpu.json <<'JSON'
{"traceEvents": [
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "GPU phases"}},
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 2, "args": {"name": "GPU stream: compute"}},
 {"ph": "X", "pid": 0, "tid": 1, "name": "forward", "ts": 0, "dur": 100},
 {"ph": "X", "pid": 0, "tid": 1, "name": "backward", "ts": 300, "dur": 100},
 {"ph": "X", "pid": 0, "tid": 2, "name": "conv0", "ts": 10, "dur": 50},
 {"ph": "X", "pid": 0, "tid": 2, "name": "conv0", "ts": 310, "dur": 30},
 {"ph": "X", "pid": 0, "tid": 2, "name": "conv0", "ts": 150, "dur": 80},
 {"ph": "X", "pid": 0, "tid": 2, "name": "dense1", "ts": 390, "dur": 20}]}
JSON
gpu_summary=$(python3 "$summary_py" gpu.json) || fail "trace-summary.py of a GPU trace exits $?"
grep -q "busy 0.090 ms of the 0.200 ms .*(45.0%" <<<"$gpu_summary" ||
  fail "trace-summary.py: compute spans outside the steps' phases counted: $gpu_summary"
python3 "$summary_py" m.jsonl >/dev/null 2>&1
[[ $? -eq 1 ]] || fail "trace-summary.py of a file that is not a trace: exit 1 expected"

# A trace path that cannot be written is refused in words naming --trace.
$mpiexec -n 2 "$bin/lockstep-train" --data reg.h5 --model mlp:16 --global-batch 32 --steps 2 \
  --progress none --trace /nonexistent-dir/t.json >bad.txt 2>&1
rc=$?
[[ $rc -ne 0 ]] || fail "an unwritable --trace path exits 0"
grep -q -- "--trace" bad.txt || fail "the unwritable --trace message does not name --trace: $(cat bad.txt)"

[[ $failures -eq 0 ]] && echo "trace_test: all checks passed"
exit $((failures > 0))
