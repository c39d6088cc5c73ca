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
#    channels-first and which layout is needed;
#  - a virtual dataset (HDF5 VDS) joining shard files trains as the same rows written whole, run
#    from any folder; a shard missing, without the dataset, or shorter than its mapping (HDF5
#    reads such rows as zeros, silently) is refused before training, exit 2 on every rank, naming
#    the rows and the shard; HDF5_VDS_PREFIX finds shards elsewhere; a source in the virtual
#    dataset's own file (".") is read; a split behind an external link trains as the file itself,
#    and a link whose file or group is gone is named as such (exit 2), not "no group 'train'";
#  - external storage (h5py's external=: rows in raw files) trains as the rows in the file; a raw
#    file not found (HDF5 1.10 looks from the current folder: the fix named) or cut short (HDF5
#    reads the rest as zeros) is refused, exit 2, naming the rows;
#  - float16 inputs (numpy's half, subnormals included) train as their float32 widening does, from
#    the file and from memory; h5py's bool (an HDF5 enum) inputs and labels train as int8 0 and 1,
#    an enum over uint8 as its values (not scaled as uint8 pixels are);
#  - a dataset whose writer stopped early (chunks never written, or a contiguous dataset never
#    written: HDF5 reads them as zeros) is refused, exit 2, naming the first unwritten rows; with a
#    fill value of the writer's own (h5py's fillvalue=) the unwritten rows are meant, and train.
# ctest sets LOCKSTEP_BIN (the apps build folder). Needs /usr/bin/python3 with h5py (the python3
# on PATH may be another Python) and the filter plugins (scripts/setup.sh installs both).
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
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

# --- virtual datasets over shard files ---
# shards/*.h5: x (64, 4) and int32 y; the virtual datasets' train/ maps 64 rows from each source
# ("." maps the file's own whole/x, whole/y), test/ holds shard a written whole; joined_whole.h5
# is joined.h5's rows written whole.
mkdir -p shards elsewhere
$py - <<'PY'
import h5py
import numpy as np
rng = np.random.default_rng(2)
def shard(path, n, name="x"):
    with h5py.File(path, "w") as f:
        labels = rng.integers(0, 3, n)
        f[name] = rng.random((n, 4), dtype="f4") + labels[:, None]
        f["y"] = labels.astype("i4")
def vds(path, sources, whole=None, rows=64):
    with h5py.File(path, "w") as f:
        if whole is not None:
            f["whole/x"], f["whole/y"] = whole
        for name, shape, dt in (("x", (4,), "f4"), ("y", (), "i4")):
            layout = h5py.VirtualLayout(shape=(rows * len(sources),) + shape, dtype=dt)
            for i, s in enumerate(sources):
                src = ("whole/" if s == "." else "") + name
                layout[i * rows:(i + 1) * rows] = h5py.VirtualSource(s, src, shape=(rows,) + shape)
            f.create_virtual_dataset("train/" + name, layout)
        with h5py.File("shards/a.h5", "r") as a:
            f["test/x"], f["test/y"] = a["x"][:], a["y"][:]
        f.attrs["num_classes"] = 3
for s in "abc":
    shard("shards/%s.h5" % s, 64)
shard("shards/short.h5", 40)
shard("shards/noy.h5", 64, name="z")
shard("elsewhere/far.h5", 64)
vds("shards/joined.h5", ["a.h5", "b.h5", "c.h5"])
with h5py.File("shards/joined_whole.h5", "w") as f, h5py.File("shards/joined.h5") as v:
    for k in ("train/x", "train/y", "test/x", "test/y"):
        f[k] = v[k][:]
    f.attrs["num_classes"] = 3
vds("shards/short_vds.h5", ["a.h5", "short.h5"])
vds("shards/noy_vds.h5", ["a.h5", "noy.h5"])
vds("shards/far_vds.h5", ["a.h5", "far.h5"])
with h5py.File("shards/b.h5") as b:
    vds("shards/self.h5", ["a.h5", "."], whole=(b["x"][:], b["y"][:]))
PY
[[ -e shards/joined_whole.h5 && -e shards/self.h5 ]] || fail "h5py could not write virtual datasets"
figures() { grep -E '^test_(loss|accuracy)=' <<<"$1"; }
train --data shards/joined_whole.h5 --model mlp:8 --seed 5
want=$(figures "$out")
# A shard moved away: HDF5 alone would train on 64 rows of zeros.
mv shards/c.h5 shards/c.h5.moved
train --data "$work/shards/joined.h5" --model mlp:8 --seed 5
[[ $rc -eq 2 ]] && grep -q "train/x: is a virtual dataset whose rows 128-191 come from c.h5:x, and that file cannot be found (looked for .*/shards/c.h5" <<<"$out" ||
  fail "a VDS whose shard c.h5 is gone: exit $rc, expected 2 naming rows 128-191 and c.h5"$'\n'"$out"
no_stack "$out" "a VDS with a missing shard"
mv shards/c.h5.moved shards/c.h5
# Back in place, from another folder: the shards are found beside the virtual dataset's file.
got=$(cd / && timeout 120 "$bin/lockstep-train" --progress none --global-batch 16 --steps 4 \
      --data "$work/shards/joined.h5" --model mlp:8 --seed 5 2>&1 | grep -E '^test_(loss|accuracy)=')
[[ -n $want && $got == "$want" ]] ||
  fail "a VDS over 3 shards (run from /): '$got', the same rows written whole: '$want'"
for case in "short_vds:rows 64-127 come from short.h5:x, and .*short.h5:x has shape (40, 4), 160 values where the mapping takes 256" \
            "noy_vds:rows 64-127 come from noy.h5:x, and .*noy.h5 holds no dataset x" \
            "far_vds:rows 64-127 come from far.h5:x, and that file cannot be found"; do
  name=${case%%:*}
  out=$(timeout 120 "$mpiexec" -n 2 --oversubscribe bash -c "\"$bin/lockstep-train\" --progress none \
        --data shards/$name.h5 --model mlp:8 --global-batch 16 --steps 4; echo rank-exit=\$?" 2>&1)
  [[ $(grep -c '^rank-exit=2$' <<<"$out") -eq 2 ]] || fail "$name: not exit 2 on both ranks"$'\n'"$out"
  grep -q "^error: shards/$name.h5: train/x: is a virtual dataset whose ${case#*:}" <<<"$out" ||
    fail "$name: the refusal does not say which rows and why"$'\n'"$out"
  no_stack "$out" "$name"
done
out=$(HDF5_VDS_PREFIX=$work/elsewhere timeout 120 "$bin/lockstep-train" --progress none \
      --data shards/far_vds.h5 --model mlp:8 --global-batch 16 --steps 4 2>&1)
[[ $? -eq 0 ]] || fail "HDF5_VDS_PREFIX did not find the shard elsewhere"$'\n'"$out"
train --data shards/self.h5 --model mlp:8
[[ $rc -eq 0 ]] || fail "a VDS with a source in its own file: exit $rc"$'\n'"$out"
out=$("$bin/lockstep-data" inspect shards/noy_vds.h5 2>&1)
grep -q "train: not usable by the loader: .*noy.h5 holds no dataset x" <<<"$out" ||
  fail "inspect does not say why a VDS with a broken shard is refused"$'\n'"$out"
[[ $failures -eq 0 ]] &&
  echo "ok: virtual datasets over shards: trained as written whole; broken shards refused (exit 2)"

# --- external links: a split that lives in another file ---
$py - <<'PY'
import h5py
for name, target, group in (("linked", "joined_whole.h5", "/train"),
                            ("dangling", "moved_away.h5", "/train"),
                            ("noobject", "joined_whole.h5", "/nope")):
    with h5py.File("shards/%s.h5" % name, "w") as f:
        f["train"] = h5py.ExternalLink(target, group)
        f["test"] = h5py.ExternalLink("joined_whole.h5", "/test")
        f.attrs["num_classes"] = 3
PY
got=$(cd / && timeout 120 "$bin/lockstep-train" --progress none --global-batch 16 --steps 4 \
      --data "$work/shards/linked.h5" --model mlp:8 --seed 5 2>&1 | grep -E '^test_(loss|accuracy)=')
[[ -n $want && $got == "$want" ]] ||
  fail "a split behind an external link (run from /): '$got', the file itself: '$want'"
train --data shards/dangling.h5 --model mlp:8
[[ $rc -eq 2 ]] && grep -q "^error: shards/dangling.h5: group 'train' is an external link to moved_away.h5:/train, and that file cannot be found" <<<"$out" ||
  fail "a dangling external link: exit $rc, expected 2 naming the link and its file"$'\n'"$out"
train --data shards/noobject.h5 --model mlp:8
[[ $rc -eq 2 ]] && grep -q "external link to joined_whole.h5:/nope, and that file holds no /nope" <<<"$out" ||
  fail "an external link to a missing group: exit $rc, expected 2 naming it"$'\n'"$out"
[[ $failures -eq 0 ]] &&
  echo "ok: external links: a linked split trains as the file itself; dangling links named (exit 2)"

# --- external storage (h5py's external=): the rows in raw files beside the HDF5 file ---
mkdir -p raw
(cd raw && $py - <<'PY'
import h5py
# h5py names the raw files as given; HDF5 writes them from the current folder (raw/).
with h5py.File("../shards/joined_whole.h5", "r") as w, h5py.File("ext.h5", "w") as f:
    f.attrs["num_classes"] = 3
    for split in ("train", "test"):
        x = w[split + "/x"][:]
        d = f.create_dataset(split + "/x", shape=x.shape, dtype=x.dtype,
                             external=[("%s.bin" % split, 0, x.nbytes)])
        d[...] = x
        f[split + "/y"] = w[split + "/y"][:]
PY
)
[[ -e raw/train.bin ]] || fail "h5py could not write external storage"
got=$(cd raw && timeout 120 "$bin/lockstep-train" --progress none --global-batch 16 --steps 4 \
      --data ext.h5 --model mlp:8 --seed 5 2>&1 | grep -E '^test_(loss|accuracy)=')
[[ -n $want && $got == "$want" ]] ||
  fail "a split in external raw files: '$got', the same rows in the HDF5 file: '$want'"
# Run from another folder HDF5 1.10 looks for the raw files there: named, with the fix.
train --data raw/ext.h5 --model mlp:8
[[ $rc -eq 2 ]] && grep -qF "raw/ext.h5: train/x: its rows 0-191 are stored in the raw data file train.bin, which cannot be found (looked for $work/train.bin" <<<"$out" &&
  grep -qF "it lies beside raw/ext.h5: set HDF5_EXTFILE_PREFIX='\${ORIGIN}'" <<<"$out" ||
  fail "external raw files not found from another folder: exit $rc, expected 2 and the fix"$'\n'"$out"
got=$(HDF5_EXTFILE_PREFIX='${ORIGIN}' timeout 120 "$bin/lockstep-train" --progress none \
      --global-batch 16 --steps 4 --data raw/ext.h5 --model mlp:8 --seed 5 2>&1 |
      grep -E '^test_(loss|accuracy)=')
[[ -n $want && $got == "$want" ]] || fail "HDF5_EXTFILE_PREFIX='\${ORIGIN}' did not find the raw files: '$got'"
# A raw file cut short: HDF5 alone reads its missing rows as zeros.
truncate -s 1600 raw/train.bin
(cd raw && train --data ext.h5 --model mlp:8 && printf '%s\n%s\n' "$rc" "$out") >raw/result
rc=$(head -1 raw/result)
[[ $rc -eq 2 ]] && grep -qF "ext.h5: train/x: its rows 100-191 are stored in the raw data file train.bin up to byte 3072, but it holds 1600 bytes: HDF5 would read the rest as zeros" raw/result ||
  fail "a raw file cut short: exit $rc, expected 2 naming the rows"$'\n'"$(cat raw/result)"
no_stack "$(cat raw/result)" "external storage cut short"
[[ $failures -eq 0 ]] &&
  echo "ok: external raw files: trained as the rows in the file; missing or cut short named (exit 2)"

# --- float16 inputs and targets (numpy's half): widened exactly ---
$py - <<'PY'
import h5py
import numpy as np
rng = np.random.default_rng(4)
for half in (True, False):
    with h5py.File("half.h5" if half else "half_as_f32.h5", "w") as f:
        for split, n in (("train", 96), ("test", 32)):
            x = (rng.standard_normal((n, 4)) * np.array([1e-6, 3e-5, 1.0, 3e3])).astype("f2")
            f[split + "/x"] = x if half else x.astype("f4")
            f[split + "/y"] = rng.integers(0, 3, n).astype("i4")
        f.attrs["num_classes"] = 3
    rng = np.random.default_rng(4)  # the same draws for the float32 copy
# h5py's bool is an HDF5 enum (FALSE 0, TRUE 1 over int8): as inputs and as labels, beside the
# same values stored as int8; an enum over uint8 as inputs, beside its values as int16 (an enum's
# values are not pixels: not scaled by 1/255 as uint8 is).
u8_enum = h5py.enum_dtype({"low": 0, "mid": 1, "high": 2}, basetype="u1")
for kind in ("bools", "bools_as_i8", "enum_u8", "enum_u8_as_i16"):
    rng = np.random.default_rng(5)
    with h5py.File(kind + ".h5", "w") as f:
        for split, n in (("train", 64), ("test", 32)):
            x, y = rng.random((n, 4)) > 0.5, rng.random(n) > 0.5
            if kind.startswith("enum_u8"):
                x = rng.integers(0, 3, (n, 4))
                f.create_dataset(split + "/x", data=x, dtype=u8_enum if kind == "enum_u8" else "i2")
            else:
                f[split + "/x"] = x if kind == "bools" else x.astype("i1")
            f[split + "/y"] = y if kind in ("bools", "enum_u8") else y.astype("i1")
PY
# trains_as FILE COPY WHAT: FILE trains to COPY's figures, read from the file and held in memory.
trains_as() {
  train --data "$2" --model mlp:8 --seed 2
  local want
  want=$(figures "$out")
  for memory in 0 1024; do
    train --data "$1" --model mlp:8 --seed 2 --data-in-memory-mb $memory
    [[ $rc -eq 0 && -n $want && $(figures "$out") == "$want" ]] ||
      fail "$3 (--data-in-memory-mb $memory): '$(figures "$out")', as $2: '$want'"$'\n'"$out"
  done
}
trains_as half.h5 half_as_f32.h5 "float16 inputs (widened to float32 by numpy)"
trains_as bools.h5 bools_as_i8.h5 "bool inputs and labels"
trains_as enum_u8.h5 enum_u8_as_i16.h5 "inputs of an enum over uint8"
inspected=$("$bin/lockstep-data" inspect bools.h5 2>&1)
grep -q "enum of int8 labels, 2 classes" <<<"$inspected" ||
  fail "lockstep-data inspect does not read bool labels as 2 classes: $inspected"
[[ $failures -eq 0 ]] && echo "ok: float16 inputs read as numpy widens them (subnormals included); h5py's bool inputs and labels train as their int8 copy, an enum over uint8 as its int16 copy"

# --- storage never written: a writer stopped early ---
$py - <<'PY'
import h5py
import numpy as np
rng = np.random.default_rng(3)
with h5py.File("stopped.h5", "w") as f:  # 96 of 160 rows written, in chunks of 16
    x = f.create_dataset("train/x", shape=(160, 4), dtype="f4", chunks=(16, 4), compression="gzip")
    x[:96] = rng.random((96, 4), dtype="f4")
    f["train/y"] = rng.integers(0, 3, 160).astype("i4")
    f["test/x"], f["test/y"] = rng.random((32, 4), dtype="f4"), rng.integers(0, 3, 32).astype("i4")
    f.attrs["num_classes"] = 3
with h5py.File("sparse.h5", "w") as f:  # the same, with a fill value of the writer's own
    x = f.create_dataset("train/x", shape=(160, 4), dtype="f4", chunks=(16, 4), fillvalue=0.5)
    x[:96] = rng.random((96, 4), dtype="f4")
    f["train/y"] = rng.integers(0, 3, 160).astype("i4")
    f["test/x"], f["test/y"] = rng.random((32, 4), dtype="f4"), rng.integers(0, 3, 32).astype("i4")
    f.attrs["num_classes"] = 3
with h5py.File("unwritten.h5", "w") as f:  # labels created, never written (contiguous)
    f["train/x"] = rng.random((64, 4), dtype="f4")
    f.create_dataset("train/y", shape=(64,), dtype="i4")
    f["test/x"], f["test/y"] = rng.random((32, 4), dtype="f4"), rng.integers(0, 3, 32).astype("i4")
    f.attrs["num_classes"] = 3
PY
train --data stopped.h5 --model mlp:8
[[ $rc -eq 2 ]] && grep -q "^error: stopped.h5: train/x: 4 of its 10 chunks were never written, the first at rows 96-111 (HDF5 reads.*fillvalue=" <<<"$out" ||
  fail "a chunked dataset written to row 96 of 160: exit $rc, expected 2 naming rows 96-111"$'\n'"$out"
train --data sparse.h5 --model mlp:8
[[ $rc -eq 0 ]] || fail "unwritten chunks with a fill value of the writer's own: exit $rc"$'\n'"$out"
train --data unwritten.h5 --model mlp:8
[[ $rc -eq 2 ]] && grep -q "^error: unwritten.h5: train/y: was never written (HDF5 reads" <<<"$out" ||
  fail "a contiguous dataset never written: exit $rc, expected 2"$'\n'"$out"
[[ $failures -eq 0 ]] && echo "ok: storage never written (a writer stopped early) refused, naming the rows"

[[ $failures -eq 0 ]] && echo "foreign_files_test: all passed"
exit $((failures > 0))
