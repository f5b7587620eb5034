#!/usr/bin/env bash
# scripts/thread-cpu.py: `watch` on a live process tree (a spinning thread named like the plugin's I/O
# threads, a sleeping one named like its wire thread, and a spinning grandchild named like NCCL's proxy
# thread: each must show what it used), `watch --start-after` (what ran before the log line is left
# out), `table` on hand-made watch files (medians per label, per rank, by group; whole-run windows
# named; each file's steal when any had some), and bad input refused with exit status 2 and a message
# naming it.
# Usage: thread_cpu_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
tool=$src/scripts/thread-cpu.py

cat > "$dir/tree.py" <<'PY'
import subprocess, sys, threading, time
def name(n):
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write(n)
def spin(n, seconds):  # seconds of the thread's own CPU time, so a loaded host cannot starve the check
    name(n)
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
def rest(n, seconds):
    name(n)
    time.sleep(seconds)
if sys.argv[1:] == ["child"]:
    time.sleep(0.5)  # started before the first sample, spinning only after it
    spin("NCCL Progress 0", 0.8)
    sys.exit(0)
child = subprocess.Popen([sys.executable, __file__, "child"])
threads = [threading.Thread(target=spin, args=("msio0", 1.2)), threading.Thread(target=rest, args=("msprogress", 1.2))]
for t in threads: t.start()
for t in threads: t.join()
child.wait()
PY
python3 "$dir/tree.py" &
pid=$!
python3 "$tool" watch "$dir/live.json" "$pid" || fail "watch: exit $?"
python3 - "$dir/live.json" <<'PY' || fail "live watch file: $(cat "$dir/live.json")"
import json, sys
run = json.load(open(sys.argv[1]))
cpu = {}
for t in run["threads"]:
    cpu[t["name"]] = cpu.get(t["name"], 0) + t["cpu_s"]
# Loose bounds: ctest runs other tests beside this one on two CPUs.
assert cpu.get("msio0", 0) >= 0.4, ("spinning thread", cpu)
assert cpu.get("NCCL Progress 0", 0) >= 0.3, ("spinning grandchild", cpu)
assert cpu.get("msprogress", 1) < 0.15, ("sleeping thread", cpu)
assert 1.0 <= run["wall_s"] < 50, run["wall_s"]  # 1.2 CPU-s of spinning; a 2-core host under 4x load took 10 s
assert run["host_cores"]["busy"] > 0, run["host_cores"]
PY

# --start-after: a thread that spins and ends before the log line is left out; threads that spin after
# it are counted, from then on.
cat > "$dir/late.py" <<'PY'
import sys, threading, time
def spin(n, seconds):
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write(n)
    end = time.thread_time() + seconds  # CPU time: a loaded host cannot starve the check
    while time.thread_time() < end:
        pass
early = threading.Thread(target=spin, args=("msio9", 0.8))
early.start(); early.join()
with open(sys.argv[1], "a") as log:
    log.write("noise\nNCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 - Init COMPLETE\n")
late = threading.Thread(target=spin, args=("msio0", 1.0))
late.start(); late.join()
PY
python3 "$dir/late.py" "$dir/rank0.log" &
pid=$!
python3 "$tool" watch --start-after "$dir/rank0.log" "Init COMPLETE" "$dir/late.json" "$pid" || fail "watch --start-after: exit $?"
python3 - "$dir/late.json" "$dir/rank0.log" <<'PY' || fail "--start-after watch file: $(cat "$dir/late.json")"
import json, sys
run = json.load(open(sys.argv[1]))
cpu = {t["name"]: t["cpu_s"] for t in run["threads"]}
assert "msio9" not in cpu, ("a thread that ended before the window", cpu)
assert cpu.get("msio0", 0) >= 0.4, ("spinning in the window", cpu)
assert run["window"] == f"after 'Init COMPLETE' in {sys.argv[2]}", run["window"]
assert 0.6 <= run["wall_s"] < 5, run["wall_s"]
PY

watchfile() {  # FILE WALL BUSY SOFTIRQ STEAL NAME=CPU_S...
  local f=$1 wall=$2 busy=$3 soft=$4 steal=$5 threads="" t
  shift 5
  for t in "$@"; do threads+="${threads:+,}{\"pid\":1,\"tid\":${#threads},\"name\":\"${t%=*}\",\"cpu_s\":${t##*=}}"; done
  printf '{"window":"after x","wall_s":%s,"host_cpus":16,"host_cores":{"busy":%s,"softirq":%s,"steal":%s},"threads":[%s]}\n' \
    "$wall" "$busy" "$soft" "$steal" "$threads" > "$dir/$f"
}
# MegaScale, three rounds of 2 ranks: medians per rank of (msprogress 4/2/6 s, msio 12/8/16 s, ...) over 10 s;
# steal 0.5/0/1.5 host cores: median 0.5, 0.25 a rank.
watchfile ms1 10 12 2 0.5 msprogress=4 msio0=6 msio1=6 "NCCL Progress  0=2" nccl_check=1
watchfile ms2 10 8 1 0 msprogress=2 msio0=4 msio1=4 "NCCL Progress  0=1" nccl_check=1
watchfile ms3 10 16 3 1.5 msprogress=6 msio0=8 msio1=8 "NCCL Progress  0=3" nccl_check=1
watchfile s1 20 10 4 0 "NCCL SockS 0 0 0=20" "NCCL SockR 0 0 0=20" "NCCL Progress  0=10" "NCCL Service  0=2" cuda-EvtHandlr=2
out=$(python3 "$tool" table --ranks 2 megascale="$dir/ms1,$dir/ms2,$dir/ms3" socket="$dir/s1") ||
  fail "table: exit $?"
expected="| cores per rank | megascale | socket |
|---|---:|---:|
| host busy (all processes, kernel included) | 6.00 | 5.00 |
| of which softirq | 1.00 | 2.00 |
| of which steal (the hypervisor ran other guests) | 0.25 | 0.00 |
| MegaScale wire thread | 0.20 | 0.00 |
| MegaScale I/O threads | 0.60 | 0.00 |
| NCCL proxy progress | 0.10 | 0.25 |
| Socket helper threads | 0.00 | 1.00 |
| other NCCL threads | 0.00 | 0.05 |
| rank's other threads | 0.05 | 0.05 |

Steal in each file, in host CPUs (a hypervisor running other guests): megascale 0.50 / 0.00 / 1.50; socket 0.00"
[[ $out == "$expected" ]] || fail "table got:
$out"
# Without steal in any file, no steal line.
python3 "$tool" table socket="$dir/s1" | grep -q "Steal in each file" && fail "a steal line without steal"
# A file whose window was the whole run is named under the table.
python3 "$tool" table x="$dir/live.json" | tail -1 | grep -qF "Start-up included (the window's text never showed) in: $dir/live.json" ||
  fail "no note for a whole-run window: $(python3 "$tool" table x="$dir/live.json")"

echo '{"wall_s": 3' > "$dir/broken"
expect_refused "a broken file" "broken: not a thread-cpu.py watch file" python3 "$tool" table x="$dir/broken"
expect_refused "a missing file" "nothere: not a thread-cpu.py watch file" python3 "$tool" table x="$dir/nothere"
expect_refused "no LABEL=" "is not LABEL=FILE" python3 "$tool" table "$dir/ms1"
expect_refused "bad --ranks" "--ranks needs a whole number" python3 "$tool" table --ranks 0 x="$dir/ms1"
expect_refused "a PID that is not a number" "PIDs are numbers" python3 "$tool" watch "$dir/w.json" abc
expect_refused "--start-after without TEXT" "--start-after needs LOG and a TEXT" python3 "$tool" watch --start-after "$dir/rank0.log"
expect_refused "no command" "the first argument is watch or table" python3 "$tool" count
echo PASS
