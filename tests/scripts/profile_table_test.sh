#!/usr/bin/env bash
# scripts/profile-table.py on hand-made `perf report -n -t '|'` text: each line goes to its category
# (CRC, kernel copies / network stack / scheduling / other, memcpy, stripped and other libc, engine,
# wire, NCCL, CUDA, the test program, the rest), idle is left out, cores are samples / (HZ x SECONDS)
# per column, and bad input is refused with exit status 2 and a message naming it.
# Usage: profile_table_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
tool=$src/scripts/profile-table.py

cat > "$dir/a.txt" <<'TXT'
# Samples: 12K of event 'cpu-clock'
#
# Overhead|     Samples|Command  |Shared Object    |Symbol
 10.00% | 200        |msio0          |megascale                |[.] megascale::engine::(anonymous namespace)::avx512_register
 10.00% | 100        |msio1          |megascale                |[.] megascale::engine::crc32c_extend(unsigned int, void const*, unsigned long)
 10.00% | 400        |msio0          |[kernel.kallsyms]        |[k] _copy_to_iter
 10.00% | 200        |msio0          |[kernel.kallsyms]        |[k] udp_sendmsg
 10.00% | 100        |msio0          |[kernel.kallsyms]        |[k] __schedule
 10.00% | 100        |msio0          |[kernel.kallsyms]        |[k] do_syscall_64
 10.00% | 50         |msio0          |[kernel.kallsyms]        |[k] page_fault_oops
 10.00% | 300        |msprogress     |libc.so.6                |[.] __memmove_avx_unaligned_erms
 10.00% | 100        |msprogress     |libc.so.6                |[.] 0x00000000001a19d2
 10.00% | 100        |msprogress     |megascale                |[.] megascale::engine::detail::ConnectionCore::poll_data
 10.00% | 100        |msprogress     |libnccl-net-megascale.so |[.] megascale::wire::UdpWire::transmit_to_threads_locked
 10.00% | 100        |NCCL Progress 1|libnccl.so.2             |[.] ncclProxyProgress
 10.00% | 100        |nccl_check     |libcuda.so.1             |[.] 0x0000000000123456
 10.00% | 100        |nccl_check     |nccl_check               |[.] main
 10.00% | 100        |nccl_check     |nccl_check               |[.] megascale::gpucheck::count_wrong(void const*)
 10.00% | 100        |msprogress     |libc.so.6                |[.] __sched_yield
 10.00% | 100        |python3        |python3.12               |[.] _PyEval_EvalFrameDefault
 10.00% | 9000       |swapper        |[kernel.kallsyms]        |[k] pv_native_safe_halt
 10.00% | 500        |msio0          |[kernel.kallsyms]        |[k] default_idle_call
TXT
cat > "$dir/b.txt" <<'TXT'
 50.00% | 1000       |NCCL SockS 0 0 |[kernel.kallsyms]        |[k] copy_user_enhanced_fast_string
TXT
# a: 100 Hz over 2 s = 200 samples a core; b: 100 Hz over 5 s = 500.
out=$(python3 "$tool" --hz 100 a="$dir/a.txt:2" b="$dir/b.txt:5") || fail "exit $?"
expected="| host cores | a | b |
|---|---:|---:|
| payload CRC32C | 1.50 | 0.00 |
| kernel: copies | 2.00 | 2.00 |
| kernel: network stack | 1.00 | 0.00 |
| kernel: scheduling, syscalls, locks | 1.00 | 0.00 |
| kernel: other | 0.25 | 0.00 |
| user memcpy | 1.50 | 0.00 |
| libc, unresolved | 0.50 | 0.00 |
| libc, other | 0.50 | 0.00 |
| MegaScale engine | 0.50 | 0.00 |
| MegaScale wire and plugin | 0.50 | 0.00 |
| NCCL | 0.50 | 0.00 |
| CUDA | 0.50 | 0.00 |
| nccl_check (inputs and checks) | 1.00 | 0.00 |
| other user space | 0.50 | 0.00 |
| **all but idle** | **11.75** | **2.00** |"
[[ $out == "$expected" ]] || fail "table got:
$out"

echo "# only comments" > "$dir/empty.txt"
expect_refused "a report without samples" "empty.txt: no sample lines" python3 "$tool" --hz 100 x="$dir/empty.txt:1"
expect_refused "a missing report" "nothere.txt: No such file" python3 "$tool" --hz 100 x="$dir/nothere.txt:1"
expect_refused "no seconds" "is not LABEL=REPORT:SECONDS" python3 "$tool" --hz 100 x="$dir/a.txt"
expect_refused "zero seconds" "is not LABEL=REPORT:SECONDS" python3 "$tool" --hz 100 x="$dir/a.txt:0"
expect_refused "no --hz" "usage: profile-table.py --hz HZ" python3 "$tool" x="$dir/a.txt:1"
echo PASS
