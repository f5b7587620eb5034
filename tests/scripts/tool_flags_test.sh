#!/usr/bin/env bash
# The tools beside the CLI parse their flags with CLI11 in the CLI's vocabulary (cli/vocab.h): --help
# exits 0, an unknown flag or a bad value exits 2 with the reason on stderr, an old spelling is refused
# naming the new one, and the new spellings (units included) work.
# Usage: tool_flags_test.sh UDP_GOODPUT CONFIG_DOC SOURCE_DIR
set -uo pipefail
goodput=$1
config_doc=$2
src=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect STATUS PATTERN CMD...: CMD exits STATUS and its stderr matches PATTERN (grep -E).
expect() {
  local want=$1 pattern=$2
  shift 2
  "$@" > "$dir/out" 2> "$dir/err"
  local got=$?
  (( got == want )) || fail "$*: exit $got, not $want: $(cat "$dir/err")"
  [[ -z $pattern ]] || grep -qE -- "$pattern" "$dir/err" || fail "$*: stderr does not say '$pattern': $(cat "$dir/err")"
}

expect 0 '' "$goodput" --help
grep -q -- "--duration" "$dir/out" || fail "megascale_udp_goodput --help does not list --duration"
expect 2 'bogus' "$goodput" --bogus
expect 2 '--seconds was renamed: use --duration' "$goodput" --seconds 2
expect 2 '--msg-mib was renamed: use --size' "$goodput" --msg-mib 4
expect 2 'unknown time unit' "$goodput" --duration 2parsecs
expect 2 'not a size' "$goodput" --size lots
# A short run on loopback with the new spellings and units.
expect 0 '' "$goodput" -D 300ms -s 1M --lanes 2
grep -q "Gbit/s" "$dir/out" || fail "megascale_udp_goodput -D 300ms -s 1M: no result line: $(cat "$dir/out")"

expect 0 '' "$config_doc" --help
expect 2 'bogus' "$config_doc" --bogus
expect 2 'write' "$config_doc" --write
expect 0 '' "$config_doc"
grep -q "MEGASCALE_" "$dir/out" || fail "megascale_config_doc printed no knob table"
cp "$src/docs/CONFIG.md" "$dir/CONFIG.md"
expect 0 '' "$config_doc" --write "$dir/CONFIG.md"
cmp -s "$src/docs/CONFIG.md" "$dir/CONFIG.md" || fail "megascale_config_doc --write changed an up-to-date CONFIG.md"
expect 1 'cannot open' "$config_doc" --write "$dir/missing.md"
echo "tool flags: CLI11 and the vocabulary in megascale_udp_goodput and megascale_config_doc"
