#!/usr/bin/env bash
# Files written the way users of other tools write them (h5py, Debian's python3-h5py), end to end:
#  - compressed with the common HDF5 filters (LZF, LZ4, bzip2, Blosc, Bitshuffle): lockstep-data
#    inspect names the filter and says the loader reads the file, and lockstep-train trains on it;
#  - a filter whose plugin cannot be found (HDF5_PLUGIN_PATH at an empty folder): inspect and the
#    trainer agree that it is refused, before training (exit 2), naming the filter and the fix;
#  - float labels with integral values and a num_classes attribute train as classification; float
#    labels that are not whole numbers but claim num_classes are refused naming --loss, and
#    --loss mse trains a regression on them;
#  - channels-first images (N, 1, 28, 28) with --model cnn: the message says they look
#    channels-first and which layout is needed.
# ctest sets LOCKSTEP_BIN (the apps build folder). Needs /usr/bin/python3 with h5py (the python3
# on PATH may be another Python) and the filter plugins (scripts/setup.sh installs both).
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data
py=/usr/bin/python3
$py -c 'import h5py' 2>/dev/null || { echo "skipped: $py has no h5py (python3-h5py)"; exit 77; }
e2e_workdir foreign
cd "$work" || exit 1

# h5py FILE KIND [create_dataset keywords]: a train and a test split of 64 and 32 rows.
#   KIND images: uint8 (N, 8, 8, 1) images and int64 labels; vectors: float32 (N, 4) x and float32
#   y holding whole numbers 0..2 with num_classes = 3 on the file; halves: the same with y + 0.5;
#   nchw: float32 (N, 1, 28, 28) images and labels.
h5py() {
  $py - "$@" <<'EOF'
import sys
import h5py
import numpy as np
path, kind = sys.argv[1], sys.argv[2]
kw = eval("dict(" + (sys.argv[3] if len(sys.argv) > 3 else "") + ")")
rng = np.random.default_rng(1)
with h5py.File(path, "w") as f:
    for split, n in (("train", 64), ("test", 32)):
        labels = rng.integers(0, 3, n)
        if kind == "images":
            images = (rng.integers(0, 4, (n, 8, 8, 1)) * 60).astype("u1")  # compresses well
            f.create_dataset(split + "/images", data=images, chunks=(16, 8, 8, 1), **kw)
            f.create_dataset(split + "/labels", data=labels, chunks=(16,), **kw)
        elif kind == "nchw":
            f.create_dataset(split + "/images", data=rng.random((n, 1, 28, 28), dtype="f4"))
            f.create_dataset(split + "/labels", data=labels)
        else:
            x = rng.random((n, 4), dtype="f4") + labels[:, None]
            y = labels.astype("f4") + (0.5 if kind == "halves" else 0)
            f.create_dataset(split + "/x", data=x)
            f.create_dataset(split + "/y", data=y)
    f.attrs["num_classes"] = 3
EOF
}
train() {  # train ARGS...: one rank, bounded; output in $out, exit status in $rc
  out=$(timeout 120 "$bin/lockstep-train" --progress none --global-batch 16 --steps 4 "$@" 2>&1)
  rc=$?
}
no_stack() {
  if grep -q 'HDF5-DIAG' <<<"$1"; then fail "$2: HDF5 printed its error stack"; fi
}

# --- filters: inspect and the loader agree, with the plugins and without ---
mkdir no-plugins
for filter in "LZF:compression='lzf'" "LZ4:compression=32004" "bzip2:compression=307" \
              "Blosc:compression=32001" "Bitshuffle:compression=32008, compression_opts=(0, 2)"; do
  name=${filter%%:*}
  h5py "$name.h5" images "${filter#*:}" || { fail "h5py could not write a $name file"; continue; }
  out=$("$bin/lockstep-data" inspect "$name.h5" 2>&1)
  grep -q "/train/images .*chunked (16, 8, 8, 1), $name" <<<"$out" ||
    fail "inspect $name.h5 does not name the $name filter"$'\n'"$out"
  grep -q "train: 64 rows of uint8 (8, 8, 1)" <<<"$out" ||
    fail "inspect $name.h5: the loader would not read it"$'\n'"$out"
  train --data "$name.h5" --model mlp:8
  [[ $rc -eq 0 ]] && grep -q '^test_accuracy=' <<<"$out" ||
    fail "training on a $name file: exit $rc"$'\n'"$out"
  [[ $failures -eq 0 ]] && echo "ok: $name-compressed h5py file: inspected and trained on"

  # The same file where HDF5 finds no plugin.
  out=$(HDF5_PLUGIN_PATH=$work/no-plugins "$bin/lockstep-data" inspect "$name.h5" 2>&1)
  rc=$?
  [[ $rc -eq 2 ]] || fail "inspect of $name.h5 without its plugin: exit $rc, expected 2 (before: 0)"
  grep -q "train: not usable by the loader: .*compressed with the $name filter.*h5repack -f NONE" \
    <<<"$out" || fail "inspect without plugins does not refuse $name.h5 naming the filter"$'\n'"$out"
  out=$(HDF5_PLUGIN_PATH=$work/no-plugins timeout 120 "$bin/lockstep-train" --progress none \
        --data "$name.h5" --model mlp:8 --global-batch 16 --steps 4 2>&1)
  rc=$?
  [[ $rc -eq 2 ]] || fail "training on $name.h5 without its plugin: exit $rc, expected 2"$'\n'"$out"
  grep -q "^error: $name.h5: train/images: is compressed with the $name filter (HDF5 filter id" \
    <<<"$out" || fail "the refusal of $name.h5 does not name the filter"$'\n'"$out"
  grep -q "h5repack -f NONE" <<<"$out" || fail "the refusal of $name.h5 gives no fix"$'\n'"$out"
  no_stack "$out" "$name.h5 without its plugin"
done
[[ $failures -eq 0 ]] &&
  echo "ok: without plugins, inspect and the trainer refuse each file before training (exit 2)"

# --- float labels with num_classes ---
h5py whole.h5 vectors
train --data whole.h5 --model mlp:8 --lr 0.01
if [[ $rc -ne 0 ]] || ! grep -q '^test_accuracy=' <<<"$out" || grep -q '^test_mse=' <<<"$out"; then
  fail "float whole-number labels with num_classes did not train as classification"$'\n'"$out"
else
  echo "ok: float labels with num_classes train a classifier: $(grep '^test_accuracy=' <<<"$out")"
fi
h5py halves.h5 halves
train --data halves.h5 --model mlp:8
[[ $rc -eq 2 ]] && grep -q "^error: halves.h5: train/y: holds .* not a whole-number class label.*--loss mse" \
  <<<"$out" || fail "float non-whole labels with num_classes: exit $rc, expected 2 naming --loss"$'\n'"$out"
train --data halves.h5 --model mlp:8 --loss mse
[[ $rc -eq 0 ]] && grep -q '^test_mse=' <<<"$out" ||
  fail "--loss mse on float labels with num_classes: exit $rc"$'\n'"$out"
[[ $failures -eq 0 ]] && echo "ok: non-whole labels refused naming --loss; --loss mse trains a regression"

# --- channels-first images ---
h5py nchw.h5 nchw
train --data nchw.h5 --model cnn
[[ $rc -eq 2 ]] && grep -q "look channels-first (C, H, W).*(N, 28, 28, 1)" <<<"$out" ||
  fail "NCHW images with --model cnn: exit $rc, expected 2 saying channels-first"$'\n'"$out"
[[ $failures -eq 0 ]] && echo "ok: NCHW images: $(grep -o 'the samples .*' <<<"$out" | cut -c1-110)"

[[ $failures -eq 0 ]] && echo "foreign_files_test: all passed"
exit $((failures > 0))
