#!/usr/bin/env bash
# The repository's house rules, checked over its tracked files (git ls-files; a tree that is not a git
# checkout, such as repo_lint_rules_test.sh's fixtures, is walked with find, build* folders left out):
#   - a C/C++/CUDA source (*.c *.cpp *.h *.cu) has at most 800 lines: a file holds one idea;
#   - docs/PERFORMANCE.md has at most 400 lines: one current table per question, history in git;
#   - nothing refers outside the repository (../shared, /work/, shared/research/, shared/design/), and
#     every relative Markdown link resolves to a file or folder inside it;
#   - no file narrates history: "the fifth session", "session 12", dates such as 2026-11-25 (git log
#     holds when; a CHANGELOG.md may carry dates).
# Each finding is one line, FILE:LINE: what is wrong; the exit status is 1 when there is any.
# Usage: repo_lint_test.sh [--root] DIR
set -uo pipefail
[[ ${1:-} == --root ]] && shift
root=${1:?usage: repo_lint_test.sh [--root] DIR}
[[ -d $root ]] || { echo "FAIL: $root is not a folder"; exit 2; }
root=$(realpath -s "$root")
cd "$root" || exit 2

# The linter and its rules test spell out the patterns they look for.
self_re='^tests/scripts/repo_lint(_rules)?_test\.sh$'
if git rev-parse --show-toplevel 2>/dev/null | grep -qxF "$root"; then
  mapfile -t files < <(git ls-files | grep -vE "$self_re")
else
  mapfile -t files < <(find . -type f -not -path './build*' -not -path './.git/*' | sed 's|^\./||' |
    grep -vE "$self_re" | sort)
fi
(( ${#files[@]} > 0 )) || { echo "FAIL: no files under $root"; exit 2; }

findings=0
report() { echo "$1"; findings=$((findings + 1)); }

source_max=800
perf_max=400
ordinals='first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth'
ordinals+='|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|thirtieth'
ordinals+='|fortieth|fiftieth|(twenty|thirty|forty|fifty)-(first|second|third|fourth|fifth|sixth|seventh'
ordinals+='|eighth|ninth)|[0-9]+(st|nd|rd|th)'
ordinal_session="\\b($ordinals)( and ($ordinals))? sessions?\\b"
history_re="$ordinal_session|\\b[Ss]essions? [0-9]+\\b|\\b(in|of|from) (this|that|an earlier|a later|the next|the previous) session\\b|\\b[Tt]his session's\\b|\\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\\b"
outside_re='\.\./shared\b|/work/|\bshared/(research|design)/'

present=()
for f in "${files[@]}"; do [[ -f $f ]] && present+=("$f"); done
files=("${present[@]}")
sources=() markdown=() narrative=()
for f in "${files[@]}"; do
  case $f in
    *.c | *.cpp | *.h | *.cu) sources+=("$f") ;;
    *.md) markdown+=("$f") ;;
  esac
  [[ $(basename "$f") == CHANGELOG.md ]] || narrative+=("$f")
done

# Sizes.
while read -r n f; do
  [[ $f == total ]] && continue
  (( n > source_max )) && report "$f:$((source_max + 1)): $n lines, over the $source_max-line limit for a source file"
done < <((( ${#sources[@]} )) && wc -l "${sources[@]}")
if [[ -f docs/PERFORMANCE.md ]]; then
  n=$(wc -l < docs/PERFORMANCE.md)
  (( n > perf_max )) && report "docs/PERFORMANCE.md:$((perf_max + 1)): $n lines, over the $perf_max-line limit"
fi

# Outside references and history, in every text file (-I skips binary ones).
while IFS= read -r hit; do
  report "${hit%%:*}:$(cut -d: -f2 <<< "$hit"): refers outside the repository: $(cut -d: -f3- <<< "$hit")"
done < <(grep -HInoE ".{0,20}($outside_re).{0,20}" "${files[@]}")
if (( ${#narrative[@]} )); then
  while IFS= read -r hit; do
    report "${hit%%:*}:$(cut -d: -f2 <<< "$hit"): narrates history (git log keeps it): $(cut -d: -f3- <<< "$hit")"
  done < <(grep -HInoE ".{0,20}($history_re).{0,20}" "${narrative[@]}"
    # An ordinal that ends one line with "session" opening the next (comment markers aside).
    awk -v ord="($ordinals)" '
      FNR == 1 { prev = "" }
      prev != "" { s = $0; sub(/^[[:space:]]*(\/\/+|#+|\*+|--)?[[:space:]]*/, "", s)
                   if (s ~ /^sessions?([^a-z]|$)/) print FILENAME ":" prev_line ":" prev " / " substr(s, 1, 20) }
      { prev = ""; if (match($0, "(^|[^a-z-])" ord "[[:space:]]*$")) { prev = substr($0, RSTART); prev_line = FNR } }
    ' "${narrative[@]}")
fi

# Relative Markdown links: inside the repository, to something that exists.
while IFS= read -r hit; do
  f=${hit%%:*}
  rest=${hit#*:}
  line=${rest%%:*}
  target=${rest#*:}
  target=${target#](}
  target=${target%%#*}
  [[ -z $target || $target =~ ^[a-z][a-z0-9+.-]*: ]] && continue  # anchor, http:, mailto:
  if [[ $target == /* ]]; then
    report "$f:$line: absolute link $target"
    continue
  fi
  resolved=$(realpath -ms "$root/$(dirname "$f")/$target")
  if [[ $resolved != "$root" && $resolved != "$root"/* ]]; then
    report "$f:$line: link $target leaves the repository"
  elif [[ ! -e $resolved ]]; then
    report "$f:$line: link $target names no file"
  fi
done < <((( ${#markdown[@]} )) && grep -HnoE '\]\([^)[:space:]]+' "${markdown[@]}")

if (( findings > 0 )); then
  echo "FAIL: $findings finding(s) in ${#files[@]} files"
  exit 1
fi
echo "repo lint: ${#files[@]} files, no findings"
