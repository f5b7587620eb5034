#!/usr/bin/env bash
# Every shell script of the repository passes shellcheck at severity warning (notes and style are not
# enforced): scripts/*.sh, tests/scripts/*.sh and .ci/run. Sourced files are followed (-x), relative to
# the sourcing script (-P SCRIPTDIR). Skips (exit 77) without shellcheck, which scripts/install-deps.sh
# installs.
# Usage: shellcheck_test.sh SOURCE_DIR
set -uo pipefail
src=$1
if ! command -v shellcheck >/dev/null; then
  echo "SKIP: shellcheck is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
shopt -s nullglob
files=("$src"/scripts/*.sh "$src"/tests/scripts/*.sh "$src"/.ci/run)
(( ${#files[@]} > 10 )) || { echo "FAIL: found only ${#files[@]} scripts under $src"; exit 1; }
if ! shellcheck -S warning -x -P SCRIPTDIR "${files[@]}"; then
  echo "FAIL: shellcheck found warnings or errors (above) in ${#files[@]} scripts"
  exit 1
fi
echo "shellcheck: ${#files[@]} scripts, no warnings or errors"
