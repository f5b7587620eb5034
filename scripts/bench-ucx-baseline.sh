#!/usr/bin/env bash
# megascale's transport against UCX on loopback, round by round: for each size of SIZES (default 64K
# 256K 1M 4M 16M 64M), ROUNDS (default 5) runs of `megascale perf --loopback --test bw --baseline ucx`
# moving BYTES (default 2 GB) a row, each run one megascale row then the same row over UCX. Prints per
# size the median of each column and of the per-round ratio (megascale / UCX), and the rounds as JSON
# lines in OUT (default out/bench-ucx-baseline/rounds.jsonl). PERF_ARGS adds perf flags to megascale's
# rows (e.g. "--segment 60000"); UCX's rows are the same whatever they say.
#
#   scripts/bench-ucx-baseline.sh [MEGASCALE]      # default build/cli/megascale
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
megascale=${1:-build/cli/megascale}
sizes=${SIZES:-64K 256K 1M 4M 16M 64M}
rounds=${ROUNDS:-5}
bytes=${BYTES:-2000000000}
out=${OUT:-out/bench-ucx-baseline}
read -r -a extra <<< "${PERF_ARGS:-}"
[[ -x $megascale ]] || { echo "no megascale at $megascale (build it first)"; exit 2; }
mkdir -p "$out"
: > "$out/rounds.jsonl"
for ((r = 1; r <= rounds; r++)); do
  for s in $sizes; do
    size=$(numfmt --from=iec "$s")
    n=$(( bytes / size ))
    (( n < 16 )) && n=16
    if ! "$megascale" perf --loopback --test bw -s "$s" -n "$n" "${extra[@]}" --baseline ucx --json "$out/run.json" \
      > /dev/null 2> "$out/err"; then
      echo "round $r, $s: failed: $(tail -2 "$out/err")"
      exit 1
    fi
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); row=d["baseline"]["rows"][0]; row["round"]=int(sys.argv[2]); row["transports"]=d["baseline"]["transports"]; print(json.dumps(row))' \
      "$out/run.json" "$r" >> "$out/rounds.jsonl"
  done
done
python3 - "$out/rounds.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["size_bytes"], []).append(r)
print(f"{'size':>10} {'rounds':>6} {'megascale Gb/s':>15} {'ucx Gb/s':>9} {'ratio (median)':>15} {'min':>5} {'max':>5}  ucx over")
for size in sorted(by):
    rs = by[size]
    m = statistics.median(r["megascale_bw_average_gbps"] for r in rs)
    u = statistics.median(r["ucx_bw_average_gbps"] for r in rs)
    ratios = [r["ratio"] for r in rs]
    print(f"{size:>10} {len(rs):>6} {m:>15.2f} {u:>9.2f} {statistics.median(ratios):>15.2f} {min(ratios):>5.2f} {max(ratios):>5.2f}  {rs[0]['transports']}")
PY
