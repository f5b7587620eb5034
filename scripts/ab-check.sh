#!/usr/bin/env bash
# scripts/ab-check.sh OLD_BUILD_DIR NEW_BUILD_DIR: shows that two builds behave the same.
#   sim:   every configs/sim/*.yaml scenario through both builds' `megascale sim --out`; the summaries,
#          CSVs, printed summary, warnings and exit status must match byte for byte, except the fields
#          that time the run (IGNORED_FIELDS). The first difference is named: scenario, file, line.
#   bench: the engine micro-benchmark (megascale_micro_bench, BM_EngineBackToBack, segments/s) and
#          `megascale perf --loopback` goodput (bw_average_gbps), old and new alternately --runs times;
#          prints each figure's medians and new/old, flagged when outside 1 +- --tolerance.
# Exits 1 when an output differs or a bench figure is flagged, 2 on bad usage.
#
#   scripts/ab-check.sh [--only sim|bench] [--runs N] [--tolerance T] [--out DIR] [--jobs N]
#                       [--scenarios a,b] [--all] [--no-run] OLD_BUILD_DIR NEW_BUILD_DIR
#   --out DIR        outputs go to DIR/sim/{old,new}/SCENARIO/, the figures to DIR/ab-check.json
#                    (default: a new temporary folder, kept and named at the end)
#   --scenarios a,b  only these scenarios (file names without .yaml)
#   --all            also the scenarios in SLOW_SCENARIOS
#   --jobs N         scenarios run N at a time (default 1)
#   --no-run         compare the outputs already under --out DIR instead of running the scenarios
set -euo pipefail

# Fields that measure the run or the host rather than the simulation: a line of any compared file whose
# first word (a JSON key, a CSV column, a label of the printed summary) is one of these, or that names
# one in parentheses, is left out of the comparison. summary.json of builds that wrote timing there:
# wall_s, events_per_s, peak_rss_mib; the printed summary: its `wall` line; the warnings: the one on
# memory available now (MemAvailable).
IGNORED_FIELDS=(wall_s events_per_s peak_rss_mib wall MemAvailable)

# Scenarios left out unless --all, with the reason (name: reason).
SLOW_SCENARIOS=(
  "htsim-permutation-1024: 1,024 hosts, about a minute a build"
  "htsim-tails-ecmp: 1,024 hosts, about a minute a build"
  "htsim-tails-spray: 1,024 hosts, over a minute a build"
  "megascale-permutation: 12,288 NICs, minutes a build"
)

usage() {
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

only="" runs=3 tolerance=0.1 out="" jobs=1 scenarios="" all=0 no_run=0
while (($#)); do
  case $1 in
    --only) only=${2:-}; shift 2 ;;
    --runs) runs=${2:-}; shift 2 ;;
    --tolerance) tolerance=${2:-}; shift 2 ;;
    --out) out=${2:-}; shift 2 ;;
    --jobs) jobs=${2:-}; shift 2 ;;
    --scenarios) scenarios=${2:-}; shift 2 ;;
    --all) all=1; shift ;;
    --no-run) no_run=1; shift ;;
    -h | --help) usage ;;
    -*) echo "ab-check: unknown flag $1" >&2; usage ;;
    *) break ;;
  esac
done
(($# == 2)) || usage
[[ -z $only || $only == sim || $only == bench ]] || { echo "ab-check: --only: sim or bench, not $only" >&2; exit 2; }
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "ab-check: --runs: a whole number >= 1, not $runs" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "ab-check: --jobs: a whole number >= 1, not $jobs" >&2; exit 2; }
[[ $tolerance =~ ^0?\.[0-9]+$ ]] || { echo "ab-check: --tolerance: a fraction in (0, 1), e.g. 0.1, not $tolerance" >&2; exit 2; }
if ((no_run)) && [[ -z $out ]]; then echo "ab-check: --no-run needs --out DIR" >&2; exit 2; fi

src=$(cd "$(dirname "$0")/.." && pwd)
old_build=$1 new_build=$2
[[ -n $out ]] || out=$(mktemp -d "${TMPDIR:-/tmp}/ab-check.XXXXXX")
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/ab-check.json" "$out/sim.json" "$out/bench.json"

# find_binary BUILD_DIR NAME USUAL_PATH: the executable NAME of a build, at its usual place or anywhere in it.
find_binary() {
  local build=$1 name=$2 usual=$3 found
  if [[ -x $build/$usual ]]; then
    (cd "$(dirname "$build/$usual")" && echo "$(pwd)/$name")
    return
  fi
  found=$(find "$build" -maxdepth 4 -type f -name "$name" -perm -u+x 2>/dev/null | head -n 1)
  [[ -n $found ]] || { echo "ab-check: $build: no $name (build the target $name)" >&2; exit 2; }
  (cd "$(dirname "$found")" && echo "$(pwd)/$name")
}

slow_reason() {
  local entry
  for entry in "${SLOW_SCENARIOS[@]}"; do
    [[ ${entry%%:*} == "$1" ]] && { echo "${entry#*: }"; return; }
  done
  return 0
}

failed=0

# ---- sim ----
# run_scenario TAG MEGASCALE NAME: the scenario's outputs in $out/sim/TAG/NAME/. The run's folder is the
# working directory and --out is a relative name, so the printed "wrote" line is the same for both builds.
run_scenario() {
  local tag=$1 megascale=$2 name=$3 dir=$out/sim/$1/$3 status=0
  rm -rf "$dir"
  mkdir -p "$dir"
  (cd "$dir" && "$megascale" sim "$src/configs/sim/$name.yaml" --quiet --out results \
    > stdout.txt 2> stderr.txt) || status=$?
  echo "$status" > "$dir/exit_status.txt"
}

if [[ $only != bench ]]; then
  list=()
  if [[ -n $scenarios ]]; then
    IFS=, read -r -a list <<< "$scenarios"
    for name in "${list[@]}"; do
      [[ -f $src/configs/sim/$name.yaml ]] || { echo "ab-check: no scenario configs/sim/$name.yaml" >&2; exit 2; }
    done
  else
    for f in "$src"/configs/sim/*.yaml; do list+=("$(basename "$f" .yaml)"); done
  fi
  ran=()
  skipped=()
  for name in "${list[@]}"; do
    reason=$(slow_reason "$name")
    if [[ -n $reason && $all == 0 && -z $scenarios ]]; then
      skipped+=("$name: $reason")
    else
      ran+=("$name")
    fi
  done
  if ((!no_run)); then
    old_megascale=$(find_binary "$old_build" megascale cli/megascale)
    new_megascale=$(find_binary "$new_build" megascale cli/megascale)
    echo "sim: ${#ran[@]} scenarios, old $old_megascale, new $new_megascale"
    for name in "${ran[@]}"; do
      echo "sim: running $name"
      for tag in old new; do
        while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
        megascale=$old_megascale
        [[ $tag == new ]] && megascale=$new_megascale
        run_scenario "$tag" "$megascale" "$name" &
      done
    done
    wait
  fi
  for s in "${skipped[@]}"; do echo "sim: skipped $s (--all runs it)"; done
  python3 - "$out" "${IGNORED_FIELDS[*]}" "${ran[@]}" << 'PY' || failed=1
import json, os, re, sys

out, ignored, names = sys.argv[1], set(sys.argv[2].split()), sys.argv[3:]
first_word = re.compile(r'\s*"?([A-Za-z_][A-Za-z0-9_]*)"?\s*[:,\s]')


def kept(path):
    """(line number, text) of each line the comparison looks at."""
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", "replace").splitlines()
    result = []
    for n, line in enumerate(lines, 1):
        m = first_word.match(line + " ")
        if (m and m.group(1) in ignored) or any(f"({w})" in line for w in ignored):
            continue
        result.append((n, line))
    return result


def files(root):
    found = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            found.add(os.path.relpath(os.path.join(d, f), root))
    return found


report = {"same": [], "different": []}
for name in names:
    old, new = os.path.join(out, "sim", "old", name), os.path.join(out, "sim", "new", name)
    if not os.path.isdir(old) or not os.path.isdir(new):
        print(f"sim: {name}: DIFFERENT: no outputs under {old if not os.path.isdir(old) else new}")
        report["different"].append({"scenario": name, "why": "no outputs"})
        continue
    a, b = files(old), files(new)
    problem = None
    for f in sorted(a ^ b):
        problem = {"file": f, "why": f"only the {'old' if f in a else 'new'} build wrote it"}
        break
    for f in sorted(a & b):
        if problem:
            break
        x, y = kept(os.path.join(old, f)), kept(os.path.join(new, f))
        for i in range(max(len(x), len(y))):
            lx = x[i] if i < len(x) else (None, "<end of file>")
            ly = y[i] if i < len(y) else (None, "<end of file>")
            if lx[1] != ly[1]:
                where = lx[0] if lx[0] is not None else ly[0]
                problem = {"file": f, "line": where, "old": lx[1][:300], "new": ly[1][:300]}
                break
    with open(os.path.join(old, "exit_status.txt")) as fs:
        status = fs.read().strip()
    walls = []
    for d in (old, new):
        # The printed summary's `wall  X s` line (builds whose summary.json carried wall_s print it too).
        try:
            with open(os.path.join(d, "stdout.txt")) as fs:
                m = re.search(r"^wall\s+([0-9.]+) s", fs.read(), re.M)
            walls.append(f"{float(m.group(1)):.1f} s" if m else "?")
        except OSError:
            walls.append("?")
    if problem:
        report["different"].append(dict(scenario=name, **problem))
        print(f"sim: {name}: DIFFERENT in {problem['file']}", end="")
        if "line" in problem:
            print(f" line {problem['line']}:\n  old: {problem['old']}\n  new: {problem['new']}")
        else:
            print(f": {problem['why']}")
    else:
        report["same"].append(name)
        print(f"sim: {name}: same ({len(a)} files, exit status {status}, wall {walls[0]} old, {walls[1]} new)")
with open(os.path.join(out, "sim.json"), "w") as f:
    json.dump(report, f, indent=2)
print(f"sim: {len(report['same'])} same, {len(report['different'])} different")
sys.exit(1 if report["different"] else 0)
PY
fi

# ---- bench ----
if [[ $only != sim ]]; then
  old_megascale=$(find_binary "$old_build" megascale cli/megascale)
  new_megascale=$(find_binary "$new_build" megascale cli/megascale)
  old_micro=$(find_binary "$old_build" megascale_micro_bench bench/megascale_micro_bench)
  new_micro=$(find_binary "$new_build" megascale_micro_bench bench/megascale_micro_bench)
  mkdir -p "$out/bench"
  # A UDP port free now for the loopback runs (each lane binds the port + its index).
  port=$(python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for ((run = 1; run <= runs; run++)); do
    for tag in old new; do
      micro=$old_micro megascale=$old_megascale
      [[ $tag == new ]] && micro=$new_micro megascale=$new_megascale
      echo "bench: run $run/$runs, $tag"
      "$micro" --benchmark_filter=BM_EngineBackToBack --benchmark_format=json \
        --benchmark_out="$out/bench/engine-$tag-$run.json" > /dev/null 2> "$out/bench/engine-$tag-$run.err" ||
        { echo "ab-check: $micro failed: $(tail -n 3 "$out/bench/engine-$tag-$run.err")" >&2; exit 1; }
      "$megascale" perf --loopback --test bw -D 2 -p "$port" --json "$out/bench/perf-$tag-$run.json" \
        > "$out/bench/perf-$tag-$run.txt" 2>&1 ||
        { echo "ab-check: $megascale perf --loopback failed: $(tail -n 3 "$out/bench/perf-$tag-$run.txt")" >&2; exit 1; }
    done
  done
  python3 - "$out" "$runs" "$tolerance" << 'PY' || failed=1
import json, os, statistics, sys

out, runs, tolerance = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
bench = os.path.join(out, "bench")


def figures(tag, run):
    result = {}
    with open(os.path.join(bench, f"engine-{tag}-{run}.json")) as f:
        for b in json.load(f)["benchmarks"]:
            if b.get("run_type", "iteration") == "iteration" and "segments/s" in b:
                result[f"engine {b['name']} segments/s"] = b["segments/s"]
    with open(os.path.join(bench, f"perf-{tag}-{run}.json")) as f:
        for row in json.load(f)["bw"]:
            # A build whose perf JSON predates units in field names writes MsgSize and BW_average.
            size = row.get("size_bytes", row.get("MsgSize"))
            result[f"perf --loopback {size} B goodput Gb/s"] = row.get("bw_average_gbps", row.get("BW_average"))
    return result


samples = {"old": {}, "new": {}}
for tag in samples:
    for run in range(1, runs + 1):
        for name, value in figures(tag, run).items():
            samples[tag].setdefault(name, []).append(value)
rows, flagged = [], 0
width = max(len(n) for n in samples["old"])
# spread: the runs' range around their median, in percent of it (the noise the ratio is read against).
print(f"{'figure':<{width}}  {'old median':>10} {'spread':>6}  {'new median':>10} {'spread':>6}  {'new/old':>7}")
for name, old in samples["old"].items():
    new = samples["new"].get(name)
    if not new:
        print(f"{name:<{width}}  only the old build has it")
        flagged += 1
        continue
    a, b = statistics.median(old), statistics.median(new)
    ratio = b / a if a > 0 else float("inf")
    flag = abs(ratio - 1) > tolerance
    flagged += flag
    spread = [f"{100 * (max(v) - min(v)) / m if m > 0 else 0:.0f}%" for v, m in ((old, a), (new, b))]
    print(f"{name:<{width}}  {a:>10.4g} {spread[0]:>6}  {b:>10.4g} {spread[1]:>6}  {ratio:>7.3f}"
          f"{'  OUTSIDE NOISE' if flag else ''}")
    rows.append({"figure": name, "old": old, "new": new, "old_median": a, "new_median": b,
                 "ratio": ratio, "outside_noise": flag})
with open(os.path.join(out, "bench.json"), "w") as f:
    json.dump({"runs": runs, "tolerance": tolerance, "figures": rows}, f, indent=2)
print(f"bench: {len(rows)} figures, {flagged} outside 1 +- {tolerance}")
sys.exit(1 if flagged else 0)
PY
fi

python3 - "$out" << 'PY'
import json, os, sys
out = sys.argv[1]
result = {}
for part in ("sim", "bench"):
    p = os.path.join(out, f"{part}.json")
    if os.path.exists(p):
        with open(p) as f:
            result[part] = json.load(f)
with open(os.path.join(out, "ab-check.json"), "w") as f:
    json.dump(result, f, indent=2)
PY
echo "ab-check: outputs and figures in $out (ab-check.json)"
if ((failed)); then
  echo "ab-check: FAILED"
  exit 1
fi
echo "ab-check: passed"
