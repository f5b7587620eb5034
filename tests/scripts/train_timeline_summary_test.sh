#!/usr/bin/env bash
# scripts/train-timeline-summary.py on hand-made trainer timelines: per rank, the mean step span, compute,
# exposed communication by group (the compute stream's, and other streams' while it was idle), overlapped
# (other streams' while it was busy) and the idle rest;
# the job line names the slowest rank; each tp and dp collective's wait for its group's last member;
# bad input exits 2 naming the file.
# Usage: train_timeline_summary_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
tool=$src/scripts/train-timeline-summary.py

# Rank 0 (pid 7): two steps of 10 ms: 6 ms compute, 1 ms tp all-gather and 0.5 ms dp reduce-scatter on
# lane 0 (busy [0, 7.5)), 2 ms pp send on lane 1 inside that, and on lane 3 two dp all-gathers
# [7, 8.5) and [8, 9) (one union [7, 9): 0.5 ms overlapped, 1.5 ms exposed). Rank 1 (pid 8): one step
# of 12 ms, 12 ms compute.
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def x(name, cat, ts, dur, pid, tid):
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid}
r0 = [{"name": "process_name", "ph": "M", "pid": 7, "args": {"name": "rank 0 (tp 0, dp 0, pp 0)"}}]
for s in range(2):
    t = s * 20000.0
    r0 += [x("step", "step", t, 10000, 7, 2), x("matmul qkv fwd", "compute", t, 6000, 7, 0),
           x("tp all-gather", "communication", t + 6000, 1000, 7, 0),
           x("dp reduce-scatter", "communication", t + 7000, 500, 7, 0),
           x("pp send", "communication", t + 1000, 2000, 7, 1),
           x("dp all-gather", "communication", t + 7000, 1500, 7, 3),
           x("dp all-gather", "communication", t + 8000, 1000, 7, 3)]
r1 = [{"name": "process_name", "ph": "M", "pid": 8, "args": {"name": "rank 1 (tp 1, dp 0, pp 0)"}},
      x("step", "step", 0, 12000, 8, 2), x("attention fwd", "compute", 0, 12000, 8, 0)]
for name, ev in (("r0", r0), ("r1", r1)):
    json.dump({"otherData": {"clock": "CLOCK_MONOTONIC"}, "traceEvents": ev}, open(f"{d}/{name}.json", "w"))
PY
out=$(python3 "$tool" "$dir/r0.json" "$dir/r1.json") || fail "exit $?: $out"
python3 - "$out" <<'PY' || fail "summary: $out"
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
r0, r1, job = lines
assert r0["steps"] == 2 and r0["span_ms"] == 10.0 and r0["compute_ms"] == 6.0, r0
assert r0["exposed_comm_ms"] == {"tp": 1.0, "dp": 2.0, "pp": 0.0, "norm": 0.0}, r0
assert r0["exposed_comm_total_ms"] == 3.0 and r0["overlapped_comm_ms"] == 2.5 and r0["idle_ms"] == 1.0, r0
assert r1["steps"] == 1 and r1["span_ms"] == 12.0 and r1["idle_ms"] == 0.0, r1
assert job["job"] and job["ranks"] == 2 and job["slowest_rank"] == "rank 1 (tp 1, dp 0, pp 0)", job
assert job["mean_exposed_comm_total_ms"] == 1.5, job
PY

# Peer wait: ranks 0 and 1 form a TP group. Their first all-gathers start at 1 ms and 2.5 ms (rank 0
# waits 1.5 ms of its 3), their second at 6 ms and 5 ms (rank 1 waits 1 ms of its 1.5); rank 1's dp
# reduce-scatter has no partner traced and counts nothing.
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def x(name, cat, ts, dur, pid, tid=0):
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid}
for pid, tp, evs in ((7, 0, [(1000, 3000), (6000, 500)]), (8, 1, [(2500, 1500), (5000, 1500)])):
    ev = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {tp} (tp {tp}, dp 0, pp 0)"}},
          x("step", "step", 0, 8000, pid, 2)]
    ev += [x("tp all-gather", "communication", ts, dur, pid) for ts, dur in evs]
    if pid == 8:
        ev.append(x("dp reduce-scatter", "communication", 7000, 500, pid))
    json.dump({"traceEvents": ev}, open(f"{d}/w{pid}.json", "w"))
PY
out=$(python3 "$tool" "$dir/w7.json" "$dir/w8.json") || fail "exit $?: $out"
python3 - "$out" <<'PY' || fail "peer wait: $out"
import json, sys
r0, r1, job = [json.loads(l) for l in sys.argv[1].splitlines()]
assert r0["peer_wait_ms"] == {"tp": 1.5, "dp": 0.0}, r0
assert r1["peer_wait_ms"] == {"tp": 1.0, "dp": 0.0}, r1
assert job["peer_wait_ms"] in (r0["peer_wait_ms"], r1["peer_wait_ms"]), job
PY

echo 'nope' > "$dir/bad.json"
expect_refused "not JSON" "bad.json: not JSON" python3 "$tool" "$dir/bad.json"
echo '{"traceEvents":[]}' > "$dir/empty.json"
expect_refused "no steps" "no traced steps" python3 "$tool" "$dir/empty.json"
echo "train_timeline_summary_test: ok"
