#!/usr/bin/env bash
# readme_examples_test.sh's rules on hand-made READMEs and a stand-in binary: what is run and what is
# not (install lines, other fences, `# needs a GPU`), continuations joined, and each way an example
# fails (non-zero exit, a warning on either stream, the timeout, no example at all) named in its output.
# Usage: readme_examples_rules_test.sh SOURCE_DIR
set -uo pipefail
src=$1
check=$src/tests/scripts/readme_examples_test.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The stand-in logs every call's arguments; `warn` warns, `err-warn` warns on stderr, `bad` exits 3,
# `slow` sleeps past the timeout, `gpu` is never to be run.
mkdir -p "$dir/build/cli"
cat > "$dir/build/cli/megascale" <<'FAKE'
#!/usr/bin/env bash
echo "$*" >> "$LOG"
case $1 in
  warn) echo "Warning: 32 of 8192 paths" ;;
  err-warn) echo "gnuplot: warning: empty range" >&2 ;;
  bad) exit 3 ;;
  slow) sleep 30 ;;
esac
[[ -f configs/marker ]] || { echo "not run from a folder that links the repository" >&2; exit 9; }
echo "fine"
FAKE
chmod +x "$dir/build/cli/megascale"
mkdir -p "$dir/repo/configs"
touch "$dir/repo/configs/marker"
export LOG=$dir/calls.log

readme() { printf '%s\n' "$@" > "$dir/README.md"; : > "$LOG"; }
run() { out=$(TIMEOUT_S=3 "$check" "$dir/repo" "$dir/build/cli/megascale" "$dir/README.md" 2>&1); status=$?; }

readme '```sh' \
  'scripts/install-deps.sh && cmake -S . -B build && build/cli/megascale perf --loopback' \
  'scripts/test.sh' \
  'build/cli/megascale sim one \' \
  '    --seed 3' \
  'megascale gpu   # needs a GPU' \
  '# megascale in a comment' \
  '```' '```text' 'megascale in-a-text-block' '```'
run
(( status == 0 )) || fail "good README: exit $status: $out"
[[ $(cat "$LOG") == $'perf --loopback\nsim one --seed 3' ]] || fail "good README ran: $(cat "$LOG")"
grep -q "2 example(s)" <<<"$out" || fail "good README summary: $out"

for bad in "warn" "err-warn" "bad" "slow"; do
  readme '```sh' "megascale $bad now" 'megascale fine' '```'
  run
  (( status == 1 )) || fail "$bad: exit $status: $out"
  grep -q "FAIL: 'megascale $bad now'" <<<"$out" || fail "$bad: the command not named: $out"
  grep -q "ok .*megascale fine" <<<"$out" || fail "$bad: the next example did not run: $out"
done

readme '# nothing to run' '```sh' 'scripts/test.sh' '```'
run
(( status == 1 )) && grep -q "no example command" <<<"$out" || fail "empty README: exit $status: $out"
echo "readme_examples rules: what runs, what does not, each failure named"
