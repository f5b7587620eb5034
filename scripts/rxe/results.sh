#!/usr/bin/env bash
# Reads the Soft-RoCE guests' console logs against the commands they were given; prints one line per
# command, rxe0's counters that moved, each command's output to OUTDIR/NAME.log, and
# `N passed, M failed`. Exits 0 only when every
# command has a result line with status 0.
# Usage: results.sh COMMANDS_DIR CONSOLE_DIR [OUTDIR]
#   COMMANDS_DIR holds commands-N (rxe_parse_commands' form, lib.sh); CONSOLE_DIR holds console-N.log,
#   the console of guest N (scripts/rxe/init says what it prints). OUTDIR defaults to CONSOLE_DIR.
# A command with no result line (the guest failed to boot, crashed, or was killed at the overall
# limit) fails, with the reason the console gives.
set -uo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: results.sh COMMANDS_DIR CONSOLE_DIR [OUTDIR]" >&2
  exit 2
fi
cmds=$1 consoles=$2 out=${3:-$2}
shopt -s nullglob
files=("$cmds"/commands-*)
if [ ${#files[@]} -eq 0 ]; then
  echo "results.sh: no commands-N file in $cmds" >&2
  exit 2
fi
mkdir -p "$out"
passed=0 failed=0
for f in "${files[@]}"; do
  guest=${f##*-}
  log="$consoles/console-$guest.log"
  ready="" reason=""
  if [ -r "$log" ]; then
    # Serial consoles end lines with \r\n.
    tr -d '\r' <"$log" >"$out/.console-$guest"
    ready=$(grep -m1 -o 'RXE-READY guest=[0-9]* uptime=[0-9.]*' "$out/.console-$guest" | sed 's/.*uptime=//')
    reason=$(grep -m1 -o 'RXE-BOOT-FAILED .*' "$out/.console-$guest")
    if [ -n "$ready" ]; then
      echo "guest $guest: rxe0 ready ${ready} s after boot"
    else
      echo "guest $guest: rxe0 never ready: ${reason:-no RXE-READY line (kernel or /init failed; see $log)}"
    fi
  else
    echo "guest $guest: no console log $log"
    : >"$out/.console-$guest"
  fi
  while IFS=$'\t' read -r name _ _; do
    [ -n "$name" ] || continue
    awk -v p="$name| " 'index($0, p) == 1 { print substr($0, length(p) + 1) }' \
      "$out/.console-$guest" >"$out/$name.log"
    # The status and seconds of the line `RXE-RESULT name=NAME status=N seconds=S`.
    result=$(awk -v p="RXE-RESULT name=$name " '
      (i = index($0, p)) { split(substr($0, i + length(p)), f, /[ =]/); print f[2], f[4]; exit }' \
      "$out/.console-$guest")
    if [ -z "$result" ]; then
      echo "FAIL $name (guest $guest): no result line (the guest stopped or was stopped first)"
      failed=$((failed + 1))
      continue
    fi
    read -r status seconds <<<"$result"
    if [ "$status" = 0 ]; then
      echo "pass $name (guest $guest): ${seconds} s"
      passed=$((passed + 1))
    else
      why="exit status $status"
      [ "$status" = 137 ] && why="killed at the per-command limit (status 137)"
      echo "FAIL $name (guest $guest): $why after ${seconds} s; last lines:"
      tail -5 "$out/$name.log" | sed 's/^/    /'
      failed=$((failed + 1))
    fi
  done <"$f"
  counters=$(grep -m1 -o 'RXE-COUNTERS guest=[0-9]*.*' "$out/.console-$guest" | cut -d' ' -f3-)
  [ -n "$counters" ] && echo "guest $guest: rxe0 counters: $counters"
  rm -f "$out/.console-$guest"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
