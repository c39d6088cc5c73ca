#!/usr/bin/env bash
# A user's layer through the library trainer, end to end: apps/examples/custom_layer/custom_train
# (the 'layernorm' layer registered, then train_main) on a small Fashion-MNIST at 2 ranks:
#  - --help lists layernorm among --model's layer words;
#  - "flatten,layernorm,dense:32,relu,dense" trains 20 steps with --checkpoint-dir, then resumes
#    from its checkpoint to step 40 with --metrics and --trace: both exit 0, the resumed run says it
#    starts at step 20 and its metrics start after it, the loss goes down, the checkpoint holds the
#    layer's parameters by name, the trace is valid JSON with forward and backward spans of
#    layernorm1 on both ranks;
#  - --device cuda is refused by the layer registry (the layer is CPU-only) before any device is
#    opened, so the message is the same with or without a GPU: once, naming the layer, exit 2 on
#    every rank.
# ctest sets LOCKSTEP_BIN (the apps build folder) and MPIEXEC. Needs the Fashion-MNIST IDX files
# (Debian's dataset-fashion-mnist), python3 and h5ls (hdf5-tools).
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-data examples/custom_layer/custom_train
e2e_require_commands python3 h5ls
train=$bin/examples/custom_layer/custom_train

e2e_workdir custom-layer
cd "$work" || exit 1

# 2048 training and 512 test images.
e2e_small_fashion_mnist "$bin/lockstep-data" "$work/fmnist.h5" 2048 512 || exit $?

model="flatten,layernorm,dense:32,relu,dense"
# 64 per global batch: 32 steps per epoch, so step 20 is inside the first epoch.
args=(--data fmnist.h5 --model "$model" --global-batch 64 --lr 0.003 --threads 1 --progress lines
      --log-every 5)

# ---- --help names the program and lists the registered layer ----
help=$("$train" --help 2>&1) || fail "custom_train --help exits non-zero"
grep -q "usage: .*custom_train --data" <<<"$help" || fail "--help does not name custom_train: $help"
tr -s ' \n' ' ' <<<"$help" | grep -q "lmhead, layernorm)" ||
  fail "--help's --model text does not list layernorm after the built-in layers: $help"

# ---- 20 steps with a checkpoint, then resumed to 40 with metrics and trace ----
out=$(timeout 120 "$mpiexec" -n 2 "$train" "${args[@]}" --steps 20 --checkpoint-dir ckpt 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "the first 20 steps exit $rc"$'\n'"$out"
first_loss=$(grep -m1 -oE 'step 5/32 loss [0-9.]+' <<<"$out" | awk '{print $4}')
[[ -n $first_loss ]] || fail "the first run logged no loss at step 5"$'\n'"$out"
[[ -f ckpt/ckpt-000000020.h5 ]] || fail "no checkpoint ckpt/ckpt-000000020.h5: $(ls ckpt 2>&1)"
params=$(h5ls -r ckpt/ckpt-000000020.h5 2>&1)
for t in layernorm1.gamma layernorm1.beta; do
  grep -q "/params/$t *Dataset {784}" <<<"$params" || fail "the checkpoint has no $t of 784"$'\n'"$params"
done

out=$(timeout 120 "$mpiexec" -n 2 "$train" "${args[@]}" --steps 40 --checkpoint-dir ckpt --resume ckpt \
      --metrics m.jsonl --trace trace.json 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "the resumed run exits $rc"$'\n'"$out"
grep -q "resuming from ckpt/ckpt-000000020.h5: step 20" <<<"$out" ||
  fail "the resumed run does not say it starts at step 20"$'\n'"$out"
[[ -f ckpt/ckpt-000000040.h5 ]] || fail "no checkpoint at step 40: $(ls ckpt 2>&1)"

python3 - m.jsonl trace.json "${first_loss:-nan}" <<'PY' || failures=$((failures + 1))
import json, sys
problems = []
with open(sys.argv[1]) as f:
    rows = [json.loads(line) for line in f if line.strip()]
train = [r for r in rows if r.get("kind") == "train"]
steps = [r["step"] for r in train]
# Step numbers within the epoch: 32 per epoch, so the global steps are 25, 30, 32 (end of epoch 1)
# and then 3, 8 of epoch 2; the first one logged is after the resume point.
if not train:
    problems.append(f"no training rows in the metrics: {rows}")
elif train[0]["step"] <= 20 or train[0]["epoch"] != 1:
    problems.append(f"the resumed run's first metrics row is step {train[0]['step']} of epoch "
                    f"{train[0]['epoch']}, not after step 20 of epoch 1: {train[0]}")
# Down over the resumed run, and below the first run's at step 5.
elif not train[-1]["loss"] < min(train[0]["loss"], float(sys.argv[3])):
    problems.append(f"the loss does not go down: step 5 {sys.argv[3]}, then "
                    f"{[r['loss'] for r in train]}")
with open(sys.argv[2]) as f:
    events = json.load(f)["traceEvents"]
spans = [e for e in events if e.get("ph") == "X"]
# A backward span per step; forward ones for every step and for the evaluations too.
for pid in (0, 1):
    count = {cat: sum(1 for e in spans if e["pid"] == pid and e["cat"] == cat
                      and e["name"] == "layernorm1") for cat in ("forward", "backward")}
    if count["backward"] != 20 or count["forward"] < 20:
        problems.append(f"rank {pid}: layernorm1 spans {count}, expected 20 backward (steps 21-40) "
                        "and at least 20 forward")
for p in problems:
    print("FAIL:", p)
if not problems:
    print(f"ok: resumed metrics from step {steps[0]}; loss {sys.argv[3]} at step 5, "
          f"{train[0]['loss']:.4f} -> {train[-1]['loss']:.4f} after the resume; "
          "layernorm1 spans on both ranks")
sys.exit(1 if problems else 0)
PY

# ---- --device cuda: refused by the registry, once, exit 2 on every rank ----
rm -f rc.*
out=$(timeout 60 "$mpiexec" -n 2 bash -c \
      '"$@"; echo $? > rc.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}' _ \
      "$train" "${args[@]}" --steps 5 --checkpoint-dir cuda --device cuda 2>&1)
[[ $(grep -c '^error:' <<<"$out") -eq 1 ]] || fail "--device cuda: expected one error line: $out"
grep -q "layer 2 (layernorm) has no CUDA implementation" <<<"$out" ||
  fail "--device cuda: the message does not name the CPU-only layer: $out"
grep -q -- "--device cpu" <<<"$out" || fail "--device cuda: the message does not say --device cpu: $out"
for r in 0 1; do
  code=$(cat "rc.$r" 2>/dev/null || echo missing)
  [[ $code == 2 ]] || fail "--device cuda: rank $r exits $code, expected 2"
done
[[ -e cuda ]] && fail "--device cuda created its checkpoint folder before refusing"

[[ $failures -eq 0 ]] || exit 1
echo "ok: a user's layer trains, checkpoints, resumes, traces and is refused on CUDA through train_main"
