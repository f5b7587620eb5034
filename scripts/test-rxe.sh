#!/usr/bin/env bash
# Runs verbs programs on Soft-RoCE (rdma_rxe) inside QEMU guests booted from Debian's stock kernel
# package, since the host kernel has no InfiniBand: one guest (-smp 2, 2 GiB; server and client on the
# same rxe0), then two guests (-smp 1 each) whose virtio NICs are joined by QEMU's socket netdev.
# Prints a line per command, then `N passed, M failed`; exits 0 only when every command passed, 1 when
# one failed, 2 on bad arguments, 77 (skip, one-line reason) when QEMU, a needed package or the kernel
# package cannot be had.
#
# Usage: scripts/test-rxe.sh [--guests 1|2|both] [--commands FILE] [--run 'NAME=COMMAND']...
#                            [--bin PATH]... [--lib PATH]... [--module NAME]... [--timeout S]
#                            [--cmd-timeout S] [--out DIR] [--perftest] [--list]
#   --guests       which runs: 1, 2 or both (default both)
#   --commands F   the commands to run (syntax in scripts/rxe/lib.sh) instead of the default
#                  scripts/rxe/one-guest.cmds or two-guests.cmds; needs --guests 1 or 2
#   --run N=CMD    one more command, a line `N CMD` of that syntax (N may carry @2 and &); with
#                  --bin, a host-built test in the guest: --bin PATH/my_test --run 'mine=my_test -v'
#   --bin PATH     a host program copied into the guest's /usr/bin with every library ldd lists
#   --lib PATH     a shared object for the guest's /usr/local/lib, on LD_LIBRARY_PATH (a plugin that
#                  a program opens with dlopen); its libraries come along
#   --module NAME  one more kernel module for the guest (with its dependencies), e.g. sch_netem
#   --timeout S    hard limit for everything, downloads and both runs included (default 540)
#   --cmd-timeout S  each command's limit inside the guest (default 120; past it: status 137)
#   --out DIR      where console logs and each command's output go (default build/rxe-out)
#   --perftest     also perftest's baseline runs (scripts/rxe/perftest-one-guest.cmds and
#                  perftest-two-guests.cmds, after the other commands): ib_write_bw 64 KiB-4 MiB,
#                  ib_send_bw -c UD at the MTU, ib_write_lat 8 B; their figures go to
#                  OUT/one-guest/perftest.jsonl and OUT/two-guests/perftest.jsonl (scripts/rxe/README.md)
#   --list         print the commands each guest would run, and exit
# Environment:
#   MEGASCALE_RXE_CACHE  the kernel package cache (default build/rxe-cache): linux-image-6.1.0-N-amd64
#                        fetched with `apt-get download` (the version linux-image-amd64 depends on)
#                        and unpacked there with dpkg-deb -x; never installed on the host. With no
#                        package source, the newest package already in the cache is used.
#   MEGASCALE_RXE_KERNEL_PKG  a kernel package to use instead (e.g. linux-image-6.1.0-57-amd64; not
#                        the -cloud-amd64 flavour, which has no rdma_rxe); no fallback when it fails.
#   MEGASCALE_RXE_QEMU   the QEMU program (default qemu-system-x86_64).
#   MEGASCALE_RXE_MEGASCALE  the megascale program whose runs (scripts/rxe/megascale-one-guest.cmds,
#                        megascale-two-guests.cmds) join the default commands (default
#                        build/cli/megascale; left out when it is not built; "" leaves them out).
#   MEGASCALE_RXE_PLUGIN  the NCCL plugin whose run (scripts/rxe/plugin-one-guest.cmds: plugin-check
#                        over verbs-ud, run by that megascale) joins the default one-guest commands
#                        (default build/collectives/nccl/libnccl-net-megascale.so; left out when it or
#                        megascale is not built; "" leaves it out).
#   MEGASCALE_RXE_TESTS  the folder of the verbs wire's device tests (ib_device_test,
#                        verbs_wire_device_test, rc_port_test), whose runs
#                        (scripts/rxe/verbs-tests-one-guest.cmds) join the default one-guest commands
#                        (default build/tests; left out when they are not built; "" leaves them out).
#   MEGASCALE_RXE_PERF_TWO_GUESTS  0 leaves megascale-two-guests.cmds out of the default two-guest
#                        commands (default 1: perf verbs-ud and verbs-rc across the guests).
#   MEGASCALE_RXE_PERFTEST  1: as --perftest (a CI stage turns the baseline on without new arguments).
#   MEGASCALE_RXE_ACCEL  tcg (default: software emulation, what CI has) or kvm. (This project's
#                        machines show a /dev/kvm that QEMU cannot use: "failed to set MSR 0x10a".)
# Faults for a command to inject: the guest's busybox `ip link set eth0 down|up` flaps rxe0's port
# (DOWN, then ACTIVE again); `--bin /usr/sbin/tc --module sch_netem` gives iproute2's tc, called by its
# full path /usr/bin/tc (busybox's shell prefers its own `tc` applet, which has no netem), e.g.
# `/usr/bin/tc qdisc add dev eth0 root netem loss 1%`.
# Outputs under OUT/one-guest and OUT/two-guests: console-N.log (guest N's console), NAME.log (each
# command's output), initramfs.cpio.gz, perftest.jsonl (with --perftest). The guest side is
# scripts/rxe/init; the image is built by scripts/rxe/build-initramfs.sh; results are read by
# scripts/rxe/results.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD/scripts/rxe
# shellcheck source=rxe/lib.sh
source "$here/lib.sh"

usage() { sed -n '/^# Usage:/,/^#   --list/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "test-rxe: $*" >&2; exit 2; }
skip() { echo "SKIP: $*"; exit 77; }

guests_arg=both commands="" runs=() bins=() libs=() mods=() limit=540 cmd_limit=120 out=build/rxe-out list=0
perftest=${MEGASCALE_RXE_PERFTEST:-0}
while [ $# -gt 0 ]; do
  case $1 in
    --guests) guests_arg=${2:-}; shift 2 ;;
    --commands) commands=${2:-}; shift 2 ;;
    --run) runs+=("${2:-}"); shift 2 ;;
    --bin) bins+=("${2:-}"); shift 2 ;;
    --lib) libs+=("${2:-}"); shift 2 ;;
    --module) mods+=("${2:-}"); shift 2 ;;
    --timeout) limit=${2:-}; shift 2 ;;
    --cmd-timeout) cmd_limit=${2:-}; shift 2 ;;
    --out) out=${2:-}; shift 2 ;;
    --perftest) perftest=1; shift ;;
    --list) list=1; shift ;;
    -h | --help) usage ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
done
[[ $perftest =~ ^[01]$ ]] || die "MEGASCALE_RXE_PERFTEST must be 0 or 1, not '$perftest'"
case $guests_arg in
  1) modes=(1) ;; 2) modes=(2) ;; both) modes=(1 2) ;;
  *) die "--guests must be 1, 2 or both, not '$guests_arg'" ;;
esac
[[ $limit =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a whole number of seconds, not '$limit'"
[[ $cmd_limit =~ ^[1-9][0-9]*$ ]] || die "--cmd-timeout must be a whole number of seconds, not '$cmd_limit'"
if [ -n "$commands" ] && [ "$guests_arg" = both ]; then
  die "--commands needs --guests 1 or 2 (one file is for one kind of run)"
fi
for r in "${runs[@]}"; do
  [[ $r == ?*=?* ]] || die "--run wants NAME=COMMAND, not '$r'"
done
for b in "${bins[@]}"; do
  [ -f "$b" ] && [ -x "$b" ] || die "--bin $b: not an executable file"
done
for l in "${libs[@]}"; do
  [ -f "$l" ] && [ -r "$l" ] || die "--lib $l: not a readable file"
done

# megascale's own runs (scripts/rxe/megascale-*.cmds) go with the default commands when it is built,
# and the plugin's run (scripts/rxe/plugin-one-guest.cmds) when it is built too.
megascale_bin=${MEGASCALE_RXE_MEGASCALE-build/cli/megascale}
plugin_lib=${MEGASCALE_RXE_PLUGIN-build/collectives/nccl/libnccl-net-megascale.so}
if [ -n "$megascale_bin" ] && [ -z "$commands" ]; then
  if [ -f "$megascale_bin" ] && [ -x "$megascale_bin" ]; then
    bins+=("$megascale_bin")
  else
    [ "$list" = 1 ] || echo "test-rxe: no $megascale_bin (build it first): megascale's runs are left out" >&2
    megascale_bin=""
  fi
fi
if [ -n "$plugin_lib" ] && [ -z "$commands" ]; then
  if [ -f "$plugin_lib" ] && [ -n "$megascale_bin" ]; then
    libs+=("$plugin_lib")
  else
    [ "$list" = 1 ] || echo "test-rxe: no $plugin_lib or megascale (build them first): the plugin's run is left out" >&2
    plugin_lib=""
  fi
fi

# The verbs wire's device tests (scripts/rxe/verbs-tests-one-guest.cmds), when built.
tests_dir=${MEGASCALE_RXE_TESTS-build/tests}
verbs_tests=(ib_device_test verbs_wire_device_test rc_port_test)
if [ -n "$tests_dir" ] && [ -z "$commands" ]; then
  for t in "${verbs_tests[@]}"; do
    [ -x "$tests_dir/$t" ] || tests_dir=""
  done
  if [ -n "$tests_dir" ]; then
    for t in "${verbs_tests[@]}"; do bins+=("$tests_dir/$t"); done
  elif [ "$list" != 1 ]; then
    echo "test-rxe: the verbs device tests are not built (${verbs_tests[*]}): their runs are left out" >&2
  fi
fi

deadline=$((SECONDS + limit))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The commands of each mode, checked, in $work/cmds-MODE/commands-N.
for m in "${modes[@]}"; do
  f=$commands
  if [ -z "$f" ]; then
    if [ "$m" = 1 ]; then f=$here/one-guest.cmds; else f=$here/two-guests.cmds; fi
  fi
  cp "$f" "$work/cmds-$m.txt" 2>/dev/null || die "commands file $f: cannot be read"
  if [ -z "$commands" ] && [ -n "$megascale_bin" ]; then
    if [ "$m" = 1 ]; then
      cat "$here/megascale-one-guest.cmds" >>"$work/cmds-$m.txt"
    elif [ "${MEGASCALE_RXE_PERF_TWO_GUESTS:-1}" != 0 ]; then
      cat "$here/megascale-two-guests.cmds" >>"$work/cmds-$m.txt"
    fi
  fi
  if [ -z "$commands" ] && [ -n "$plugin_lib" ] && [ "$m" = 1 ]; then
    cat "$here/plugin-one-guest.cmds" >>"$work/cmds-$m.txt"
  fi
  # Last: its flap takes the guest's link down.
  if [ -z "$commands" ] && [ -n "$tests_dir" ] && [ "$m" = 1 ]; then
    cat "$here/verbs-tests-one-guest.cmds" >>"$work/cmds-$m.txt"
  fi
  for r in "${runs[@]}"; do echo "${r%%=*} ${r#*=}" >>"$work/cmds-$m.txt"; done
  if [ "$perftest" = 1 ]; then
    pf=$here/perftest-one-guest.cmds
    [ "$m" = 1 ] || pf=$here/perftest-two-guests.cmds
    cat "$pf" >>"$work/cmds-$m.txt"
  fi
  mkdir -p "$work/cmds-$m"
  rxe_parse_commands "$work/cmds-$m.txt" "$m" "$work/cmds-$m" || exit 2
done
if [ "$list" = 1 ]; then
  for m in "${modes[@]}"; do
    for f in "$work/cmds-$m"/commands-*; do
      echo "== $m guest(s), guest ${f##*-}:"
      awk -F'\t' '{ printf "  %s%s: %s\n", $1, ($2 == 1 ? " (background)" : ""), $3 }' "$f"
    done
  done
  exit 0
fi

# What the guests need from the host.
qemu=${MEGASCALE_RXE_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || skip "no $qemu (scripts/install-deps.sh installs qemu-system-x86)"
for t in busybox cpio gzip objcopy ldd ss flock apt-get dpkg-deb ibv_rc_pingpong ib_write_bw rdma; do
  command -v "$t" >/dev/null || skip "no $t (scripts/install-deps.sh installs what the rxe guests need)"
done

# The kernel: the package linux-image-amd64 depends on, fetched once into the cache.
cache=${MEGASCALE_RXE_CACHE:-build/rxe-cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
# One run at a time fetches, unpacks or prunes (worktrees may share a cache).
exec 9>"$cache/.lock"
flock -w 600 9 || skip "the kernel cache $cache stayed locked by another run for 600 s"
pkg=${MEGASCALE_RXE_KERNEL_PKG:-}
pinned=${pkg:+1}
if [ -z "$pkg" ]; then
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9.]*-[0-9]*-amd64\)$/\1/p' | head -1)
fi
deb=""
if [ -n "$pkg" ]; then
  deb=$(find "$cache" -maxdepth 1 -name "${pkg}_*_amd64.deb" | sort -V | tail -1)
  if [ -z "$deb" ]; then
    echo "test-rxe: fetching $pkg into $cache"
    (cd "$cache" && timeout 300 apt-get download -q "$pkg" >"$cache/download.log" 2>&1) || true
    deb=$(find "$cache" -maxdepth 1 -name "${pkg}_*_amd64.deb" | sort -V | tail -1)
    if [ -n "$deb" ]; then
      # A newer kernel replaces the older ones (400 MB unpacked each).
      find "$cache" -mindepth 1 -maxdepth 1 -name 'linux-image-*' ! -name "$(basename "$deb" .deb)*" \
        -exec rm -rf {} +
    fi
  fi
fi
if [ -z "$deb" ] && [ -z "$pinned" ]; then
  # No package source (or no answer): the newest stock kernel already cached.
  deb=$(find "$cache" -maxdepth 1 -name 'linux-image-6.*-amd64_*_amd64.deb' | sort -V | tail -1)
fi
if [ -z "$deb" ]; then
  [ -n "$pkg" ] || skip "apt-cache names no kernel package for linux-image-amd64 (apt-get update?) and $cache has none"
  skip "cannot get the kernel package $pkg: apt-get download failed ($(tail -1 "$cache/download.log" 2>/dev/null))"
fi
kroot=$cache/$(basename "$deb" .deb)
if [ ! -e "$kroot/.unpacked" ]; then
  rm -rf "$kroot"
  dpkg-deb -x "$deb" "$kroot" || skip "cannot unpack $deb"
  touch "$kroot/.unpacked"
fi
kernels=("$kroot"/boot/vmlinuz-*)
[ -r "${kernels[0]}" ] || skip "no boot/vmlinuz-* in $deb"
kernel=${kernels[0]}
flock -u 9

accel=${MEGASCALE_RXE_ACCEL:-tcg}
case $accel in
  kvm | tcg) ;;
  *) die "MEGASCALE_RXE_ACCEL must be tcg or kvm, not '$accel'" ;;
esac
if [ "$accel" = kvm ]; then accel_args=(-accel kvm -cpu max); else accel_args=(-accel "tcg,thread=multi" -cpu max); fi
echo "test-rxe: kernel $(basename "$kernel"), accelerator $accel, limit ${limit} s"

# start_guest GUEST GUESTS NETDEV: starts one guest's QEMU in the background, killed when the overall
# limit is spent; its pid is added to pids.
start_guest() {
  local g=$1 n=$2 netdev=$3 smp=2 mem=2048
  if [ "$n" = 2 ]; then smp=1; mem=1024; fi
  timeout -s KILL "$left" "$qemu" "${accel_args[@]}" -smp "$smp" -m "$mem" -nodefaults \
    -no-user-config -display none -no-reboot -kernel "$kernel" -initrd "$dir/initramfs.cpio.gz" \
    -append "console=ttyS0 loglevel=3 panic=-1 mitigations=off rxe_guest=$g rxe_guests=$n rxe_timeout=$cmd_limit" \
    -serial "file:$dir/console-$g.log" -netdev "$netdev" \
    -device "virtio-net-pci,netdev=n0,romfile=,mac=52:54:00:58:00:0$g" >"$dir/qemu-$g.log" 2>&1 &
  pids+=($!)
}

# A free TCP port on 127.0.0.1 for the socket netdev.
free_port() {
  local p i
  for ((i = 0; i < 50; i++)); do
    p=$((20000 + RANDOM % 40000))
    ss -ltnH "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
  echo "test-rxe: no free TCP port found" >&2
  return 1
}

total_passed=0 total_failed=0 status=0
for m in "${modes[@]}"; do
  if [ "$m" = 1 ]; then dir=$out/one-guest; else dir=$out/two-guests; fi
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$work/cmds-$m"/commands-* "$dir/"
  echo
  echo "=== test-rxe: $m guest(s) (${SECONDS} s so far)"
  build_args=(--kernel-root "$kroot" --commands-dir "$dir" --out "$dir/initramfs.cpio.gz")
  for b in "${bins[@]}"; do build_args+=(--bin "$b"); done
  for l in "${libs[@]}"; do build_args+=(--lib "$l"); done
  for x in "${mods[@]}"; do build_args+=(--module "$x"); done
  "$here/build-initramfs.sh" "${build_args[@]}" || { status=1; total_failed=$((total_failed + 1)); continue; }

  left=$((deadline - SECONDS))
  if [ "$left" -lt 20 ]; then
    echo "test-rxe: under 20 s of the overall limit (${limit} s) is left for the $m-guest run"
    left=1
  fi
  pids=()
  started=$SECONDS
  if [ "$m" = 1 ]; then
    start_guest 1 1 hubport,id=n0,hubid=0
  else
    port=$(free_port)
    start_guest 1 2 "socket,id=n0,listen=127.0.0.1:$port"
    # Guest 2 connects once guest 1's QEMU listens.
    for ((i = 0; i < 100; i++)); do
      ss -ltnH "sport = :$port" | grep -q . && break
      sleep 0.1
    done
    start_guest 2 2 "socket,id=n0,connect=127.0.0.1:$port"
  fi
  # Wait for the guests, noting when each reports rxe0 ready (host seconds since its QEMU started).
  declare -A ready_at=()
  while :; do
    running=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
    for ((g = 1; g <= m; g++)); do
      if [ -z "${ready_at[$g]:-}" ] && grep -q RXE-READY "$dir/console-$g.log" 2>/dev/null; then
        ready_at[$g]=$((SECONDS - started))
      fi
    done
    [ "$running" = 0 ] && break
    sleep 0.5
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  for ((g = 1; g <= m; g++)); do
    # QEMU's own complaints (a port in use, a missing firmware file).
    grep -v "is not connected to host network" "$dir/qemu-$g.log" | sed "s/^/qemu $g: /" | head -5 || true
  done
  wall=$((SECONDS - started))
  if [ "$wall" -ge "$left" ]; then
    echo "test-rxe: the guests were killed at the overall limit (--timeout ${limit} s)"
  fi
  for ((g = 1; g <= m; g++)); do
    echo "guest $g: rxe0 ready ${ready_at[$g]:-never} s after QEMU started (host clock)"
  done
  set +e
  "$here/results.sh" "$dir" "$dir" | tee "$dir/results.txt"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" = 0 ] || status=1
  if [ "$perftest" = 1 ]; then
    # Each perftest run's figures: the PERFTEST-JSON line its reporting side printed
    # (scripts/rxe/rxe-perftest), in command order, guest 1's first.
    for f in "$dir"/commands-*; do
      while IFS=$'\t' read -r name _ _; do
        sed -n 's/^PERFTEST-JSON //p' "$dir/$name.log" 2>/dev/null || true
      done <"$f"
    done >"$dir/perftest.jsonl"
    if [ -s "$dir/perftest.jsonl" ] && command -v python3 >/dev/null; then
      python3 "$here/ratio.py" "$dir/perftest.jsonl" || true
    elif [ -s "$dir/perftest.jsonl" ]; then
      echo "perftest: figures in $dir/perftest.jsonl (no python3 for the table)"
    else
      echo "perftest: no figures (the runs failed; see above)"
    fi
  fi
  read -r p _ f _ < <(tail -1 "$dir/results.txt")
  total_passed=$((total_passed + p)) total_failed=$((total_failed + f))
  echo "$m guest(s): ${wall} s from QEMU start to power-off; logs in $dir"
  unset ready_at
done

echo
echo "test-rxe: ${SECONDS} s in all"
echo "$total_passed passed, $total_failed failed"
exit $status
