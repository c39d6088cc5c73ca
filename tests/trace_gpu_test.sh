#!/usr/bin/env bash
# lockstep-train --device cuda --trace, end to end at 1 rank, where a GPU answers (skipped, with
# the reason, where the build has no CUDA or no device does):
#  - the trainer's phases are the device's, on the track "GPU phases": one forward, backward,
#    all_reduce (with bytes) and optimizer per step; the host's data wait stays on the training
#    track;
#  - "GPU stream: compute" holds each step's layer kernels, named as on the CPU (dense0, relu1,
#    dense2) in stream order (forward, the loss, backward reversed, the gradient norm, the update),
#    each inside its step's device phase;
#  - "GPU stream: copy" holds one "batch copy" with its bytes per step, done before the step's
#    forward phase begins.
# ctest sets LOCKSTEP_BIN. Needs python3 for the JSON checks.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data
e2e_require_commands python3

e2e_workdir trace-gpu
cd "$work" || exit 1

"$bin/lockstep-data" regression --out reg.h5 --samples 512 --features 8 >/dev/null 2>&1 ||
  { echo "FAIL: regression data"; exit 1; }

"$bin/lockstep-train" --data reg.h5 --model mlp:16 --global-batch 64 --steps 6 --device cuda \
  --progress none --trace trace.json >out.txt 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -qE "built without CUDA|no CUDA device" out.txt; then
  echo "skipped: $(grep -m1 -oE "(built without CUDA|no CUDA device).*" out.txt)"
  exit 77
fi
[[ $rc -eq 0 ]] || { echo "FAIL: cuda training with --trace exits $rc"; cat out.txt; exit 1; }

python3 - trace.json <<'PY' || failures=$((failures + 1))
import json, sys
with open(sys.argv[1]) as f:
    events = json.load(f)["traceEvents"]
steps, tol = 6, 50.0  # microseconds: two clock references, each within a few of the host's
tracks = {e["args"]["name"]: e["tid"] for e in events
          if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == 0}
problems = []
for want in ("GPU phases", "GPU stream: compute", "GPU stream: copy"):
    if want not in tracks:
        problems.append(f"no track '{want}' (tracks: {sorted(tracks)})")
if problems:
    print("\n".join("FAIL: trace: " + p for p in problems))
    sys.exit(1)
def on(track):
    return sorted((e for e in events if e.get("ph") == "X" and e["tid"] == tracks[track]),
                  key=lambda e: e["ts"])
phases, kernels, copies = on("GPU phases"), on("GPU stream: compute"), on("GPU stream: copy")
waits = [e for e in events if e.get("ph") == "X" and e["tid"] == 0 and e["name"] == "data wait"]
if len(waits) != steps:
    problems.append(f"{len(waits)} data waits on the training track for {steps} steps")
names = [e["name"] for e in phases]
if names != ["forward", "backward", "all_reduce", "optimizer"] * steps:
    problems.append(f"GPU phases are {names}")
elif not all(e["args"].get("bytes", 0) > 0 for e in phases if e["name"] == "all_reduce"):
    problems.append("an all_reduce phase without bytes")
layers = ["dense0", "relu1", "dense2"]
step_names = layers + ["loss"] + layers[::-1] + ["gradient norm", "optimizer update"]
cats = ["forward"] * 4 + ["backward"] * 3 + ["optimizer"] * 2
within = [0] * 4 + [1] * 3 + [3] * 2  # index of the phase (in the step's four) that holds it
got = [e["name"] for e in kernels[:steps * len(step_names)]]
if got != step_names * steps:
    problems.append(f"compute stream spans {got[:len(step_names) + 2]}..., expected {step_names} per step")
elif not problems:
    for s in range(steps):
        ph = phases[4 * s: 4 * s + 4]
        for i, k in enumerate(kernels[s * len(step_names):(s + 1) * len(step_names)]):
            p = ph[within[i]]
            if k["cat"] != cats[i]:
                problems.append(f"step {s}: {k['name']} in category {k['cat']}, expected {cats[i]}")
            if k["ts"] < p["ts"] - tol or k["ts"] + k["dur"] > p["ts"] + p["dur"] + tol:
                problems.append(f"step {s}: {k['name']} lies outside its {p['name']} phase")
        c = copies[s] if s < len(copies) else None
        if c is None or c["name"] != "batch copy" or not c["args"].get("bytes", 0) > 0:
            problems.append(f"step {s}: no batch copy with bytes on the copy stream ({c})")
        elif c["ts"] + c["dur"] > ph[0]["ts"] + tol:
            problems.append(f"step {s}: the batch copy ends after its forward phase began")
for p in problems[:10]:
    print("FAIL: trace:", p)
sys.exit(1 if problems else 0)
PY

[[ $failures -eq 0 ]] || exit 1
echo "ok: GPU trace with device-timed phases, layer kernels and batch copies"
