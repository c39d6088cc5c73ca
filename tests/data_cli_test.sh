#!/usr/bin/env bash
# lockstep-data end to end: regression generation and inspect; the bench at 2 ranks (each reads
# half); a small Fashion-MNIST-shaped IDX set made here converts, and damaged ones are refused
# with a message naming the file; bad inputs give a non-zero exit and one clear message (also one
# that only rank 1 has, which ends the job at once); an --out that is one of the inputs (the same
# file, also through a link) or exists and is not a regular file (a fifo, a folder) is refused with
# exit 2 and the input left as it was, while an existing regular output is replaced; on a full
# disk (a 300 KiB tmpfs, mounted when the test runs as root, else that case is skipped with the
# reason) text, regression and synthetic exit 1 with one line naming the file and the cause, and
# leave neither the file nor its temporary; join makes one file of virtual datasets over shards
# (the shards' rows in order, read after the folder moves; shards of other row shapes, splits or
# normalisation refused, exit 2, nothing left behind); then the
# real Fashion-MNIST conversion when Debian's dataset-fashion-mnist is installed (else exit 77,
# after the other checks have passed).
# ctest sets LOCKSTEP_BIN (the apps build folder) and MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-data
bin=$bin/lockstep-data
e2e_workdir data-cli

run() { timeout 300 "$bin" "$@"; }

# expect_error WORDS ARGS...: non-zero exit (left in $last_rc), WORDS in the message, no HDF5
# error-stack dump.
expect_error() {
  local words=$1
  shift
  local out rc
  out=$(run "$@" 2>&1)
  rc=$?
  last_rc=$rc
  [[ $rc -ne 0 ]] || fail "lockstep-data $* succeeded"$'\n'"$out"
  grep -qF -- "$words" <<<"$out" || fail "lockstep-data $*: message lacks '$words'"$'\n'"$out"
  if grep -q 'HDF5-DIAG' <<<"$out"; then fail "lockstep-data $*: HDF5 printed its error stack"; fi
}

# --- regression: the file, its attributes, inspect ---
out=$(run regression --out "$work/reg.h5" --samples 1000 --features 4 --noise 0.05 --seed 7 2>&1)
[[ $? -eq 0 ]] || fail "regression exited non-zero"$'\n'"$out"
out=$(run inspect "$work/reg.h5" 2>&1)
[[ $? -eq 0 ]] || fail "inspect reg.h5 exited non-zero"$'\n'"$out"
for want in '/train/x  float32 (1000, 4)' '/train/y  float32 (1000,)' '/test/x  float32 (200, 4)' \
            '@true_w = [' '@true_b = ' '@seed = 7' 'train: 1000 rows of float32 (4,)' \
            'float32 regression targets'; do
  grep -qF -- "$want" <<<"$out" || fail "inspect reg.h5 lacks '$want'"$'\n'"$out"
done
# Same seed, same file contents; another seed, other weights.
run regression --out "$work/reg2.h5" --samples 1000 --features 4 --noise 0.05 --seed 7 >/dev/null 2>&1
run regression --out "$work/reg3.h5" --samples 1000 --features 4 --noise 0.05 --seed 8 >/dev/null 2>&1
w() { run inspect "$1" 2>/dev/null | grep '@true_w'; }
[[ "$(w "$work/reg.h5")" == "$(w "$work/reg2.h5")" ]] || fail "--seed 7 twice gave different weights"
[[ "$(w "$work/reg.h5")" != "$(w "$work/reg3.h5")" ]] || fail "--seed 7 and 8 gave the same weights"
cmp -s <(h5dump -d /train/y "$work/reg.h5" | tail -n +3) <(h5dump -d /train/y "$work/reg2.h5" | tail -n +3) ||
  fail "--seed 7 twice gave different targets"

# --- synthetic: a dataset without a download that lockstep-train learns from ---
out=$(run synthetic --out "$work/syn.h5" --samples 512 2>&1)
[[ $? -eq 0 ]] || fail "synthetic exited non-zero"$'\n'"$out"
out=$(run inspect "$work/syn.h5" 2>&1)
for want in '/train/images  uint8 (512, 28, 28, 1)' '/test/images  uint8 (102, 28, 28, 1)' \
            '@num_classes = 10'; do
  grep -qF -- "$want" <<<"$out" || fail "inspect syn.h5 lacks '$want'"$'\n'"$out"
done
run synthetic --out "$work/syn2.h5" --samples 512 >/dev/null 2>&1
cmp -s <(h5dump -d /train/images "$work/syn.h5" | tail -n +3) \
  <(h5dump -d /train/images "$work/syn2.h5" | tail -n +3) || fail "synthetic twice gave other images"
# The class is in the images: a few epochs of the CNN's smaller cousin beat chance by far.
out=$(timeout 300 "$(dirname "$bin")/lockstep-train" --data "$work/syn.h5" --model mlp:32 \
      --global-batch 64 --epochs 3 --progress none 2>&1)
acc=$(grep -oE '^test_accuracy=[0-9.]+' <<<"$out" | cut -d= -f2)
awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.5) }' || fail "synthetic images: test accuracy ${acc:-none}, not above 0.5"$'\n'"$out"
out=$(run synthetic --out "$work/tok.h5" --kind tokens --samples 64 --seq-len 16 --vocab 1000 2>&1)
[[ $? -eq 0 ]] || fail "synthetic tokens exited non-zero"$'\n'"$out"
out=$(run inspect "$work/tok.h5" 2>&1)
for want in '/train/tokens  int32 (64, 17)' '@vocab_size = 1000' '@seq_len = 16'; do
  grep -qF -- "$want" <<<"$out" || fail "inspect tok.h5 lacks '$want'"$'\n'"$out"
done
expect_error "--kind must be images or tokens" synthetic --out "$work/x.h5" --kind audio
expect_error "--vocab must be 2 to 2^24" synthetic --out "$work/x.h5" --kind tokens --vocab 1
[[ ! -e $work/x.h5 ]] || fail "a refused synthetic run left $work/x.h5"

# --- bench at 2 ranks: each rank reads half of the split ---
out=$(timeout 300 "$mpiexec" -n 2 --oversubscribe "$bin" bench "$work/reg.h5" --global-batch 64 --epochs 2 2>&1)
[[ $? -eq 0 ]] || fail "bench at 2 ranks exited non-zero"$'\n'"$out"
shares=$(awk '$1 ~ /^[0-9]+$/ && NF == 6 { print $5 }' <<<"$out")
[[ $(wc -l <<<"$shares") -eq 4 ]] || fail "bench: expected 4 rows (2 epochs x 2 ranks)"$'\n'"$out"
while read -r s; do
  awk -v s="${s%\%}" 'BEGIN { exit !(s > 45 && s < 55) }' || fail "bench: a rank read $s of the split, not about 50%"
done <<<"$shares"
grep -q 'samples/s per rank min' <<<"$out" || fail "bench prints no samples/s summary"$'\n'"$out"

# --- a tiny Fashion-MNIST-shaped IDX set converts; damaged ones are refused ---
# idx MAGIC3 DIMS... : the 4-byte magic {0,0,8,n} and big-endian dimensions.
idx_header() {
  local n=$#
  printf '\x00\x00\x08'"\\x$(printf %02x "$n")"
  for d in "$@"; do printf "\\x$(printf %02x $((d >> 24 & 255)))\\x$(printf %02x $((d >> 16 & 255)))\\x$(printf %02x $((d >> 8 & 255)))\\x$(printf %02x $((d & 255)))"; done
}
make_set() {  # make_set DIR N
  mkdir -p "$1"
  for prefix in train t10k; do
    { idx_header "$2" 28 28; head -c $(($2 * 784)) /dev/urandom; } | gzip >"$1/$prefix-images-idx3-ubyte.gz"
    { idx_header "$2"; for ((i = 0; i < $2; i++)); do printf "\\x$(printf %02x $((i % 10)))"; done; } |
      gzip >"$1/$prefix-labels-idx1-ubyte.gz"
  done
}
make_set "$work/idx" 12
out=$(run fashion-mnist --source "$work/idx" --out "$work/small.h5" 2>&1)
[[ $? -eq 0 ]] || fail "fashion-mnist on a valid small set exited non-zero"$'\n'"$out"
out=$(run inspect "$work/small.h5" 2>&1)
for want in '/train/images  uint8 (12, 28, 28, 1)' '/test/labels  uint8 (12,)' 'gzip 4' \
            '@num_classes = 10' '@class_names = ["T-shirt/top"' '@norm_mean = ' \
            'train: 12 rows of uint8 (28, 28, 1)' 'uint8 labels, 10 classes'; do
  grep -qF -- "$want" <<<"$out" || fail "inspect small.h5 lacks '$want'"$'\n'"$out"
done

cp -r "$work/idx" "$work/cut"
gzip -dc "$work/idx/train-images-idx3-ubyte.gz" | head -c 5000 | gzip >"$work/cut/train-images-idx3-ubyte.gz"
expect_error "train-images-idx3-ubyte.gz: not a valid IDX file: truncated" \
  fashion-mnist --source "$work/cut" --out "$work/x.h5"
[[ ! -e $work/x.h5 && ! -e $work/x.h5.tmp ]] || fail "a failed conversion left a file behind"
cp -r "$work/idx" "$work/magic"
{ printf '\x00\x00\x08\x01'; gzip -dc "$work/idx/t10k-labels-idx1-ubyte.gz" | tail -c +5; } | gzip >"$work/magic/t10k-images-idx3-ubyte.gz"
expect_error "t10k-images-idx3-ubyte.gz: not a valid IDX file: 1 dimensions where 3" \
  fashion-mnist --source "$work/magic" --out "$work/x.h5"
cp -r "$work/idx" "$work/label"
{ idx_header 12; printf '\x00\x01\x02\x0c\x00\x00\x00\x00\x00\x00\x00\x00'; } | gzip >"$work/label/train-labels-idx1-ubyte.gz"
expect_error "label 12 at row 3 is not a Fashion-MNIST class" fashion-mnist --source "$work/label" --out "$work/x.h5"
mkdir -p "$work/empty"
expect_error "no train-images-idx3-ubyte.gz" fashion-mnist --source "$work/empty" --out "$work/x.h5"

# --- bad inputs: one clear message and a non-zero exit ---
expect_error "no such file" inspect "$work/missing.h5"
echo "a,b" >"$work/text.h5"
expect_error "not an HDF5 file" inspect "$work/text.h5"
head -c 20000 "$work/reg.h5" >"$work/cut.h5"
expect_error "truncated" inspect "$work/cut.h5"
# A file the loader would refuse (x and y of different row counts) is described, and inspect exits 2
# as the trainer would (before: 0); needs h5copy (Debian's hdf5-tools), else skipped with the reason.
if command -v h5copy >/dev/null; then
  run regression --out "$work/other.h5" --samples 50 >/dev/null 2>&1 &&
    h5copy -p -i "$work/reg.h5" -o "$work/badrows.h5" -s /train/x -d /train/x &&
    h5copy -p -i "$work/other.h5" -o "$work/badrows.h5" -s /train/y -d /train/y ||
    fail "writing badrows.h5"
  expect_error "train: not usable by the loader" inspect "$work/badrows.h5"
  [[ $last_rc -eq 2 ]] || fail "inspect of a file the loader refuses: exit $last_rc, expected 2"
else
  echo "skipped inspect's exit status for an unusable file: no h5copy (hdf5-tools)"
fi
expect_error "--samples must be at least 1" regression --out "$work/x.h5" --samples 0
expect_error "--noise must be a finite value >= 0" regression --out "$work/x.h5" --noise -1
expect_error "folder $work/nowhere does not exist" regression --out "$work/nowhere/x.h5"
expect_error "unrecognised option '--sampels'; did you mean --samples?" regression \
  --out "$work/x.h5" --sampels 3
expect_error "unknown command 'convert'" convert
expect_error "unknown command 'fashion_mnist'; did you mean fashion-mnist?" fashion_mnist
expect_error "the option '--out' is required" regression
expect_error "no group 'validation'" bench "$work/reg.h5" --group validation --global-batch 8
# A batch above the split's rows (before: accepted, and std::bad_alloc for a huge one).
expect_error "is larger than the" bench "$work/reg.h5" --global-batch 100000000
out=$(timeout 300 "$mpiexec" -n 2 --oversubscribe "$bin" bench "$work/reg.h5" --global-batch 9 2>&1)
rc=$?
[[ $rc -ne 0 ]] || fail "bench --global-batch 9 at 2 ranks succeeded"
[[ $(grep -c 'does not divide by the 2 ranks; try 8 or 10' <<<"$out") -eq 1 ]] ||
  fail "bench --global-batch 9 at 2 ranks: not exactly one message naming 8 or 10"$'\n'"$out"
out=$(timeout 300 "$mpiexec" -n 2 --oversubscribe "$bin" inspect "$work/reg.h5" 2>&1)
[[ $? -ne 0 ]] && grep -q 'runs as one process' <<<"$out" || fail "inspect at 2 ranks was not refused"$'\n'"$out"
# A usage error that only rank 1 has (an MPMD launch gives it its own command line) was never
# agreed: rank 1 prints it, naming itself, and ends the whole job with exit 2 at once, while rank 0
# waits for it in a collective that has no deadline (MPI_Comm_dup).
start=$SECONDS
out=$(timeout 120 "$mpiexec" --oversubscribe -n 1 "$bin" bench "$work/reg.h5" --global-batch 64 : \
  -n 1 "$bin" bench "$work/reg.h5" --global-batch 64 --epochs 0 2>&1)
rc=$?
took=$((SECONDS - start))
[[ $rc -eq 2 ]] || fail "a usage error on rank 1 only: exit $rc, expected 2 (124: the job hung)"$'\n'"$out"
grep -q '^error: \[rank 1/2 .*\] --epochs must be at least 1' <<<"$out" ||
  fail "a usage error on rank 1 only: rank 1 did not print it"$'\n'"$out"
[[ $took -lt 30 ]] || fail "a usage error on rank 1 only took ${took}s to end the job"

# --- an --out that would destroy an input or is not a regular file: exit 2 before any reading ---
# expect_refused WORDS ARGS...: expect_error's checks, with exit 2 (a usage error).
expect_refused() {
  expect_error "$@"
  [[ $last_rc -eq 2 ]] || fail "lockstep-data ${*:2}: exit $last_rc, expected 2 (refused)"
}
seq 1 5000 >"$work/notes.txt"
sum=$(cksum <"$work/notes.txt")
expect_refused "$work/notes.txt: is the input $work/notes.txt" \
  text --in "$work/notes.txt" --out "$work/notes.txt" --seq-len 64
ln -s notes.txt "$work/link.h5"
expect_refused "is the input" text --in "$work/notes.txt" --out "$work/link.h5" --seq-len 64
[[ $(cksum <"$work/notes.txt") == "$sum" && -L $work/link.h5 ]] || fail "a refused text run changed its input"
[[ ! -e $work/notes.txt.tmp && ! -e $work/link.h5.tmp ]] || fail "a refused text run left a temp file"
idx_sum=$(cksum <"$work/idx/t10k-labels-idx1-ubyte.gz")
expect_refused "is the input" fashion-mnist --source "$work/idx" --out "$work/idx/t10k-labels-idx1-ubyte.gz"
[[ $(cksum <"$work/idx/t10k-labels-idx1-ubyte.gz") == "$idx_sum" ]] || fail "a refused fashion-mnist run changed its input"
mkfifo "$work/fifo"
expect_refused "$work/fifo: exists and is not a regular file" \
  text --in "$work/notes.txt" --out "$work/fifo" --seq-len 64
[[ -p $work/fifo ]] || fail "a refused text run replaced the fifo given as --out"
mkdir "$work/folder.h5"
expect_refused "$work/folder.h5: is a folder" regression --out "$work/folder.h5"
[[ -d $work/folder.h5 ]] || fail "a refused regression run replaced the folder given as --out"
# An existing regular output is replaced (scripts rerun conversions).
for i in 1 2; do
  out=$(run text --in "$work/notes.txt" --out "$work/notes.h5" --seq-len 64 2>&1)
  [[ $? -eq 0 ]] || fail "text over an existing output (run $i) exited non-zero"$'\n'"$out"
done

# --- a full disk: exit 1 with one message naming the file, nothing under the final name, no temp
# file, no crash at exit; needs a small tmpfs (root), else skipped with the reason ---
mkdir "$work/small"
if mount -t tmpfs -o size=300k tmpfs "$work/small" 2>/dev/null; then
  trap 'umount "$work/small"; rm -rf "$work"' EXIT
  for i in 1 2 3 4 5 6 7 8 9; do cat "$work/notes.txt" "$work/notes.txt"; done | head -c 320000 >"$work/big.txt"
  # text fills the disk only when the file is flushed and closed; the generators fail mid-write.
  for args in "text --in $work/big.txt --seq-len 64" "regression --samples 20000" \
              "synthetic --samples 1000"; do
    out=$(run $args --out "$work/small/a.h5" 2>&1)
    rc=$?
    [[ $rc -eq 1 ]] || fail "$args on a full disk: exit $rc, expected 1"$'\n'"$out"
    grep -qiF "writing $work/small/a.h5.tmp failed: No space left on device" <<<"$out" ||
      fail "$args on a full disk: no message naming the file and the cause"$'\n'"$out"
    [[ $(grep -c . <<<"$out") -eq 1 ]] || fail "$args on a full disk: not a one-line message"$'\n'"$out"
    if grep -qi 'segmentation fault\|HDF5-DIAG' <<<"$out"; then fail "$args on a full disk crashed or dumped HDF5's stack"; fi
    [[ ! -e $work/small/a.h5 ]] || fail "$args on a full disk put a file in place"
    [[ ! -e $work/small/a.h5.tmp ]] || fail "$args on a full disk left the temp file"
  done
  umount "$work/small" || fail "cannot unmount $work/small"
  trap 'rm -rf "$work"' EXIT
else
  echo "skipped the full-disk case: mount -t tmpfs is not permitted here (the test runs it as root)"
fi

# --- join: shard files -> one file of virtual datasets over them ---
mkdir -p "$work/join/parts"
for s in 1 2 3; do
  run regression --out "$work/join/parts/r$s.h5" --samples 100 --features 5 --seed $s \
    --test-samples 20 >/dev/null 2>&1 || fail "regression shard $s"
done
out=$(cd "$work/join" && run join parts/r1.h5 parts/r2.h5 --in parts/r3.h5 --out all.h5 2>&1)
[[ $? -eq 0 ]] || fail "join exited non-zero"$'\n'"$out"
grep -qF "wrote all.h5: virtual datasets over 3 file(s): test 60 rows, train 300 rows" <<<"$out" ||
  fail "join summary unexpected"$'\n'"$out"
# The joined datasets are the shards' rows in order, and their attributes the first shard's.
for d in train/x train/y test/x test/y; do
  h5dump -d "/$d" -b LE -o "$work/join/joined.bin" "$work/join/all.h5" >/dev/null || fail "h5dump $d"
  : >"$work/join/shards.bin"
  for s in 1 2 3; do
    h5dump -d "/$d" -b LE -o "$work/join/one.bin" "$work/join/parts/r$s.h5" >/dev/null
    cat "$work/join/one.bin" >>"$work/join/shards.bin"
  done
  cmp -s "$work/join/joined.bin" "$work/join/shards.bin" || fail "joined $d is not the shards' rows in order"
done
out=$(run inspect "$work/join/all.h5" 2>&1)
for want in '/train/x  float32 (300, 5)  virtual' '@seed = 1' \
            'train: 300 rows of float32 (5,)' 'test: 60 rows'; do
  grep -qF -- "$want" <<<"$out" || fail "inspect of the joined file lacks '$want'"$'\n'"$out"
done
# The folder moved as a whole still reads (the shards are named relative to it).
mv "$work/join" "$work/join-moved"
out=$(run inspect "$work/join-moved/all.h5" 2>&1)
[[ $? -eq 0 ]] && grep -qF 'train: 300 rows' <<<"$out" ||
  fail "the joined file, moved with its shards, does not read"$'\n'"$out"
mv "$work/join-moved" "$work/join"
run regression --out "$work/join/parts/narrow.h5" --samples 100 --features 3 >/dev/null 2>&1
expect_error "narrow.h5: test/x has shape (20, 3), rows unlike those of $work/join/parts/r1.h5's (20, 5)" \
  join "$work/join/parts/r1.h5" "$work/join/parts/narrow.h5" --out "$work/join/bad.h5"
[[ $last_rc -eq 2 ]] || fail "join of shards of other row shapes: exit $last_rc, expected 2"
head -c 4000 /dev/urandom >"$work/join/bytes"
run text --in "$work/join/bytes" --out "$work/join/parts/text.h5" --seq-len 16 >/dev/null 2>&1
expect_error "text.h5: the datasets of test/ are not $work/join/parts/r1.h5's" \
  join "$work/join/parts/r1.h5" "$work/join/parts/text.h5" --out "$work/join/bad.h5"
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  # Shards normalised differently: the joined file would read both as the first says.
  /usr/bin/python3 - "$work/join/parts" <<'PY'
import sys
import h5py
import numpy as np
for i, mean in enumerate((0.25, 0.5)):
    with h5py.File("%s/n%d.h5" % (sys.argv[1], i), "w") as f:
        f.attrs["norm_mean"] = mean
        for split in ("train", "test"):
            f[split + "/images"] = np.zeros((8, 4, 4, 1), "u1")
            f[split + "/labels"] = np.zeros(8, "u1")
PY
  expect_error "n1.h5: attribute norm_mean is 0.5 where $work/join/parts/n0.h5 has 0.25" \
    join "$work/join/parts/n0.h5" "$work/join/parts/n1.h5" --out "$work/join/bad.h5"
else
  echo "skipped join's attribute check: /usr/bin/python3 has no h5py (python3-h5py)"
fi
[[ ! -e $work/join/bad.h5 && ! -e $work/join/bad.h5.tmp ]] || fail "a refused join left a file behind"
expect_error "writing it would destroy the input" \
  join "$work/join/parts/r1.h5" "$work/join/parts/r2.h5" --out "$work/join/parts/r2.h5"

if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi

# --- the real Fashion-MNIST, when installed ---
src=/usr/share/datasets/fashion-mnist
if [[ ! -e $src/train-images-idx3-ubyte.gz ]]; then
  echo "other checks passed; skipped the Fashion-MNIST conversion: $src is not installed (Debian package dataset-fashion-mnist)"
  exit 77
fi
out=$(run fashion-mnist --out "$work/fmnist.h5" 2>&1)
[[ $? -eq 0 ]] || fail "fashion-mnist exited non-zero"$'\n'"$out"
grep -qF 'train 60000, test 10000 images 28x28x1 uint8, 10 classes, norm mean 0.2860 std 0.3530' <<<"$out" ||
  fail "fashion-mnist summary unexpected"$'\n'"$out"
out=$(run inspect "$work/fmnist.h5" 2>&1)
for want in '/train/images  uint8 (60000, 28, 28, 1)  chunked' '/test/images  uint8 (10000, 28, 28, 1)' \
            'gzip 4' '@class_names = ["T-shirt/top", "Trouser"' 'Ankle boot"]' \
            'train: 60000 rows of uint8 (28, 28, 1)' 'test: 10000 rows'; do
  grep -qF -- "$want" <<<"$out" || fail "inspect fmnist.h5 lacks '$want'"$'\n'"$out"
done
if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all lockstep-data checks passed"
