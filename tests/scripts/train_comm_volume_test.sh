#!/usr/bin/env bash
# megascale-train --comm-volume (no GPU needed): one JSON line with the bytes a rank of the layout sends
# per step by group, matching comm_volume.h's count for tiny-parity at 2 x 2 x 2; a layout that does not
# divide the model exits 2 naming each problem, and so do --pp-coupled with --vpp above 1 and a bad
# --cuda-wait, before anything starts.
# Usage: train_comm_volume_test.sh SOURCE_DIR MEGASCALE_TRAIN
set -uo pipefail
src=$1
train=$2
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
cd "$dir" || exit 1

out=$("$train" --config "$src/configs/train/tiny-parity.yaml" --batch-size 8 --grad-accum 4 --tp 2 --pp 2 --dp 2 \
  --comm-volume) || fail "exit $?: $out"
python3 - "$out" <<'PY' || fail "JSON: $out"
import json, sys
v = json.loads(sys.argv[1])
assert v["layout"] == "tp 2 x pp 2 x dp 2 = 8 ranks", v
# pp 2: one [N/tp, C] bf16 send per micro-batch: N = 8/2 x 256 rows, C = 256, 4 micro-batches.
assert v["pp_bytes"] == 4 * (4 * 256 // 2) * 256 * 2, v
assert v["tp_bytes"] > 0 and v["dp_bytes"] > 0, v
PY
expect_refused "tp 3" "tp: 3: must divide model.n_head (4)" \
  "$train" --config "$src/configs/train/tiny-parity.yaml" --tp 3 --comm-volume
# Flags refused before anything starts.
expect_refused "--pp-coupled with vpp 2" "--pp-coupled needs --pp above 1 and --vpp 1 (got --pp 2 --vpp 2)" \
  "$train" --config "$src/configs/train/tiny-parity.yaml" --pp 2 --vpp 2 --pp-coupled --nproc 2
# (CLI11's own check: its exit status for a value outside the set, 105.)
"$train" --config "$src/configs/train/tiny-parity.yaml" --cuda-wait bogus > /dev/null 2> "$dir/err" &&
  fail "--cuda-wait bogus: accepted"
grep -qF -- "--cuda-wait: bogus not in {auto,spin,yield,block}" "$dir/err" || fail "--cuda-wait: $(cat "$dir/err")"
echo "train_comm_volume_test: ok"
