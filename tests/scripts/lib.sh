# shellcheck shell=bash
# Shared by the script tests: `source "$(dirname "$0")/lib.sh"` after `set -uo pipefail` gives a scratch
# folder $dir (removed at exit), fail MESSAGE, and expect_refused.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# expect_refused WHAT MESSAGE COMMAND...: COMMAND must exit 2 with MESSAGE in its standard error.
expect_refused() {
  local what=$1 message=$2
  shift 2
  "$@" > /dev/null 2> "$dir/err"
  (( $? == 2 )) || fail "$what: exit status"
  grep -qF -- "$message" "$dir/err" || fail "$what: message: $(cat "$dir/err")"
}
