#!/usr/bin/env bash
# lockstep-generate, end to end on the CPU: a small GPT trained 120 steps on a byte corpus at 2
# ranks, then
#  - greedy decoding (--temperature 0) gives, for 64 bytes, the bytes PyTorch's reference greedy
#    decoder computes on the same checkpoint (scripts/reference/gpt_generate_torch.py, Debian's
#    python3-torch), with the prompt longer than the model's context too (the window slides);
#  - --top-k 1 samples exactly the greedy bytes, whatever the temperature and seed;
#  - sampling is reproducible: the same seed gives the same bytes, another seed other bytes;
#  - lockstep-train --sample-every prints, at those steps, the bytes lockstep-generate samples from
#    that step's checkpoint with the same seed; refused on data that is not tokens, and on a
#    vocabulary over 256;
#  - refusals, exit 2 with a message: a checkpoint of a non-GPT model, a negative --temperature,
#    --tokens or --top-k, an empty prompt, two ranks;
#  - tokens must be bytes: a GPT with a vocabulary of 1000 is refused (exit 2, nothing on stdout),
#    so is a prompt byte (200) at or above a vocabulary of 100, and that vocabulary-100 GPT still
#    generates, after an in-range prompt, tokens that are all below 100.
# ctest sets LOCKSTEP_BIN (the apps build folder) and MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
src=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data lockstep-generate
/usr/bin/python3 -c "import torch, h5py" 2>/dev/null ||
  { echo "skipped: /usr/bin/python3 cannot import torch and h5py (python3-torch python3-h5py)"; exit 77; }

e2e_workdir generate
cd "$work" || exit 1

/usr/bin/python3 - >corpus.txt <<'EOF'
import random
random.seed(11)
words = ["alpha", "beta", "gamma", "lockstep", "ranks", "train", "model", "bytes", "\n"]
print(" ".join(random.choice(words) for _ in range(6000)))
EOF
"$bin/lockstep-data" text --in corpus.txt --out corpus.h5 --seq-len 32 >/dev/null ||
  { echo "FAIL: lockstep-data text"; exit 1; }
"$bin/lockstep-data" regression --out reg.h5 --samples 64 --features 3 >/dev/null 2>&1 ||
  { echo "FAIL: lockstep-data regression"; exit 1; }
model=gpt:layers=2,heads=2,dim=32,ctx=32
timeout 300 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" --data corpus.h5 \
  --model "$model" --global-batch 16 --threads 1 --optimizer adamw --lr 0.01 --steps 120 \
  --progress none --checkpoint-dir ckpt --checkpoint-every 60 --sample-every 60 \
  --sample-bytes 48 --sample-prompt "gamma " >train.out 2>&1 ||
  { echo "FAIL: training the GPT at 2 ranks exits $?: $(cat train.out)"; exit 1; }
ckpt=ckpt/ckpt-000000120.h5
[[ -f $ckpt ]] || { echo "FAIL: no checkpoint at step 120: $out"; exit 1; }

gen() { timeout 120 "$bin/lockstep-generate" --checkpoint "$ckpt" "$@" 2>gen.err; }
hex() { od -An -tx1 -v | tr -d ' \n'; }

# ---- greedy against PyTorch ----
long_prompt="alpha beta gamma lockstep ranks train model bytes alpha "  # longer than ctx=32
for prompt in "alpha " "$long_prompt"; do
  ours=$(gen --prompt "$prompt" --tokens 64 --temperature 0 | hex)
  theirs=$(timeout 120 /usr/bin/python3 "$src/scripts/reference/gpt_generate_torch.py" "$ckpt" \
             --model "$model" --prompt "$prompt" --tokens 64 | hex)
  if [[ ${#ours} -ne 128 || "$ours" != "$theirs" ]]; then
    fail "greedy bytes after '$prompt' differ from PyTorch's: ours $ours, PyTorch $theirs ($(cat gen.err))"
  else
    echo "ok: 64 greedy bytes after a ${#prompt}-byte prompt equal PyTorch's: $(xxd -r -p <<<"$ours" | tr '\n' '|')"
  fi
done

# ---- --sample-every during training: the text lockstep-generate samples from that step's
# checkpoint with the trainer's generator (seed 0 + the step), temperature 1, all bytes ----
for step in 60 120; do
  during=$(/usr/bin/python3 -c "
import sys
out = open('train.out', 'rb').read()
mark = b'sample at step $step: '
at = out.find(mark)
sys.stdout.write(out[at + len(mark):at + len(mark) + 48].hex() if at >= 0 else '')")
  after=$(timeout 120 "$bin/lockstep-generate" --checkpoint "ckpt/ckpt-$(printf %09d "$step").h5" \
            --prompt "gamma " --tokens 48 --seed "$step" 2>/dev/null | hex)
  if [[ ${#during} -ne 96 || "$during" != "$after" ]]; then
    fail "the sample printed at step $step ('$during') is not lockstep-generate's from that checkpoint ('$after')"
  else
    echo "ok: the sample printed at step $step is lockstep-generate's from that step's checkpoint"
  fi
done
grep -q "sample at step 61\|sample at step 59" train.out && fail "a sample at a step --sample-every does not name"
out=$(timeout 60 "$bin/lockstep-train" --data reg.h5 --model mlp:4 --global-batch 16 --steps 1 \
        --sample-every 1 2>&1)
rc=$?
[[ $rc -eq 2 ]] && grep -q "needs a language model on token data" <<<"$out" &&
  echo "ok: --sample-every on regression data refused" ||
  fail "--sample-every on regression data: exit $rc: $out"

# ---- sampling ----
greedy=$(gen --prompt "beta " --tokens 64 --temperature 0 | hex)
topk1=$(gen --prompt "beta " --tokens 64 --temperature 1.5 --top-k 1 --seed 9 | hex)
[[ "$topk1" == "$greedy" ]] && echo "ok: --top-k 1 samples the greedy bytes" ||
  fail "--top-k 1 gives $topk1, greedy $greedy"
a=$(gen --prompt "beta " --tokens 64 --seed 5 | hex)
b=$(gen --prompt "beta " --tokens 64 --seed 5 | hex)
c=$(gen --prompt "beta " --tokens 64 --seed 6 | hex)
[[ ${#a} -eq 128 && "$a" == "$b" ]] && echo "ok: seed 5 twice gives the same 64 bytes" ||
  fail "seed 5 twice: $a vs $b"
[[ "$a" != "$c" ]] && echo "ok: seed 6 gives other bytes" || fail "seeds 5 and 6 give the same bytes: $a"
grep -q "lockstep-generate: 64 bytes from $ckpt" gen.err || fail "no summary on stderr: $(cat gen.err)"

# ---- --help: the default prompt, a newline, shown escaped rather than as a broken line ----
help=$("$bin/lockstep-generate" --help 2>&1) || fail "--help exits non-zero: $help"
grep -qF -- '--prompt arg (="\n")' <<<"$help" && ! grep -qE '^\)' <<<"$help" &&
  echo "ok: --help shows the default prompt as \"\\n\"" || fail "--help's --prompt default: $help"

# ---- refusals ----
timeout 60 "$bin/lockstep-train" --data reg.h5 --model mlp:4 --global-batch 16 --steps 1 --progress none \
    --checkpoint-dir mlp_ckpt >/dev/null 2>&1 || fail "the MLP checkpoint for the refusal"
e2e_refused "a checkpoint of an MLP" "is not a GPT" "$bin/lockstep-generate" --checkpoint mlp_ckpt
e2e_refused "--temperature -1" "temperature" "$bin/lockstep-generate" --checkpoint "$ckpt" --temperature -1
e2e_refused "--tokens -1" "tokens" "$bin/lockstep-generate" --checkpoint "$ckpt" --tokens -1
e2e_refused "--top-k -1" "top-k" "$bin/lockstep-generate" --checkpoint "$ckpt" --top-k -1
e2e_refused "an empty prompt" "prompt" "$bin/lockstep-generate" --checkpoint "$ckpt" --prompt ""
e2e_refused "two ranks" "one process" "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-generate" --checkpoint "$ckpt"

# ---- vocabularies other than bytes: tiny GPTs, one step each on synthetic tokens ----
for v in 1000 100; do
  "$bin/lockstep-data" synthetic --out tok$v.h5 --kind tokens --samples 16 --test-samples 4 \
    --seq-len 16 --vocab $v >/dev/null 2>&1 || fail "lockstep-data synthetic --vocab $v"
  timeout 60 "$bin/lockstep-train" --data tok$v.h5 --model gpt:layers=1,dim=16,ctx=16 \
    --global-batch 4 --steps 1 --threads 1 --progress none --checkpoint-dir v$v >/dev/null 2>&1 ||
    fail "the vocabulary-$v GPT checkpoint"
done
e2e_refused "a vocabulary of 1000 tokens" "writes bytes: the checkpoint's model has a vocabulary of 1000 tokens, not at most 256" \
  "$bin/lockstep-generate" --checkpoint v1000 --tokens 8
[[ -z $(grep -v '^error' <<<"$out") ]] || fail "the refused vocabulary-1000 run wrote: $out"
e2e_refused "prompt byte 200 for a vocabulary of 100" "byte 200 at position 2, outside the checkpoint's vocabulary of 100 tokens" \
  "$bin/lockstep-generate" --checkpoint v100 --prompt "$(printf 'ab\xc8z')" --tokens 8
out=$(timeout 60 "$bin/lockstep-train" --data tok1000.h5 --model gpt:layers=1,dim=16,ctx=16 \
        --global-batch 4 --steps 1 --threads 1 --progress none --sample-every 1 2>&1)
rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--sample-every prints bytes, and the 1000-token vocabulary" <<<"$out" &&
  echo "ok: --sample-every on a vocabulary of 1000 refused" ||
  fail "--sample-every on a vocabulary of 1000: exit $rc: $out"
small=$(timeout 60 "$bin/lockstep-generate" --checkpoint v100 --prompt "$(printf 'ab\x05')" --tokens 16 \
          --seed 3 2>gen.err | od -An -tu1 -v | xargs)
rc=${PIPESTATUS[0]}
read -ra small_bytes <<<"$small"
high=0
for b in "${small_bytes[@]}"; do ((b > high)) && high=$b; done
[[ $rc -eq 0 && ${#small_bytes[@]} -eq 16 && $high -lt 100 ]] &&
  echo "ok: a vocabulary-100 GPT still generates 16 tokens below 100 after an in-range prompt: $small" ||
  fail "vocabulary 100, in-range prompt: exit $rc, bytes '$small' ($(cat gen.err))"

e2e_finish generate_test
