#!/usr/bin/env bash
# The README's example commands run: each exits 0 and prints no warning.
#
# The convention README.md follows (and this script relies on):
# - Examples sit in fenced blocks opened with ```sh. Within them, an example is a command line that
#   starts with `build/cli/megascale ` or `megascale ` (leading spaces allowed), or such a command
#   chained after `&&` on an install-and-build line (only the megascale part runs). Other lines (install,
#   build, test commands, comments) are not run. A line ending in `\` continues on the next.
# - A line ending in the comment `# needs a GPU` is not run (CI has no GPU).
# - Each example is written to run from the repository root: paths such as configs/sim/... are relative
#   to it, and build/ is the build folder (README's first command makes it). Here each runs in a scratch
#   folder that links the repository's top-level entries and, as build/, the folder of the binary under
#   test (MEGASCALE_BINARY is BUILD/cli/megascale; `megascale` on PATH is it too), so build/ paths such as
#   the plugin's resolve and files the example writes land in the scratch folder, not in the repository.
# - An example fails when it exits non-zero, runs past the timeout (TIMEOUT_S, default 120 s), or prints
#   "warning" (any case) on standard output or standard error. A README with no example fails too.
#
# Usage: readme_examples_test.sh SOURCE_DIR MEGASCALE_BINARY [README]   (README: SOURCE_DIR/README.md)
set -uo pipefail
src=$1
megascale=$2
readme=${3:-$src/README.md}
timeout_s=${TIMEOUT_S:-120}
[[ -f $readme ]] || { echo "FAIL: no README at $readme"; exit 1; }
[[ -x $megascale ]] || { echo "FAIL: $megascale is not an executable"; exit 1; }

# The example commands, one per line, continuations joined.
extract() {
  awk -v re='^(build/cli/megascale|megascale)([[:space:]]|$)' '
    /^[[:space:]]*```/ { if (!inblock) { inblock = ($0 ~ /^[[:space:]]*```sh[[:space:]]*$/); next }
                         inblock = 0; next }
    !inblock { next }
    { line = pending $0; pending = "" }
    line ~ /\\$/ { pending = substr(line, 1, length(line) - 1) " "; next }
    line ~ /#[[:space:]]*needs a GPU[[:space:]]*$/ { next }
    {
      sub(/^[[:space:]]+/, "", line); sub(/[[:space:]]+$/, "", line)
      if (line ~ re) { print line; next }  # a command line of its own runs whole
      n = split(line, parts, /&&/)
      for (i = 2; i <= n; ++i) {
        cmd = parts[i]
        sub(/^[[:space:]]+/, "", cmd); sub(/[[:space:]]+$/, "", cmd)
        if (cmd ~ re) print cmd
      }
    }' "$readme"
}

mapfile -t commands < <(extract)
if (( ${#commands[@]} == 0 )); then
  echo "FAIL: $readme has no example command (a \`build/cli/megascale ...\` or \`megascale ...\` line in a \`\`\`sh block)"
  exit 1
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
for i in "${!commands[@]}"; do
  cmd=${commands[$i]}
  dir=$scratch/run$i
  mkdir -p "$dir/.bin"
  for entry in "$src"/*; do
    [[ $(basename "$entry") == build ]] || ln -s "$entry" "$dir/$(basename "$entry")"
  done
  ln -s "$(dirname "$(dirname "$(realpath "$megascale")")")" "$dir/build"
  ln -s "$(realpath "$megascale")" "$dir/.bin/megascale"
  start=$SECONDS
  (cd "$dir" && PATH="$dir/.bin:$PATH" timeout "$timeout_s" bash -c "$cmd") > "$dir/.output" 2>&1 < /dev/null
  status=$?
  took=$((SECONDS - start))
  if (( status == 124 )); then
    echo "FAIL: '$cmd' ran past ${timeout_s} s"
    failed=1
  elif (( status != 0 )); then
    echo "FAIL: '$cmd' exited $status:"
    # Lines that name a failure wherever they are (a failed case in a long listing), then the end.
    grep -E '(^|[[:space:]])(FAIL|ERROR|error:)' "$dir/.output" | head -n 10 | sed 's/^/    /'
    tail -n 20 "$dir/.output" | sed 's/^/    /'
    failed=1
  elif grep -qi warning "$dir/.output"; then
    echo "FAIL: '$cmd' printed a warning:"
    grep -i warning "$dir/.output" | head -n 10 | sed 's/^/    /'
    failed=1
  else
    echo "ok ($took s): $cmd"
  fi
done
(( failed == 0 )) || exit 1
echo "readme_examples: ${#commands[@]} example(s) from $readme ran, exit 0, no warning"
