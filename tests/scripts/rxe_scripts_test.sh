#!/usr/bin/env bash
# The Soft-RoCE guest machinery checked without booting a guest: the commands-file reader
# (scripts/rxe/lib.sh) and its refusals, scripts/rxe/results.sh on canned console logs (passes, a
# failed and a killed command, a guest that never got rxe0 ready, names that are prefixes of others,
# serial \r\n line ends), scripts/test-rxe.sh's argument refusals, --list and skips (no QEMU, no
# kernel package), scripts/rxe/build-initramfs.sh on a fake kernel tree (modules in dependency order,
# the programs' libraries, the rxe provider, a --lib object), and the shell lint over scripts/rxe/, which
# tests/scripts/shellcheck_test.sh does not reach.
# Usage: rxe_scripts_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=../../scripts/rxe/lib.sh
source "$src/scripts/rxe/lib.sh"
results=$src/scripts/rxe/results.sh

# --- the commands-file reader
cat >"$dir/good.cmds" <<'EOF'
# a comment, then a blank line

devinfo ibv_devinfo -d "$RXE_DEV"
  rc-server& ibv_rc_pingpong -g "$RXE_GID"
rc-client@2 rxe-retry 60 ibv_rc_pingpong -g "$RXE_GID" "$RXE_PEER"
ud.server@2&   ibv_ud_pingpong
EOF
mkdir "$dir/c2"
rxe_parse_commands "$dir/good.cmds" 2 "$dir/c2" || fail "good commands file refused"
printf 'devinfo\t0\tibv_devinfo -d "$RXE_DEV"\nrc-server\t1\tibv_rc_pingpong -g "$RXE_GID"\n' >"$dir/want-1"
printf 'rc-client\t0\trxe-retry 60 ibv_rc_pingpong -g "$RXE_GID" "$RXE_PEER"\nud.server\t1\tibv_ud_pingpong\n' >"$dir/want-2"
cmp -s "$dir/c2/commands-1" "$dir/want-1" || fail "guest 1 commands: $(cat -A "$dir/c2/commands-1")"
cmp -s "$dir/c2/commands-2" "$dir/want-2" || fail "guest 2 commands: $(cat -A "$dir/c2/commands-2")"

# refused FILE_TEXT GUESTS MESSAGE: the reader returns 2 and says MESSAGE.
refused() {
  printf '%s\n' "$1" >"$dir/bad.cmds"
  mkdir -p "$dir/bad"
  rxe_parse_commands "$dir/bad.cmds" "$2" "$dir/bad" 2>"$dir/err"
  (($? == 2)) || fail "commands '$1': not refused"
  grep -qF -- "$3" "$dir/err" || fail "commands '$1': message: $(cat "$dir/err")"
}
refused 'a/b ls' 1 "bad.cmds:1: bad command name 'a/b'"
refused 'x@3 ls' 2 "bad.cmds:1: x: bad guest '@3'"
refused 'x@2 ls' 1 "x runs on guest 2, but this run boots 1 guest(s)"
refused 'lonely' 1 "bad.cmds:1: lonely: no command after the name"
refused $'a ls\nb ls\na true' 1 "bad.cmds:3: a: a second command of that name on guest 1"
refused '# only a comment' 1 "no commands"
refused $'t ls\tx' 1 "t: tab in the command"
mkdir -p "$dir/none"
rxe_parse_commands "$dir/missing.cmds" 1 "$dir/none" 2>"$dir/err"
(($? == 2)) && grep -qF "cannot be read" "$dir/err" || fail "a missing commands file: $(cat "$dir/err")"

# --- results.sh on canned consoles of two guests
mkdir "$dir/run"
cp "$dir/c2"/commands-* "$dir/run/"
printf '%s\r\n' '[    3.1] rdma_rxe: loaded' 'RXE-READY guest=1 uptime=5.03 gid=1 self=10.58.0.1 peer=10.58.0.2' \
  'devinfo| hca_id: rxe0' 'RXE-RESULT name=devinfo status=0 seconds=0.15' \
  'rc-server| 8192 bytes in 0.01 seconds' 'RXE-RESULT name=rc-server status=0 seconds=1.86' \
  'RXE-COUNTERS guest=1 duplicate_request=3 sent_pkts=410' 'RXE-DONE guest=1 uptime=9.00' \
  >"$dir/run/console-1.log"
# Guest 2: rc-client failed; ud.server has no result line (the guest was killed first).
printf '%s\n' 'RXE-READY guest=2 uptime=6.10 gid=1 self=10.58.0.2 peer=10.58.0.1' \
  'rc-client| Failed to modify QP to RTR' 'rc-client| rxe-retry: exit status 1; trying again' \
  'RXE-RESULT name=rc-client status=1 seconds=60.31' 'ud.server| listening' >"$dir/run/console-2.log"
out=$("$results" "$dir/run" "$dir/run" "$dir/out")
rc=$?
echo "$out"
((rc == 1)) || fail "results.sh: exit $rc with a failed command, want 1"
grep -qx '2 passed, 2 failed' <<<"$out" || fail "results.sh: the count line"
grep -qx 'guest 1: rxe0 ready 5.03 s after boot' <<<"$out" || fail "guest 1's ready line"
grep -qx 'pass rc-server (guest 1): 1.86 s' <<<"$out" || fail "rc-server's pass line"
grep -qx 'guest 1: rxe0 counters: duplicate_request=3 sent_pkts=410' <<<"$out" || fail "guest 1's counters"
grep -qx 'FAIL rc-client (guest 2): exit status 1 after 60.31 s; last lines:' <<<"$out" || fail "rc-client's line"
grep -qF '    Failed to modify QP to RTR' <<<"$out" || fail "rc-client's output under its line"
grep -qx 'FAIL ud.server (guest 2): no result line (the guest stopped or was stopped first)' <<<"$out" ||
  fail "ud.server's line"
[ "$(cat "$dir/out/devinfo.log")" = 'hca_id: rxe0' ] || fail "devinfo.log: $(cat -A "$dir/out/devinfo.log")"
[ "$(cat "$dir/out/ud.server.log")" = 'listening' ] || fail "ud.server.log"

# All passed; one name a suffix of another (client, rc-client): outputs and results kept apart.
mkdir "$dir/ok"
printf 'client\t0\tx\nrc-client\t0\ty\n' >"$dir/ok/commands-1"
printf '%s\n' 'RXE-READY guest=1 uptime=4.00' 'rc-client| from rc-client' 'client| from client' \
  'RXE-RESULT name=rc-client status=0 seconds=2.00' 'RXE-RESULT name=client status=0 seconds=1.00' \
  >"$dir/ok/console-1.log"
out=$("$results" "$dir/ok" "$dir/ok") || fail "results.sh: all passed, exit $?: $out"
grep -qx '2 passed, 0 failed' <<<"$out" || fail "all passed: count line: $out"
grep -qx 'pass client (guest 1): 1.00 s' <<<"$out" || fail "client's line: $out"
[ "$(cat "$dir/ok/client.log")" = 'from client' ] || fail "client.log: $(cat "$dir/ok/client.log")"

# A guest that never got rxe0 ready: its reason, and every command failed; a killed command.
mkdir "$dir/boot"
printf 'a\t0\tx\nb\t0\ty\n' >"$dir/boot/commands-1"
printf '%s\n' 'RXE-BOOT-FAILED guest=1 reason=insmod rdma_rxe' >"$dir/boot/console-1.log"
out=$("$results" "$dir/boot" "$dir/boot") && fail "results.sh passed a guest that never booted"
grep -qF 'guest 1: rxe0 never ready: RXE-BOOT-FAILED guest=1 reason=insmod rdma_rxe' <<<"$out" ||
  fail "boot failure reason: $out"
grep -qx '0 passed, 2 failed' <<<"$out" || fail "boot failure count: $out"
printf '%s\n' 'RXE-READY guest=1 uptime=4.00' 'RXE-RESULT name=a status=137 seconds=120.00' \
  'RXE-RESULT name=b status=0 seconds=1.00' >"$dir/boot/console-1.log"
out=$("$results" "$dir/boot" "$dir/boot") && fail "results.sh passed a killed command"
grep -qF 'FAIL a (guest 1): killed at the per-command limit (status 137)' <<<"$out" || fail "killed: $out"
"$results" "$dir/none" "$dir/none" >/dev/null 2>"$dir/err"
(($? == 2)) && grep -qF 'no commands-N file' "$dir/err" || fail "results.sh without commands"

# --- test-rxe.sh: refusals and --list (nothing booted)
rxe=$src/scripts/test-rxe.sh
expect_refused "--guests 3" "--guests must be 1, 2 or both, not '3'" "$rxe" --guests 3
expect_refused "--run without =" "--run wants NAME=COMMAND, not 'ls'" "$rxe" --guests 1 --run ls
expect_refused "--commands with both" "--commands needs --guests 1 or 2" "$rxe" --commands "$dir/good.cmds"
expect_refused "--timeout" "--timeout must be a whole number of seconds, not '5m'" "$rxe" --timeout 5m
expect_refused "--bin" "--bin $dir/nothing: not an executable file" "$rxe" --bin "$dir/nothing"
expect_refused "@2 in one guest" "x runs on guest 2, but this run boots 1 guest(s)" "$rxe" --guests 1 \
  --run 'x@2=ls'
out=$("$rxe" --guests 1 --list --run 'mine=my_test --flag') || fail "--list: exit $?"
grep -qF '  rc-server (background): ibv_rc_pingpong' <<<"$out" || fail "--list: default commands: $out"
grep -qxF '  mine: my_test --flag' <<<"$out" || fail "--list: the --run command: $out"
out=$("$rxe" --list) || fail "--list of both runs: exit $?"
grep -qF '== 2 guest(s), guest 2:' <<<"$out" || fail "--list: the two-guest run: $out"
# megascale's runs join the default commands when its binary is there, and are left out otherwise.
printf '#!/bin/sh\n' >"$dir/megascale" && chmod +x "$dir/megascale"
out=$(MEGASCALE_RXE_MEGASCALE=$dir/megascale "$rxe" --list) || fail "--list with megascale: exit $?"
grep -qF '  mperf-ud-1m: megascale perf --wire verbs-ud --loopback --test bw --check -s 1M' <<<"$out" ||
  fail "--list: megascale's one-guest runs: $out"
grep -qF '  mperf-rc-64k: rxe-retry 90 megascale perf --wire verbs-rc --cc /etc/megascale/rxe-tcg.yaml -p 18720' \
  <<<"$out" || fail "--list: megascale's two-guest client: $out"
grep -qF '  mperf-ud-64k: rxe-retry 90 megascale perf --wire verbs-ud --cc loopback -p 18710' <<<"$out" ||
  fail "--list: megascale's two-guest verbs-ud client: $out"
out=$(MEGASCALE_RXE_PERF_TWO_GUESTS=0 MEGASCALE_RXE_MEGASCALE=$dir/megascale "$rxe" --list) ||
  fail "--list without two-guest megascale runs: exit $?"
grep -q 'mperf-rc-64k: rxe-retry' <<<"$out" && fail "--list: MEGASCALE_RXE_PERF_TWO_GUESTS=0 kept them: $out"
grep -qF '  mperf-ud-1m: megascale perf' <<<"$out" || fail "--list: =0 dropped the one-guest runs: $out"
grep -qF '  mtopo: megascale topo --rdma-only --json' <<<"$out" || fail "--list: megascale topo: $out"
out=$(MEGASCALE_RXE_MEGASCALE=$dir/no-megascale "$rxe" --list) || fail "--list without megascale: exit $?"
grep -q 'mperf' <<<"$out" && fail "--list: megascale's runs without its binary: $out"
out=$(MEGASCALE_RXE_MEGASCALE=$dir/megascale "$rxe" --guests 2 --commands "$dir/good.cmds" --list) ||
  fail "--commands with megascale: exit $?"
grep -q 'mperf' <<<"$out" && fail "--commands: megascale's runs added to a given file: $out"

# Skips (exit 77, one line) without QEMU, and without the kernel package (an empty cache, a pinned
# package that does not exist: apt-get download fails, offline too).
MEGASCALE_RXE_QEMU=$dir/no-qemu "$rxe" --guests 1 >"$dir/skip.log" 2>&1
(($? == 77)) && grep -qx "SKIP: no $dir/no-qemu (scripts/install-deps.sh installs qemu-system-x86)" "$dir/skip.log" ||
  fail "no QEMU: $(cat "$dir/skip.log")"
if command -v qemu-system-x86_64 >/dev/null && command -v apt-get >/dev/null; then
  MEGASCALE_RXE_CACHE=$dir/cache MEGASCALE_RXE_KERNEL_PKG=linux-image-0.0.0-0-amd64 "$rxe" --guests 1 \
    >"$dir/skip.log" 2>&1
  (($? == 77)) && grep -q "^SKIP: cannot get the kernel package linux-image-0.0.0-0-amd64: apt-get download failed" \
    "$dir/skip.log" || fail "no kernel package: $(cat "$dir/skip.log")"
fi

# --- build-initramfs.sh on a fake kernel tree: .ko files that are only a .modinfo section
skip_build=""
for t in busybox cpio gzip objcopy gcc ibv_devinfo ib_write_bw rdma; do
  command -v "$t" >/dev/null || skip_build="no $t"
done
if [ -n "$skip_build" ]; then
  echo "build-initramfs part skipped: $skip_build (scripts/install-deps.sh installs it)"
else
  kdir=$dir/kernel/lib/modules/9.9.9-amd64/kernel
  mkdir -p "$kdir"/{a,b}
  : | gcc -x c -c -o "$dir/empty.o" -
  mod() {  # PATH NAME DEPENDS
    printf 'name=%s\0depends=%s\0' "$2" "$3" >"$dir/modinfo"
    objcopy --add-section .modinfo="$dir/modinfo" "$dir/empty.o" "$kdir/$1"
  }
  mod a/crc32_generic.ko crc32_generic ""
  mod a/ib_core.ko ib_core ""
  mod b/ib_uverbs.ko ib_uverbs ib_core
  mod a/udp_tunnel.ko udp_tunnel ""
  mod b/rdma_rxe.ko rdma_rxe ib_uverbs,ib_core,udp_tunnel
  mod a/virtio.ko virtio ""
  mod a/virtio_pci.ko virtio_pci virtio
  mod b/virtio_net.ko virtio_net virtio
  mod a/sch-netem.ko sch_netem ""
  mkdir "$dir/img"
  echo 'int plug(void) { return 1; }' | gcc -x c -shared -fPIC -o "$dir/libplug.so" -
  "$src/scripts/rxe/build-initramfs.sh" --kernel-root "$dir/kernel" --commands-dir "$dir/c2" \
    --out "$dir/img/i.cpio.gz" --module sch_netem --lib "$dir/libplug.so" >"$dir/build.log" 2>&1 ||
    fail "build-initramfs: $(cat "$dir/build.log")"
  (cd "$dir/img" && gzip -dc i.cpio.gz | cpio -id --quiet) || fail "the initramfs does not unpack"
  want=$'crc32_generic\nib_core\nib_uverbs\nudp_tunnel\nrdma_rxe\nvirtio\nvirtio_pci\nvirtio_net\nsch_netem'
  [ "$(cat "$dir/img/rxe/modules")" = "$want" ] || fail "module order: $(tr '\n' ' ' <"$dir/img/rxe/modules")"
  [ -f "$dir/img/rxe/modules.d/sch_netem.ko" ] || fail "sch_netem.ko (file sch-netem.ko) not copied"
  for f in init bin/busybox usr/bin/rxe-retry usr/bin/ib_write_bw usr/bin/rdma etc/libibverbs.d/rxe.driver \
    etc/megascale/rxe-tcg.yaml \
    rxe/commands-1 rxe/commands-2 usr/local/lib/libplug.so; do
    [ -e "$dir/img/$f" ] || fail "initramfs lacks /$f"
  done
  ls "$dir"/img/usr/lib/*/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || fail "initramfs lacks the rxe provider"
  while read -r lib; do
    [ -e "$dir/img$(realpath "$(dirname "$lib")")/${lib##*/}" ] || fail "initramfs lacks $lib (ib_write_bw needs it)"
  done < <(ldd "$(command -v ib_write_bw)" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
  # A module that is not there is named.
  "$src/scripts/rxe/build-initramfs.sh" --kernel-root "$dir/kernel" --commands-dir "$dir/c2" \
    --out "$dir/img/j.cpio.gz" --module no_such_mod >/dev/null 2>"$dir/err"
  (($? == 2)) && grep -qF "kernel module no_such_mod not in" "$dir/err" || fail "a missing module: $(cat "$dir/err")"
fi

# --- shellcheck over scripts/rxe/ (the guest's init is busybox sh)
if command -v shellcheck >/dev/null; then
  shellcheck -S warning -x -P SCRIPTDIR "$src"/scripts/rxe/*.sh "$src/scripts/rxe/rxe-retry" "$src/scripts/rxe/rxe-perftest" \
    "$src/scripts/rxe/init" || fail "shellcheck warnings in scripts/rxe/"
fi
echo "rxe scripts: all checks passed"
