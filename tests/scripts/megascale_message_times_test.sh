#!/usr/bin/env bash
# scripts/megascale-message-times.py on hand-made request timelines of two ranks: each send comm is
# paired with the receive comm it feeds, by the connection ids on its track where it has them (not a
# quicker decoy; within one file too), else by timing (not a slower decoy); a message's time runs
# from the later of its two posts to the receive's test()-done, small messages are left out, and the
# figures (median, mean, p90, p99, max, the share in messages over 1 ms, NCCL's post interval) are
# right, and where the timelines have phases, so is where the time went; files from two hosts, ranks
# with nothing to pair and bad files are refused with exit status 2.
# Usage: megascale_message_times_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
times=$src/scripts/megascale-message-times.py

# rank FILE HOST PID COMMS...: each comm is TID:ROLE:NAME:EVENTS with EVENTS "posted/dur/bytes,..." (us).
python3 - "$dir" <<'PY' || fail "making the traces"
import json, sys
d = sys.argv[1]
MiB = 1 << 20
def rank(path, host, pid, comms):
    ev = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": "r"}}]
    for tid, role, name, reqs, *ids in comms:  # ids: (conn, peer_conn[, stripes]), as the plugin writes them
        args = {"name": name}
        if ids:
            args.update(conn=ids[0][0], peer_conn=ids[0][1])
            if len(ids[0]) > 2:
                args.update(stripes=ids[0][2])
        ev.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": args})
        for k, (posted, seen, size, *transfer) in enumerate(reqs):  # transfer: (first, last) segment
            lane = k % 2  # NCCL keeps two in flight: alternate lanes, as the plugin's tracks do
            ev.append({"name": role, "cat": "request", "ph": "X", "pid": pid, "tid": tid + lane, "ts": posted,
                       "dur": seen - posted, "args": {"bytes": size}})
            ev.append({"name": "wait", "cat": "phase", "ph": "X", "pid": pid, "tid": tid + lane, "ts": posted, "dur": 1})
            if transfer:
                ev.append({"name": "transfer", "cat": "phase", "ph": "X", "pid": pid, "tid": tid + lane,
                           "ts": transfer[0], "dur": transfer[1] - transfer[0]})
    json.dump({"displayTimeUnit": "ns", "otherData": {"clock": "CLOCK_MONOTONIC", "host": host, "requests": len(ev)},
               "traceEvents": ev}, open(f"{d}/{path}", "w"))
K = range(10)
# Rank 0 sends at 1000 k; rank 1's receives were posted 50 us before and are done 200 / 300 us after.
send01 = [(1000 * k, 1000 * k + 20, MiB) for k in K] + [(1000 * k + 400, 1000 * k + 401, 8) for k in K]
recv01 = [(1000 * k - 50, 1000 * k + (200 if k % 2 == 0 else 300), MiB) for k in K]
decoy = [(1000 * k - 50, 1000 * k + 5000, MiB) for k in K]
# Rank 1 sends at 1000 k + 500; rank 0's receives are posted later (+600): 100 us, the last 2100.
send10 = [(1000 * k + 500, 1000 * k + 510, MiB) for k in K]
recv10 = [(1000 * k + 600, 1000 * k + 600 + (2100 if k == 9 else 100), MiB) for k in K]
rank("r0.json", "h1", 11, [(100, "send", "send 127.0.0.1:2000 (lo)", send01), (200, "recv", "recv 127.0.0.1:1000 (lo)", recv10)])
rank("r1.json", "h1", 12, [(100, "recv", "recv 127.0.0.1:1001 (lo)", decoy), (200, "recv", "recv 127.0.0.1:1002 (lo)", recv01),
                           (300, "send", "send 127.0.0.1:2001 (lo)", send10)])
rank("other-host.json", "h2", 13, [(100, "recv", "recv x", recv01)])
# With the connection ids: a quicker decoy (done 100 us after each send) that timing would take.
quick = [(1000 * k - 50, 1000 * k + 100, MiB) for k in K]
rank("i0.json", "h1", 21, [(100, "send", "send a", send01, ("000000000000000a", "000000000000000b")),
                           (200, "recv", "recv c", recv10, ("000000000000000c", "000000000000000d"))])
rank("i1.json", "h1", 22, [(100, "recv", "recv quick", quick, ("00000000000000ff", "00000000000000fe")),
                           (200, "recv", "recv b", recv01, ("000000000000000b", "000000000000000a")),
                           (300, "send", "send d", send10, ("000000000000000d", "000000000000000c"))])
# One process's own pair (the conformance harness's kind): by id, within one file.
rank("self.json", "h1", 23, [(100, "send", "send s", send01, ("0000000000000001", "0000000000000002")),
                             (200, "recv", "recv s", recv01, ("0000000000000002", "0000000000000001"))])
# With phases, as the plugin writes them: a 150 us message (its send's first segment 20 us after the
# receive's post, 20 us on the way, 100 us of bytes, 10 to test()) and a 1,110 us one (800 us before the
# send's first segment); a send whose first segment precedes the receive's post counts 0 before it.
ph_send = [(0, 40, MiB, 30, 140), (1000, 1900, MiB, 1800, 1890), (3000, 3100, MiB, 2990, 3080)]
ph_recv = [(10, 160, MiB, 50, 150), (1000, 2110, MiB, 1820, 2100), (3000, 3100, MiB, 3010, 3090)]
rank("p0.json", "h1", 31, [(100, "send", "send p", ph_send, ("0000000000000005", "0000000000000006"))])
rank("p1.json", "h1", 32, [(100, "recv", "recv p", ph_recv, ("0000000000000006", "0000000000000005"))])
# Over 4 stripes the plugin records stripe 0's part of each message: 256 KiB parts of 1 MiB messages
# count as messages there, and an 8 KiB part (a small message) still does not.
st_send = [(1000 * k, 1000 * k + 20, MiB // 4) for k in K] + [(1000 * k + 400, 1000 * k + 401, 8192) for k in K]
st_recv = [(1000 * k - 50, 1000 * k + 200, MiB // 4) for k in K]
rank("s0.json", "h1", 41, [(100, "send", "send st", st_send, ("0000000000000007", "0000000000000008", 4))])
rank("s1.json", "h1", 42, [(100, "recv", "recv st", st_recv, ("0000000000000008", "0000000000000007", 4))])
rank("s0-one.json", "h1", 43, [(100, "send", "send st", st_send, ("0000000000000007", "0000000000000008", 1))])
rank("s1-one.json", "h1", 44, [(100, "recv", "recv st", st_recv, ("0000000000000008", "0000000000000007", 1))])
rank("sends-only.json", "h1", 14, [(100, "send", "send y", send01), (200, "recv", "recv z", recv01)])  # one rank: none to pair with
PY

out=$(python3 "$times" "$dir/r0.json" "$dir/r1.json") || fail "exit $? on good input: $out"
expected="2 connections (paired by timing), 20 messages: median 200 us, mean 275, p90 300, p99 2,100, max 2,100; 38% of the time in 1 messages over 1 ms; NCCL posted a connection's sends 1,000 us apart by median
- rank 0 send 127.0.0.1:2000 (lo) -> rank 1 recv 127.0.0.1:1002 (lo): 10 messages: median 250 us, mean 250, p90 300, p99 300, max 300; 0% of the time in 0 messages over 1 ms
- rank 1 send 127.0.0.1:2001 (lo) -> rank 0 recv 127.0.0.1:1000 (lo): 10 messages: median 100 us, mean 300, p90 2,100, p99 2,100, max 2,100; 70% of the time in 1 messages over 1 ms"
[[ $out == "$expected" ]] || fail "got:
$out"
# With ids the pairs are the true ones, though the decoy is quicker; by timing alone it would be taken.
out=$(python3 "$times" "$dir/i0.json" "$dir/i1.json") || fail "exit $? with ids: $out"
[[ $out == "2 connections (paired by connection id), 20 messages: median 200 us, mean 275,"* &&
   $out == *"- rank 0 send a -> rank 1 recv b: 10 messages: median 250 us,"* &&
   $out == *"- rank 1 send d -> rank 0 recv c: 10 messages: median 100 us, mean 300,"* ]] || fail "with ids: got:
$out"
out=$(python3 "$times" "$dir/self.json") || fail "exit $? on one process's own pair: $out"
[[ $out == "1 connections (paired by connection id), 10 messages: median 250 us,"* ]] || fail "one file: got: $out"
out=$(python3 "$times" "$dir/s0.json" "$dir/s1.json") || fail "exit $? with stripes: $out"
[[ $out == "1 connections (paired by connection id), 10 messages: median 200 us,"* ]] || fail "stripes: got: $out"
# The same parts on a comm of one stripe are smaller than a message: none is paired.
python3 "$times" "$dir/s0-one.json" "$dir/s1-one.json" > /dev/null 2>&1
(( $? == 2 )) || fail "256 KiB requests of one stripe were taken as messages"
# --min-bytes 1 takes the 8-byte sends in: rank 0's comm then has 20 sends against 10 receives, no pair.
out=$(python3 "$times" --min-bytes 1 "$dir/r0.json" "$dir/r1.json") || fail "--min-bytes 1: exit $?"
[[ $out == "1 connections (paired by timing), "* ]] || fail "--min-bytes 1: got: $out"

# Parts per message: (20, 20, 100, 10), (800, 20, 280, 10), (0, 10, 80, 10); means (273, 17, 153, 10).
out=$(python3 "$times" "$dir/p0.json" "$dir/p1.json") || fail "exit $? with phases: $out"
[[ $(sed -n 2p <<< "$out") == "where it went, means in us: to the send's first segment 273, its trip 17, the rest of the bytes 153, to test() 10; in the 1 messages over 1 ms: to the send's first segment 800, its trip 20, the rest of the bytes 280, to test() 10" ]] ||
  fail "with phases: got:
$out"
# Without phases (the traces above) there is no such line.
[[ $(python3 "$times" "$dir/i0.json" "$dir/i1.json") != *"where it went"* ]] || fail "a where-it-went line without phases"

expect_refused "two hosts" "2 hosts (h1, h2)" python3 "$times" "$dir/r0.json" "$dir/other-host.json"
expect_refused "nothing to pair" "no send comm paired" python3 "$times" "$dir/sends-only.json"
echo 'not json' > "$dir/bad.json"
expect_refused "not JSON" "bad.json: not JSON" python3 "$times" "$dir/r0.json" "$dir/bad.json"
echo '{"traceEvents":[]}' > "$dir/foreign.json"
expect_refused "foreign trace" "foreign.json: not a MegaScale request timeline" python3 "$times" "$dir/foreign.json"
echo "megascale_message_times_test: ok"
