#!/usr/bin/env bash
# lockstep-export, end to end: a CNN trained on a small Fashion-MNIST file, an MLP on regression rows
# and a small GPT on a byte corpus, each at 2 ranks with checkpoints, exported to safetensors and
# loaded into the PyTorch reference modules (scripts/reference/export_check.py: load_state_dict
# strict, Debian's python3-torch); their test loss and accuracy (bits per byte, MSE) must equal, to the printed
# digit, what lockstep-train --eval-only prints for the same checkpoint. Where the reference venv
# (scripts/setup.sh --test) has the `safetensors` package, it must read the same tensors as our
# own reader. Refusals, exit 2 and no file left: an output that exists, a missing checkpoint, a
# file that is not a checkpoint, mpiexec with 2 ranks, a checkpoint whose tensors do not fit the
# model its run recorded (one written before that record was kept still exports).
# ctest sets LOCKSTEP_BIN (the apps build folder) and MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
src=$(cd "$(dirname "$0")/.." && pwd)
venv="${LOCKSTEP_REFERENCE_VENV:-$bin/../reference-venv}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data lockstep-export
/usr/bin/python3 -c "import torch, h5py, numpy" 2>/dev/null ||
  { echo "skipped: /usr/bin/python3 cannot import torch, h5py and numpy (python3-torch python3-h5py)"; exit 77; }

e2e_workdir export
cd "$work" || exit 1

# check NAME CKPT_DIR MODEL DATA TRAIN_ARGS...: export the newest checkpoint, evaluate it in PyTorch
# and with lockstep-train --eval-only, compare the printed figures.
check() {
  local name=$1 ckpt=$2 model=$3 data=$4 out theirs ours
  shift 4
  out=$(timeout 60 "$bin/lockstep-export" --checkpoint "$ckpt" --out "$name.safetensors" 2>&1) ||
    { fail "$name: lockstep-export exits $?: $out"; return; }
  echo "$out"
  theirs=$(timeout 120 /usr/bin/python3 "$src/scripts/reference/export_check.py" "$name.safetensors" \
             --model "$model" --data "$data" 2>&1) ||
    { fail "$name: the reference module does not take the file: $theirs"; return; }
  local spec=$model
  [[ $model == mlp ]] && spec=mlp:16,8  # the reference module takes its widths from the file
  ours=$(timeout 120 "$bin/lockstep-train" --data "$data" --model "$spec" "$@" --resume "$ckpt" \
           --eval-only 2>&1) || { fail "$name: --eval-only exits $?: $ours"; return; }
  theirs=$(grep -E '^test_[a-z_]+=' <<<"$theirs" | sort)
  ours=$(grep -E '^test_[a-z_]+=' <<<"$ours" | sort)
  if [[ -z $ours || "$theirs" != "$ours" ]]; then
    fail "$name: PyTorch on the exported file prints '$(tr '\n' ' ' <<<"$theirs")', lockstep-train '$(tr '\n' ' ' <<<"$ours")'"
  else
    echo "ok: $name in PyTorch from the safetensors file: $(tr '\n' ' ' <<<"$ours")(as lockstep-train --eval-only)"
  fi
  if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c "import safetensors, numpy" 2>/dev/null; then
    out=$("$venv/bin/python" "$src/scripts/reference/export_check.py" "$name.safetensors" \
            --format-only 2>&1) || fail "$name: the safetensors package disagrees: $out"
    echo "$name: $out"
  else
    echo "$name: the safetensors package is not in $venv (scripts/setup.sh --test installs it): own reader only"
  fi
}

# ---- the CNN ----
e2e_small_fashion_mnist "$bin/lockstep-data" fmnist.h5 512 128
case $? in
  0)
    cnn_args=(--global-batch 32 --threads 1 --optimizer adam --lr 0.003)
    out=$(timeout 120 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" --data fmnist.h5 \
            --model cnn "${cnn_args[@]}" --steps 8 --progress none --checkpoint-dir cnn_ckpt 2>&1) ||
      fail "the CNN's training at 2 ranks exits $?: $out"
    check cnn cnn_ckpt cnn fmnist.h5 "${cnn_args[@]}" ;;
  77) echo "the CNN part is skipped: no Fashion-MNIST IDX files (dataset-fashion-mnist)" ;;
  *) fail "no small Fashion-MNIST file" ;;
esac

# ---- an MLP on regression rows ----
"$bin/lockstep-data" regression --out reg.h5 --samples 300 --features 5 --seed 4 >/dev/null ||
  fail "lockstep-data regression"
mlp_args=(--global-batch 32 --threads 1 --optimizer adam --lr 0.01)
out=$(timeout 120 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" --data reg.h5 \
        --model mlp:16,8 "${mlp_args[@]}" --steps 20 --progress none --checkpoint-dir mlp_ckpt 2>&1) ||
  fail "the MLP's training at 2 ranks exits $?: $out"
check mlp mlp_ckpt mlp reg.h5 "${mlp_args[@]}"

# ---- a small GPT ----
/usr/bin/python3 - >corpus.txt <<'EOF'
import random
random.seed(7)
words = ["alpha", "beta", "gamma", "lockstep", "ranks", "train", "model", "bytes", "\n"]
print(" ".join(random.choice(words) for _ in range(5000)))
EOF
"$bin/lockstep-data" text --in corpus.txt --out corpus.h5 --seq-len 32 >/dev/null ||
  fail "lockstep-data text"
gpt=gpt:layers=2,heads=2,dim=32,ctx=32
gpt_args=(--global-batch 16 --threads 1 --optimizer adamw --weight-decay 0.1 --lr 0.003)
out=$(timeout 120 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" --data corpus.h5 \
        --model "$gpt" "${gpt_args[@]}" --steps 10 --progress none --checkpoint-dir gpt_ckpt 2>&1) ||
  fail "the GPT's training at 2 ranks exits $?: $out"
check gpt gpt_ckpt "$gpt" corpus.h5 "${gpt_args[@]}"

# ---- refusals: exit 2, a message, nothing written ----
e2e_refused "an output that exists" "exists" "$bin/lockstep-export" --checkpoint gpt_ckpt --out gpt.safetensors
e2e_refused "a missing checkpoint" "does not exist" "$bin/lockstep-export" --checkpoint nowhere --out x.safetensors
e2e_refused "a file that is not a checkpoint" "corpus.h5" "$bin/lockstep-export" --checkpoint corpus.h5 --out y.safetensors
e2e_refused "two ranks" "one process" "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-export" --checkpoint gpt_ckpt --out z.safetensors
e2e_refused "no --out" "out" "$bin/lockstep-export" --checkpoint gpt_ckpt
# An edited checkpoint (the MLP's output weight widened, its CRC32 made valid again) no longer fits
# the model its run recorded: refused naming the tensor (before: exported, and load_state_dict
# failed later). The same checkpoint without that record (as written before it was kept) exports.
cp "$(ls mlp_ckpt/ckpt-*.h5 | tail -1)" edited.h5 && cp edited.h5 unrecorded.h5
/usr/bin/python3 - <<'EOF' || fail "editing the MLP's checkpoint"
import h5py, numpy as np, zlib
with h5py.File("edited.h5", "r+") as f:
    w = f["params"]["dense4.weight"][...]
    del f["params"]["dense4.weight"]
    wide = np.concatenate([w, w], axis=1).astype(np.float32)
    f["params"].create_dataset("dense4.weight", data=wide).attrs.create(
        "crc32", zlib.crc32(wide.tobytes()), dtype=np.uint32)
with h5py.File("unrecorded.h5", "r+") as f:
    config = f.attrs["config"]
    config = config.decode() if isinstance(config, bytes) else config
    assert "input_shape=5\n" in config, config
    kept = "".join(l + "\n" for l in config.splitlines()
                   if l.split("=")[0] not in ("input_shape", "outputs", "positions"))
    f.attrs["config"] = np.bytes_(kept)
EOF
e2e_refused "an edited checkpoint" "parameter dense4.weight has shape (8, 2) in the checkpoint, the model needs (8, 1)" "$bin/lockstep-export" --checkpoint edited.h5 --out w.safetensors
out=$(timeout 60 "$bin/lockstep-export" --checkpoint unrecorded.h5 --out unrecorded.safetensors 2>&1) &&
  [[ -s unrecorded.safetensors ]] && echo "ok: a checkpoint without the model's record exports" ||
  fail "a checkpoint without the model's record: $out"
for f in w x y z; do
  [[ ! -e $f.safetensors && ! -e $f.safetensors.tmp ]] || fail "a refused export left $f.safetensors"
done

e2e_finish export_test
