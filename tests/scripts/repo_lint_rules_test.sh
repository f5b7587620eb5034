#!/usr/bin/env bash
# repo_lint_test.sh on hand-made trees: a clean tree passes, and each rule, broken once in a tree of its
# own, is reported with the file and line that break it.
# Usage: repo_lint_rules_test.sh SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
lint=$1/tests/scripts/repo_lint_test.sh

# A small tree that keeps every rule: a source file of 800 lines, a 400-line PERFORMANCE.md, links
# that resolve (a file, a folder, an anchor, a web address), a date in CHANGELOG.md.
clean() {
  rm -rf "$dir/tree"
  mkdir -p "$dir/tree/docs" "$dir/tree/src" "$dir/tree/build/big"
  for ((i = 0; i < 800; ++i)); do echo "int x$i = $i;"; done > "$dir/tree/src/long.cpp"
  for ((i = 0; i < 400; ++i)); do echo "| row $i |"; done > "$dir/tree/docs/PERFORMANCE.md"
  for ((i = 0; i < 900; ++i)); do echo "int y$i;"; done > "$dir/tree/build/big/generated.cpp"
  cat > "$dir/tree/README.md" << 'MD'
See [the docs](docs/PERFORMANCE.md), [src](src/), [below](#usage) and [a paper](https://example.org/a).
A perf server session keeps its counters per session.
MD
  echo "See [the README](../README.md#usage)." > "$dir/tree/docs/README.md"
  echo "## 2026-11-25: first release" > "$dir/tree/CHANGELOG.md"
}
clean
out=$("$lint" --root "$dir/tree") || fail "a clean tree: $out"
grep -q "no findings" <<< "$out" || fail "a clean tree: $out"

# expect_finding WHAT EXPECTED: the tree as it stands must fail with EXPECTED (a fixed string) in the
# report; the tree is then made clean again for the next case.
expect_finding() {
  local what=$1 expected=$2 out
  out=$("$lint" --root "$dir/tree")
  (( $? == 1 )) || fail "$what: exit status 0, report: $out"
  grep -qF -- "$expected" <<< "$out" || fail "$what: no \"$expected\" in: $out"
  echo "ok: $what: $(grep -F -- "$expected" <<< "$out" | head -1)"
  clean
}

echo "int one_too_many;" >> "$dir/tree/src/long.cpp"
expect_finding "source over 800 lines" "src/long.cpp:801: 801 lines, over the 800-line limit"
for ext in c h cu; do
  for ((i = 0; i < 801; ++i)); do echo "x"; done > "$dir/tree/src/long_$ext.$ext"
  expect_finding "*.$ext over 800 lines" "src/long_$ext.$ext:801: 801 lines"
done
echo "| one too many |" >> "$dir/tree/docs/PERFORMANCE.md"
expect_finding "PERFORMANCE.md over 400 lines" "docs/PERFORMANCE.md:401: 401 lines, over the 400-line limit"
printf 'a\nThe design is in ../shared/design/ARCHITECTURE.md.\n' >> "$dir/tree/docs/README.md"
expect_finding "../shared" "docs/README.md:3: refers outside the repository"
echo '// Layout rules: /work/notes/layout.md' >> "$dir/tree/src/long.cpp"
expect_finding "/work/ in a source comment" "src/long.cpp:801: refers outside the repository"
echo 'Sources: shared/research/cc-sim.md' >> "$dir/tree/README.md"
expect_finding "shared/research/" "README.md:3: refers outside the repository"
echo "[up](../../elsewhere.md)" >> "$dir/tree/docs/README.md"
expect_finding "a link out of the tree" "docs/README.md:2: link ../../elsewhere.md leaves the repository"
echo "[gone](docs/MISSING.md)" >> "$dir/tree/README.md"
expect_finding "a link to no file" "README.md:3: link docs/MISSING.md names no file"
echo "[root](/etc/passwd)" >> "$dir/tree/README.md"
expect_finding "an absolute link" "README.md:3: absolute link /etc/passwd"
echo "// In the fifth session this gave 4.5 GB/s." >> "$dir/tree/src/long.cpp"
expect_finding "an ordinal session" "src/long.cpp:801: narrates history"
printf 'x\ny\n# measured in the twenty-\n# ninth session\n' > "$dir/tree/run.sh"
expect_finding "an ordinal session over two words" "run.sh:4: narrates history"
printf 'x\n# the figures of the thirtieth\n# session\n' > "$dir/tree/run.sh"
expect_finding "an ordinal session over a line break" "run.sh:2: narrates history"
echo "Session 12 moved the default." >> "$dir/tree/docs/README.md"
expect_finding "Session N" "docs/README.md:2: narrates history"
echo "as in session 3" >> "$dir/tree/README.md"
expect_finding "session N" "README.md:3: narrates history"
echo "// Found in a CI run (2026-11-29)." >> "$dir/tree/src/long.cpp"
expect_finding "a dated episode" "src/long.cpp:801: narrates history"
echo "This session's runs stalled." >> "$dir/tree/README.md"
expect_finding "this session's" "README.md:3: narrates history"
echo "all rules fire; a clean tree passes"
