#!/usr/bin/env bash
# scripts/train-parallel/bench-table.py on hand-made bench results: a group's expected time is its bytes
# split between all_gather and reduce_scatter (tp: half each at the [N, C] size; dp: 4/6 reduce-scatter,
# 2/6 all-gather at the largest size measured) over the busbw measured for that net, ranks and group size;
# the peer wait is taken out in the second ratio; a shape with no bandwidth says so; a config without
# its numbers and results that are not JSON are refused with exit 2, naming the file.
# Usage: bench_table_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
tool=$src/scripts/train-parallel/bench-table.py

printf 'model:\n  d_model: 512\ntrain:\n  batch_size: 4\n  seq_len: 256\n' > "$dir/config.yaml"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def row(name, layout, net, tp_b, dp_b, exposed, wait=None):
    r = {"name": name, "layout": layout, "net": net, "ranks": 4, "span_ms": 100.0, "tok_s": 1000,
         "exposed_comm_ms": {"tp": exposed[0], "dp": exposed[1], "pp": 0.0, "norm": 0.0},
         "tp_bytes": tp_b, "dp_bytes": dp_b}
    if wait is not None:
        r["peer_wait_ms"] = wait
    return r
rows = [row("one", "1x1x1", "none", 0, 0, (0.0, 0.0)),
        row("a", "2x1x2", "socket", 1e9, 6e8, (600.0, 150.0), {"tp": 0.0, "dp": 50.0}),
        row("b", "2x1x2", "megascale", 1e9, 6e8, (600.0, 150.0))]
open(f"{d}/results.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows))
# socket, 4 ranks in groups of 2: all_gather 1 GB/s at 256 KiB and 4 GB/s at 1 MiB (the tp message,
# [4/2 x 256, 512] bf16 = 512 KiB, lies halfway in log size: 2.5 GB/s); reduce_scatter 2.5 GB/s flat.
bw = [{"net": "socket", "nproc": 4, "group": 2, "collective": c, "size": s, "busbw_gbs": b}
      for c, s, b in (("all_gather", 262144, 1.0), ("all_gather", 1048576, 4.0),
                      ("reduce_scatter", 262144, 2.5), ("reduce_scatter", 1048576, 2.5))]
open(f"{d}/bw.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in bw))
PY
out=$(python3 "$tool" "$dir/results.jsonl" "$dir/bw.jsonl" "$dir/config.yaml" --batch-size 4) || fail "exit $?: $out"
# tp: 5e8 B at 2.5 GB/s twice = 400 ms, 600 / 400 = 1.50. dp (largest size: ag 4, rs 2.5 GB/s):
# 4e8 / 2.5 + 2e8 / 4 = 160 + 50 = 210 ms; 150 / 210 = 0.71; less 50 ms of peer wait: 0.48.
grep -qF "| 2x1x2 | socket | 4 | 100.0 | 1,000 | 1.00x | 600.0 / 150.0 / 0.0 | 600.0 / 400.0 = 1.50 | 150.0 / 210.0 = 0.71; less 50.0 peer wait: 0.48 |" <<< "$out" ||
  fail "socket row: $out"
grep -qF "| 2x1x2 | megascale | 4 | 100.0 | 1,000 | 1.00x | 600.0 / 150.0 / 0.0 | no bandwidth measured | no bandwidth measured |" <<< "$out" ||
  fail "megascale row: $out"
printf 'model:\n  n_layer: 2\n' > "$dir/no-dmodel.yaml"
expect_refused "a config without its numbers" "no-dmodel.yaml: no batch_size (a whole number) in the config" \
  python3 "$tool" "$dir/results.jsonl" "$dir/bw.jsonl" "$dir/no-dmodel.yaml"
echo 'nope' > "$dir/bad.jsonl"
expect_refused "results that are not JSON" "bad.jsonl:" python3 "$tool" "$dir/bad.jsonl" "$dir/bw.jsonl" "$dir/config.yaml"
echo "bench_table_test: ok"
