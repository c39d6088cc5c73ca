#!/usr/bin/env bash
# lockstep-data text end to end: a small corpus of two files (every byte value 0-255 among them)
# converts into train/ and test/ token sequences of --seq-len + 1 bytes; the split sizes follow
# --test-fraction; every row is the corpus's bytes at its offset, and the offsets of both splits
# together tile the corpus with stride --seq-len; a seed gives the same split every time and
# another seed another; the files may be given without --in; inspect describes the sequences; bad inputs give one clear message and a
# non-zero exit; and Debian's GPL-3 text (the README's demo) converts. ctest sets LOCKSTEP_BIN.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-data
e2e_require_commands h5dump od
bin=$bin/lockstep-data
e2e_workdir data-text

run() { timeout 120 "$bin" "$@"; }

# expect_error WORDS ARGS...: non-zero exit, WORDS in the message, no HDF5 error-stack dump.
expect_error() {
  local words=$1
  shift
  local out rc
  out=$(run "$@" 2>&1)
  rc=$?
  [[ $rc -ne 0 ]] || fail "lockstep-data $* succeeded"$'\n'"$out"
  grep -qF -- "$words" <<<"$out" || fail "lockstep-data $*: message lacks '$words'"$'\n'"$out"
  if grep -q 'HDF5-DIAG' <<<"$out"; then fail "lockstep-data $*: HDF5 printed its error stack"; fi
}

# A corpus of 601 bytes in two files: all 256 byte values, then text.
for ((i = 0; i < 256; i++)); do printf "\\x$(printf %02x $i)"; done >"$work/a.bin"
head -c 345 /usr/share/common-licenses/GPL-3 >"$work/b.txt" 2>/dev/null ||
  head -c 345 /dev/urandom >"$work/b.txt"
cat "$work/a.bin" "$work/b.txt" >"$work/corpus"
bytes=$(stat -c %s "$work/corpus")
[[ $bytes -eq 601 ]] || fail "the test corpus holds $bytes bytes, not 601"
T=8
n=$(((bytes - 1) / T))          # 75 sequences
n_test=$(((n * 2 + 5) / 10))    # round(75 * 0.2) = 15
n_train=$((n - n_test))

out=$(run text --in "$work/a.bin" "$work/b.txt" --out "$work/c.h5" --seq-len $T --test-fraction 0.2 --seed 3 2>&1)
[[ $? -eq 0 ]] || fail "text exited non-zero"$'\n'"$out"
grep -qF "601 bytes from 2 file(s) -> train $n_train, test $n_test sequences of 8 + 1 bytes" <<<"$out" ||
  fail "text summary unexpected"$'\n'"$out"
out=$(run inspect "$work/c.h5" 2>&1)
[[ $? -eq 0 ]] || fail "inspect c.h5 exited non-zero"$'\n'"$out"
for want in "/train/tokens  uint8 ($n_train, 9)" "/test/tokens  uint8 ($n_test, 9)" \
            "/train/offsets  int64 ($n_train,)" '@seq_len = 8' '@vocab_size = 256' \
            '@source_files = ["a.bin", "b.txt"]' '@source_bytes = 601' '@seed = 3' \
            "train: $n_train sequences of 9 tokens (inputs the first 8, targets the last 8), vocabulary 256" \
            "test: $n_test sequences of 9 tokens"; do
  grep -qF -- "$want" <<<"$out" || fail "inspect c.h5 lacks '$want'"$'\n'"$out"
done

# Rows round-trip: row i of a split is the corpus's T + 1 bytes at offsets[i].
# offsets FILE SPLIT: the split's offsets, one per line.
offsets() {
  h5dump -d "/$2/offsets" -b LE -o "$work/off.bin" "$1" >/dev/null && od -An -v -t d8 -w8 "$work/off.bin" | tr -d ' '
}
all_offsets=""
for split in train test; do
  h5dump -d "/$split/tokens" -b NATIVE -o "$work/tok.bin" "$work/c.h5" >/dev/null || fail "h5dump $split/tokens"
  i=0
  bad=0
  while read -r off; do
    cmp -s <(tail -c +$((off + 1)) "$work/corpus" | head -c $((T + 1))) \
           <(tail -c +$((i * (T + 1) + 1)) "$work/tok.bin" | head -c $((T + 1))) || bad=$((bad + 1))
    i=$((i + 1))
  done < <(offsets "$work/c.h5" $split)
  [[ $bad -eq 0 ]] || fail "$split: $bad of $i rows are not the corpus's bytes at their offset"
  all_offsets+=$(offsets "$work/c.h5" $split)$'\n'
done
[[ "$(sort -n <<<"${all_offsets%$'\n'}")" == "$(seq 0 $T $(((n - 1) * T)))" ]] ||
  fail "the offsets of train and test together are not 0, 8, ..., $(((n - 1) * T))"
tokens_of() { h5dump -d /test/tokens -y -w 0 "$1" | grep -v '^ *[A-Z}]'; }
run text --in "$work/corpus" --out "$work/same.h5" --seq-len $T --test-fraction 0.2 --seed 3 >/dev/null 2>&1
run text --in "$work/corpus" --out "$work/other.h5" --seq-len $T --test-fraction 0.2 --seed 4 >/dev/null 2>&1
[[ "$(tokens_of "$work/c.h5")" == "$(tokens_of "$work/same.h5")" ]] || fail "--seed 3 twice gave other test sequences"
[[ "$(tokens_of "$work/c.h5")" != "$(tokens_of "$work/other.h5")" ]] || fail "--seed 3 and 4 gave the same test sequences"
# The files may be given without --in (as a shell glob gives them): the same corpus, in order.
run text "$work/a.bin" "$work/b.txt" --out "$work/bare.h5" --seq-len $T --test-fraction 0.2 --seed 3 >/dev/null 2>&1 ||
  fail "text with the files as bare arguments exited non-zero"
[[ "$(tokens_of "$work/c.h5")" == "$(tokens_of "$work/bare.h5")" ]] ||
  fail "the files as bare arguments gave other sequences than --in"

# --- bad inputs: one clear message and a non-zero exit, no file left behind ---
expect_error "$work/missing.txt: no such file" text --in "$work/missing.txt" --out "$work/x.h5" --seq-len 8
expect_error "is a folder; --in takes files" text --in "$work" --out "$work/x.h5" --seq-len 8
expect_error "--seq-len must be at least 1, not 0" text --in "$work/corpus" --out "$work/x.h5" --seq-len 0
expect_error "the input holds 601 bytes, fewer than one sequence of --seq-len + 1 = 1001 bytes" \
  text --in "$work/corpus" --out "$work/x.h5" --seq-len 1000
expect_error "one sequence of 401 bytes, and a train and a test split need at least two" \
  text --in "$work/corpus" --out "$work/x.h5" --seq-len 400
expect_error "--test-fraction must be between 0 and 1" \
  text --in "$work/corpus" --out "$work/x.h5" --seq-len 8 --test-fraction 1
expect_error "the option '--seq-len' is required" text --in "$work/corpus" --out "$work/x.h5"
[[ ! -e $work/x.h5 && ! -e $work/x.h5.tmp ]] || fail "a refused conversion left a file behind"

# --- the README's demo: Debian's GPL-3 text ---
gpl=/usr/share/common-licenses/GPL-3
if [[ -r $gpl ]]; then
  out=$(run text --in $gpl --out "$work/gpl3.h5" --seq-len 64 2>&1)
  gn=$((($(stat -c %s $gpl) - 1) / 64))
  gt=$(((gn + 5) / 10))
  grep -qF "train $((gn - gt)), test $gt sequences of 64 + 1 bytes" <<<"$out" ||
    fail "text on $gpl: summary unexpected"$'\n'"$out"
else
  echo "note: $gpl is not installed; skipped the demo conversion"
fi

if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all lockstep-data text checks passed"
