#!/usr/bin/env bash
# scripts/nccl-bandwidth-table.py on hand-made nccl_check CSVs of two rounds: medians per net, MegaScale's
# ratios paired round by round, the verdict against the goal, the latency table (--metric time), the goal
# as a time per message on the Null net's curve (--variants), and clear errors for bad input.
# Usage: nccl_bandwidth_table_test.sh SOURCE_DIR
set -uo pipefail
table=$1/scripts/nccl-bandwidth-table.py
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

header=op,type,size_bytes,count,time_us,algbw_gbps,busbw_gbps,wrong
csv() {  # FILE ALLREDUCE_BUSBW ALLGATHER_BUSBW [ALLREDUCE_TIME_US]
  printf '%s\nAllReduce,float,1073741824,268435456,%s,1,%s,0\nAllGather,float,1073741824,268435456,1,1,%s,0\n' \
    "$header" "${4:-1}" "$2" "$3" > "$dir/$1"
}
csv m1.csv 6.00 4.00
csv m2.csv 5.00 4.50
csv s1.csv 3.00 2.00
csv s2.csv 2.00 3.00
csv t1.csv 4.00 4.00
csv t2.csv 2.50 3.00

out=$(python3 "$table" --ranks 2 --goal 1.5 megascale="$dir/m1.csv,$dir/m2.csv" socket="$dir/s1.csv,$dir/s2.csv" \
  socket-4x4="$dir/t1.csv,$dir/t2.csv") || fail "exit $? on good input"
echo "$out"
# Medians 5.50 / 2.50 / 3.25; ratios to Socket 2.00 and 2.50, to Socket 4x4 1.50 and 2.00.
grep -qF '| AllReduce | 1073741824 | 5.50 | 2.50 | 3.25 | 2.25 (2.00-2.50) | 1.75 (1.50-2.00) |' <<< "$out" ||
  fail "AllReduce row"
# Ratios to Socket 4x4: 1.00 and 1.50.
grep -qF '| AllGather | 1073741824 | 4.25 | 2.50 | 3.50 | 1.75 (1.50-2.00) | 1.25 (1.00-1.50) |' <<< "$out" ||
  fail "AllGather row"
grep -qF -- '- AllReduce: 1.50-2.00x (median 1.75); reaches 1.5x in all 2 pairs' <<< "$out" || fail "AllReduce verdict"
grep -qF -- '- AllGather: 1.00-1.50x (median 1.25); below 1.5x in 1 of 2 pairs' <<< "$out" || fail "AllGather verdict"
# Without --goal the table's goal is 1.5.
out=$(python3 "$table" --ranks 2 megascale="$dir/m1.csv,$dir/m2.csv" socket-4x4="$dir/t1.csv,$dir/t2.csv") ||
  fail "exit $? without --goal"
grep -qF -- '- AllGather: 1.00-1.50x (median 1.25); below 1.5x in 1 of 2 pairs' <<< "$out" || fail "default goal"

# Latency: microseconds per collective, ratios of MegaScale's time over Socket's, no goal.
csv m1.csv 1 1 60
csv m2.csv 1 1 90
csv s1.csv 1 1 20
csv s2.csv 1 1 30
csv t1.csv 1 1 15
csv t2.csv 1 1 45
out=$(python3 "$table" --metric time --ranks 2 megascale="$dir/m1.csv,$dir/m2.csv" socket="$dir/s1.csv,$dir/s2.csv" \
  socket-4x4="$dir/t1.csv,$dir/t2.csv") || fail "exit $? on good latency input"
echo "$out"
grep -qF '# Time per collective (us), 2 ranks' <<< "$out" || fail "latency title"
# Medians 75 / 25 / 30; MegaScale over Socket 3.00 both rounds, over Socket 4x4 4.00 and 2.00.
grep -qF '| AllReduce | 1073741824 | 75.00 | 25.00 | 30.00 | 3.00 (3.00-3.00) | 3.00 (2.00-4.00) |' <<< "$out" ||
  fail "AllReduce latency row"
grep -qF -- '- AllReduce: 2.00-4.00x (median 3.00)' <<< "$out" || fail "AllReduce latency summary"
grep -q 'goal\|pairs' <<< "$out" && fail "a goal verdict in the latency table"

# Bad input: an unknown net, a missing file, a file that is not an nccl_check CSV. Each exits non-zero
# with a message that names the problem.
expect_error() {  # PATTERN ARGS...
  local pattern=$1 err
  shift
  err=$(python3 "$table" --ranks 2 "$@" 2>&1 >/dev/null) && fail "exit 0 for: $*"
  grep -qF -- "$pattern" <<< "$err" || fail "for '$*' expected '$pattern', got: $err"
}
expect_error "'tcp=$dir/m1.csv': expected NET=CSV" megascale="$dir/m1.csv" tcp="$dir/m1.csv"
expect_error "$dir/none.csv: No such file" megascale="$dir/none.csv"
echo "a,b" > "$dir/bad.csv"
expect_error "$dir/bad.csv: not an nccl_check CSV" megascale="$dir/bad.csv"
expect_error "no megascale=" socket="$dir/s1.csv"
printf '%s\nAllReduce,float,8,2,n/a,1,1,0\n' "$header" > "$dir/nan.csv"
expect_error "$dir/nan.csv:2: time_us is 'n/a', not a number" --metric time megascale="$dir/nan.csv"
expect_error "invalid choice: 'lat'" --metric lat megascale="$dir/m1.csv"

# --variants: free names, each against the first, paired round by round.
csv m1.csv 6.00 4.00
csv m2.csv 5.00 4.50
csv s1.csv 7.50 4.00
csv s2.csv 5.00 3.60
out=$(python3 "$table" --variants --ranks 4 default="$dir/m1.csv,$dir/m2.csv" 2x3="$dir/s1.csv,$dir/s2.csv") ||
  fail "--variants: exit $? on good input"
echo "$out"
# Medians 5.50 / 6.25; 2x3 over default 1.25 and 1.00.
grep -qF '| AllReduce | 1073741824 | 5.50 | 6.25 | 1.12 (1.00-1.25) |' <<< "$out" || fail "--variants AllReduce row"
# All-gather: 1.00 and 0.80; over both collectives 0.80-1.25, median 1.00.
grep -qF -- '- 2x3: 0.80-1.25x (median 1.00)' <<< "$out" || fail "--variants summary"
grep -q 'pairs' <<< "$out" && fail "--variants: a goal verdict without --goal"
# With --goal, per collective: all-reduce 1.25 and 1.00 (below 1.2 in 1 of 2), all-gather 1.00 and 0.80.
out=$(python3 "$table" --variants --goal 1.2 --ranks 4 default="$dir/m1.csv,$dir/m2.csv" 2x3="$dir/s1.csv,$dir/s2.csv") ||
  fail "--variants --goal: exit $? on good input"
grep -qF -- '  - AllReduce: 1.00-1.25x (median 1.12); below 1.2x in 1 of 2 pairs' <<< "$out" ||
  fail "--variants --goal AllReduce line: $out"
grep -qF -- '  - AllGather: 0.80-1.00x (median 0.90); below 1.2x in 2 of 2 pairs' <<< "$out" ||
  fail "--variants --goal AllGather line: $out"
out=$(python3 "$table" --variants --goal 0.8 --ranks 4 default="$dir/m1.csv,$dir/m2.csv" 2x3="$dir/s1.csv,$dir/s2.csv")
grep -qF -- '  - AllGather: 0.80-1.00x (median 0.90); reaches 0.8x in all 2 pairs' <<< "$out" ||
  fail "--variants --goal 0.8 AllGather line: $out"
grep -q 'goal in message time' <<< "$out" && fail "--variants: the goal in message time without Null net variants"
# The goal in message time, on the Null net's curve (0, 100, 200 us: all-reduce 12, 8 and 4 GB/s,
# all-gather 12, 8, 4): 1.5 x 4 = 6 GB/s lies a third of the way from 1/8 to 1/4, at 133 us; 1.5 x 2 = 3
# is below the curve's last point, 1.5 x 10 = 15 above its first.
csv ref.csv 4.00 2.00
csv ref-hi.csv 4.00 10.00
csv n0.csv 12.00 12.00
csv n100.csv 8.00 8.00
csv n200.csv 4.00 4.00
out=$(python3 "$table" --variants --goal 1.5 --ranks 4 socket-4x4="$dir/ref.csv" null="$dir/n0.csv" \
  null-r200="$dir/n200.csv" null-r100="$dir/n100.csv") || fail "--variants with the Null net's curve: exit $?"
grep -qF 'The goal in message time: 1.5x socket-4x4 (median over sizes) on the Null net'"'"'s curve (null, null-r100, null-r200:' <<< "$out" ||
  fail "goal in message time: title: $out"
grep -qF -- '- AllReduce: 6.00 GB/s, about 133 us a message' <<< "$out" || fail "goal in message time: AllReduce: $out"
grep -qF -- '- AllGather: 3.00 GB/s, below the curve'"'"'s last point (4.00 GB/s at 200 us): beyond 200 us, where the curve was not measured' <<< "$out" ||
  fail "goal in message time: below the curve: $out"
out=$(python3 "$table" --variants --goal 1.5 --ranks 4 socket-4x4="$dir/ref-hi.csv" null="$dir/n0.csv" \
  null-r100="$dir/n100.csv")
grep -qF -- '- AllGather: 15.00 GB/s, above the curve'"'"'s first point (12.00 GB/s at 0 us): no message time' <<< "$out" ||
  fail "goal in message time: above the curve: $out"
# The same for the Null net on GPU buffers (null-gdr, null-gdr-rN): its own curve, under its own title,
# beside the host-buffer one (30 and 10 GB/s at 0 and 200 us): all-gather's 1.5 x 10 = 15 GB/s lies half
# way from 1/30 to 1/10 in 1 / bandwidth, at 100 us.
csv g0.csv 30.00 30.00
csv g200.csv 10.00 10.00
out=$(python3 "$table" --variants --goal 1.5 --ranks 4 socket-4x4="$dir/ref-hi.csv" null="$dir/n0.csv" \
  null-r100="$dir/n100.csv" null-gdr="$dir/g0.csv" null-gdr-r200="$dir/g200.csv") ||
  fail "--variants with both curves: exit $?"
grep -qF 'on the Null net'"'"'s curve (null, null-r100:' <<< "$out" || fail "both curves: host title: $out"
grep -qF 'on the Null net'"'"'s curve with GPU buffers (null-gdr, null-gdr-r200:' <<< "$out" ||
  fail "both curves: GPU title: $out"
grep -qF -- '- AllGather: 15.00 GB/s, about 100 us a message' <<< "$out" || fail "GPU curve: AllGather: $out"
expect_error "--variants needs two or more" --variants default="$dir/m1.csv"
expect_error "'2x3' given twice" --variants 2x3="$dir/m1.csv" 2x3="$dir/s1.csv"
expect_error "'2x3' has 1 rounds, 'default' 2" --variants default="$dir/m1.csv,$dir/m2.csv" 2x3="$dir/s1.csv"
expect_error "'=x.csv': expected NAME=CSV" --variants default="$dir/m1.csv" =x.csv
echo "PASS"
