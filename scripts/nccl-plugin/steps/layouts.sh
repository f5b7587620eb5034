# shellcheck shell=bash
# The layouts step: MegaScale alone under each thread layout in LAYOUTS, entries separated by ';'
# (default "auto;wires=4,io_threads=0;wires=2,io_threads=6;wires=2,io_threads=4;wires=2,io_threads=3"):
# "auto" is the plugin's own choice (MEGASCALE_LAYOUT unset), any other MegaScale entry a
# MEGASCALE_LAYOUT value, e.g. wires=4,io_threads=0,stripes=4; a suffix +gdr, e.g. auto+gdr, adds GDR=1's
# settings to that layout alone, +gdrrx GDR=rx's. An entry "socket-4x4" runs NCCL's Socket net tuned
# (NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4) in the same rounds; put first
# (LAYOUTS="socket-4x4;auto;wires=1,io_threads=6"), every layout is paired with it round by round and
# the tables say how many pairs reach the goal of 1.5x. The bandwidth step's sizes, in ROUNDS
# interleaved rounds, each bandwidth run followed by the same layout's small collectives (the lat step's
# sizes and LAT_ITERS); tables in $OUT/layouts.md (nccl-bandwidth-table.py --variants: medians, and each
# layout's bandwidth, then time per collective, over the first's round by round; columns named by
# layout_name: wires2-io_threads3), the layout "auto" chose and the transport per bandwidth run, both
# from the plugin's stats files. A run whose layout in force (its stats) is not the one asked for fails.
# How many polling threads a host holds varies from host to host: this finds the one for yours.

# layout_run LABEL LAYOUT VIA STATS_DIR [VAR=VALUE ...] -- NCCL_CHECK_ARGS...: one run of the step and
# its checks; returns 1 when the run or a check failed.
layout_run() {
  local label=$1 l=$2 via=$3 stats=$4 failed=0
  shift 4
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  [[ -n $stats ]] && envs+=(MEGASCALE_STATS_DIR="$stats")
  run "$label" "${envs[@]}" -- "$@" --csv "$out/$label.csv" || failed=1
  through_net "$label" "$via" "$stats" || failed=1
  if [[ -n $stats ]] && ! python3 scripts/nccl-plugin/stats.py layout "$stats" --expect "${l%+gdr*}" > "$out/$label.layout" 2>&1; then
    echo "!! $label: $(tail -1 "$out/$label.layout")"
    failed=1
  fi
  return $failed
}

step_layouts() {
  local n=${#layouts[@]} k j l b name label via failed
  local -A layout_csvs=() layout_lat_csvs=()
  local layout_stats=() envs variants=() lat_variants=() goal=()
  for ((k = 1; k <= rounds; k++)); do
    for ((j = 0; j < n; j++)); do
      l=${layouts[(k - 1 + j) % n]}
      b=${l%+gdr*} name=$(layout_name "$l")
      label=layouts-$name-r$k
      # MegaScale's runs keep their stats; tuned Socket is the baseline, and its failures are reported,
      # not the script's.
      envs=("${megascale_env[@]}") via=$megascale_via stats=$out/stats-$label lat_stats=$out/stats-$label-lat
      if [[ $l == socket-4x4 ]]; then
        envs=("${socket_4x4_env[@]}") via=Socket stats="" lat_stats=""
      elif [[ $b != auto ]]; then
        envs+=(MEGASCALE_LAYOUT="$b")
      fi
      [[ $l == *+gdr ]] && envs+=("${gdr_env[@]}") via=$gdr_via
      [[ $l == *+gdrrx ]] && envs+=("${gdr_rx_env[@]}") via=$gdr_rx_via
      failed=0
      layout_run "$label" "$l" "$via" "$stats" "${envs[@]}" -- "${bench_args[@]}" || failed=1
      [[ -s $out/$label.csv ]] && layout_csvs[$l]+="${layout_csvs[$l]:+,}$out/$label.csv"
      [[ -n $stats ]] && layout_stats+=("$label=$stats")
      # The same layout's small collectives (the lat step's sizes), right after: a layout that spins
      # more threads can win bandwidth and lose every collective under 1 MiB, so the choice needs both.
      layout_run "$label-lat" "$l" "$via" "$lat_stats" "${envs[@]}" -- "${lat_args[@]}" || failed=1
      [[ $via == MegaScale* && $failed == 1 ]] && verdict=1
      [[ -s $out/$label-lat.csv ]] && layout_lat_csvs[$l]+="${layout_lat_csvs[$l]:+,}$out/$label-lat.csv"
    done
  done
  for l in "${layouts[@]}"; do
    name=$(layout_name "$l")
    variants+=("$name=${layout_csvs[$l]:-}")
    lat_variants+=("$name=${layout_lat_csvs[$l]:-}")
  done
  # Against tuned Socket (put first), each layout's pairs are counted against the issue's goal.
  [[ ${layouts[0]} == socket-4x4 ]] && goal=(--goal 1.5)
  if python3 scripts/nccl-bandwidth-table.py --variants "${goal[@]}" --ranks "$nranks" "${variants[@]}" \
    > "$out/layouts.md" &&
    { printf '\nSmall collectives under each layout (run after each bandwidth run, %s .. %s, %s iterations):\n\n' \
        "$lat_min" "$lat_max" "$lat_iters"
      python3 scripts/nccl-bandwidth-table.py --variants --metric time --ranks "$nranks" "${lat_variants[@]}"; } \
      >> "$out/layouts.md"; then
    local chose
    chose=$(python3 scripts/nccl-plugin/stats.py layout "$out/stats-layouts-auto-r1" 2> /dev/null | head -1)
    [[ -n $chose ]] && printf '\n"auto" was the plugin'"'"'s own layout: %s\n' "$chose" >> "$out/layouts.md"
    report_table layouts "$out/layouts.md" "${layout_stats[@]}"
  else
    echo "!! layouts: no table (see above)"
    verdict=1
  fi
}
