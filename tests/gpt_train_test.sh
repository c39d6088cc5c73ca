#!/usr/bin/env bash
# The GPT language model end to end, as a user runs it: a corpus the test writes (sentences with a
# fixed pattern) through `lockstep-data text`, then lockstep-train --model gpt:... at 2 ranks with
# AdamW, cosine schedule, warm-up and clipping:
#  - 30 steps with --checkpoint-dir and small gradient buckets exit 0, print test bits per byte,
#    and the checkpoint holds the tied embedding once (embed0.wte (256, D)) and the head's layer
#    norm, no output matrix;
#  - resumed from it at 1 rank with --grad-accum 2 to step 50, with --metrics and --trace: it says
#    it starts at step 30, the metrics start after it, their bits per byte are loss / ln 2, the
#    loss is below the first run's at step 5 and the test bits per byte below 8 (a uniform guess),
#    and the trace has forward and backward spans of the blocks and the head;
#  - a context shorter than the corpus's sequences, and the CNN on token data, are refused once,
#    in words, with exit 2 on every rank.
# ctest sets LOCKSTEP_BIN (the apps build folder) and MPIEXEC. Needs python3 and h5ls.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-data lockstep-train
e2e_require_commands python3 h5ls
train=$bin/lockstep-train

e2e_workdir gpt-train
cd "$work" || exit 1

# About 60 kB of text with a learnable structure: numbered sentences from a few templates.
for i in $(seq 1 1200); do
  case $((i % 4)) in
    0) echo "Line $i: the quick brown fox jumps over the lazy dog." ;;
    1) echo "Line $i: every rank reads its own shard of the corpus." ;;
    2) echo "Line $i: gradients are averaged across all the ranks." ;;
    3) echo "Line $i: a small model learns which byte comes next." ;;
  esac
done >corpus.txt
"$bin/lockstep-data" text --in corpus.txt --out corpus.h5 --seq-len 32 >/dev/null ||
  { echo "FAIL: lockstep-data text"; exit 1; }

model="gpt:layers=2,heads=2,dim=32,ctx=32"
args=(--data corpus.h5 --model "$model" --optimizer adamw --weight-decay 0.1 --lr 0.003
      --lr-schedule cosine --warmup-steps 5 --clip-norm 1 --global-batch 32 --threads 1
      --progress lines --log-every 5)

# ---- 30 steps at 2 ranks with a checkpoint, gradients reduced in 50 kB buckets (a block of
# dim 32 is 51 kB of parameters: several buckets, each started as its layers finish) ----
out=$(timeout 300 "$mpiexec" -n 2 "$train" "${args[@]}" --steps 30 --checkpoint-dir ckpt \
      --bucket-mb 0.05 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "the first 30 steps exit $rc"$'\n'"$out"
first_loss=$(grep -m1 -oE 'step 5/[0-9]+ loss [0-9.]+' <<<"$out" | awk '{print $4}')
[[ -n $first_loss ]] || fail "the first run logged no loss at step 5"$'\n'"$out"
grep -qE '^test_bits_per_byte=[0-9.]+$' <<<"$out" || fail "no test_bits_per_byte line"$'\n'"$out"
[[ -f ckpt/ckpt-000000030.h5 ]] || fail "no checkpoint ckpt/ckpt-000000030.h5: $(ls ckpt 2>&1)"
params=$(h5ls -r ckpt/ckpt-000000030.h5 2>&1)
grep -q "/params/embed0.wte *Dataset {256, 32}" <<<"$params" ||
  fail "the checkpoint has no embed0.wte (256, 32)"$'\n'"$params"
grep -q "/params/lmhead3.ln.weight *Dataset {32}" <<<"$params" ||
  fail "the checkpoint has no lmhead3.ln.weight (32)"$'\n'"$params"
[[ $(grep "^/params/" <<<"$params" | grep -c "Dataset {256, 32}") -eq 1 ]] ||
  fail "the tied matrix is stored more than once"$'\n'"$params"

# ---- --recompute gelu and blocks: the same losses at every logged step and the same test
# figure as keeping the activations (gpt_layers.h: the same kernels on the same values) ----
strip_rates() { grep -E 'step [0-9]+/[0-9]+ loss|^test_' | sed -E 's/ [0-9.]+ (tokens|samples)\/s.*//'; }
kept=$(timeout 300 "$mpiexec" -n 2 "$train" "${args[@]}" --steps 10 2>&1 | strip_rates)
[[ -n $kept ]] || fail "the 10-step run logged nothing"
for r in gelu blocks; do
  again=$(timeout 300 "$mpiexec" -n 2 "$train" "${args[@]}" --steps 10 --recompute $r 2>&1 |
          strip_rates)
  [[ $again == "$kept" ]] ||
    fail "--recompute $r changed the losses"$'\n'"$kept"$'\n'"---"$'\n'"$again"
done

# ---- resumed at 1 rank with gradient accumulation, metrics and trace ----
out=$(timeout 300 "$mpiexec" -n 1 "$train" "${args[@]}" --steps 50 --grad-accum 2 \
      --checkpoint-dir ckpt --resume ckpt --metrics m.jsonl --trace trace.json 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "the resumed run exits $rc"$'\n'"$out"
grep -q "resuming from ckpt/ckpt-000000030.h5: step 30" <<<"$out" ||
  fail "the resumed run does not say it starts at step 30"$'\n'"$out"

python3 - m.jsonl trace.json "${first_loss:-nan}" <<'PY' || failures=$((failures + 1))
import json, math, sys
problems = []
with open(sys.argv[1]) as f:
    rows = [json.loads(line) for line in f if line.strip()]
train = [r for r in rows if r.get("kind") == "train"]
evals = [r for r in rows if r.get("kind") == "eval"]
if not train:
    problems.append(f"no training rows in the metrics: {rows}")
else:
    if train[0]["step"] <= 30 and train[0]["epoch"] == 1:
        problems.append(f"the resumed run's first metrics row is not after step 30: {train[0]}")
    for r in train:
        if abs(r["bits_per_byte"] - r["loss"] / math.log(2)) > 1e-3:
            problems.append(f"bits_per_byte is not loss / ln 2: {r}")
    if not train[-1]["loss"] < float(sys.argv[3]):
        problems.append(f"the loss does not go down: step 5 {sys.argv[3]}, then "
                        f"{[r['loss'] for r in train]}")
if not evals or not evals[-1]["test_bits_per_byte"] < 8:
    problems.append(f"no evaluation below 8 bits per byte: {evals}")
with open(sys.argv[2]) as f:
    events = json.load(f)["traceEvents"]
spans = {(e["name"], e["cat"]) for e in events if e.get("ph") == "X"}
for name in ("embed0", "block1", "block2", "lmhead3"):
    for cat in ("forward", "backward"):
        if (name, cat) not in spans:
            problems.append(f"no {cat} span of {name} in the trace")
for p in problems:
    print("FAIL:", p)
if not problems:
    print(f"ok: loss {sys.argv[3]} at step 5, {train[-1]['loss']:.4f} at step "
          f"{train[-1]['step']}; test {evals[-1]['test_bits_per_byte']:.3f} bits per byte")
sys.exit(1 if problems else 0)
PY

# ---- refusals: once, in words, exit 2 on every rank ----
refused() {  # refused WHAT PATTERN ARGS...: the run fails once with PATTERN, exit 2 on both ranks
  local what=$1 pattern=$2 code r
  shift 2
  rm -f rc.*
  out=$(timeout 120 "$mpiexec" -n 2 bash -c \
        '"$@"; echo $? > rc.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}' _ "$train" "$@" 2>&1)
  [[ $(grep -c '^error:' <<<"$out") -eq 1 ]] || fail "$what: expected one error line: $out"
  grep -q -- "$pattern" <<<"$out" || fail "$what: the message does not say '$pattern': $out"
  for r in 0 1; do
    code=$(cat "rc.$r" 2>/dev/null || echo missing)
    [[ $code == 2 ]] || fail "$what: rank $r exits $code, expected 2"
  done
}
refused "a context of 16 for 32-token sequences" "more than its context of 16" \
  --data corpus.h5 --model gpt:layers=1,heads=2,dim=32,ctx=16 --steps 2
refused "the CNN on token data" "needs image samples" --data corpus.h5 --model cnn --steps 2

[[ $failures -eq 0 ]] || exit 1
echo "ok: the GPT model trains at 2 ranks, checkpoints the tied matrix once, resumes at 1 rank with accumulation, traces, and refuses what does not fit"
