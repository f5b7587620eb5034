#!/usr/bin/env bash
# `megascale topo`, `topo fabric` and `topo ports` with --json FILE: each document has the fields
# docs/CLI.md ("## megascale topo") lists, checked by cli_json_check.py; plus the behaviour around them:
# `--json -` leaves standard output parseable, `topo fabric` draws by default (or says in one line that
# gnuplot is missing and exits 0), `topo ports -n` is refused naming --lanes, and a polarised hash gets a
# note naming what limits it and the --hash specs that do better.
# Usage: cli_json_topo_test.sh MEGASCALE_BINARY SOURCE_DIR host|fabric|ports
# Exits 77 (skipped) for `host` when megascale was built without hwloc.
set -euo pipefail
megascale=$1
src=$2
which=$3
check="python3 $src/tests/scripts/cli_json_check.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

case $which in
host)
  fixtures=$src/tests/unit/topology/host/fixtures
  if ! "$megascale" topo --hwloc-xml "$fixtures/dgx-h100.xml" --sysfs-root "$fixtures/dgx-h100-sysfs" \
    --json "$dir/topo.json" > "$dir/topo.txt" 2>&1; then
    grep -q "needs hwloc" "$dir/topo.txt" && { echo "SKIPPED: megascale built without hwloc"; exit 77; }
    cat "$dir/topo.txt"
    fail "megascale topo --json exited non-zero"
  fi
  grep -q "^rail map: rail-optimised" "$dir/topo.txt" || fail "the table was not printed beside --json FILE"
  $check "$dir/topo.json" topo source hostname arch cpu_vendor cpu_model cpu_family cpu_model_number \
    'numa_nodes[].os_index' 'numa_nodes[].package' 'numa_nodes[].cpus' 'numa_nodes[].cpu_count' \
    'gpus[].cuda_index' 'gpus[].index_source' 'gpus[].name' 'gpus[].pci.bus_id' 'gpus[].pci.class' \
    'gpus[].pci.vendor' 'gpus[].pci.device' 'gpus[].pci.link_gtps' 'gpus[].pci.link_width' \
    'gpus[].pci.numa_node' 'gpus[].pci.switches' 'nics[].name' 'nics[].rdma_device' 'nics[].netdev' \
    'nics[].port' 'nics[].speed_gbps' 'nics[].link_layer' 'nics[].node_guid' 'nics[].gids' 'nics[].pci.bus_id' \
    'switches[].bus_id' 'paths[]' 'rails[].gpu' 'rails[].nic' 'rails[].nic_name' 'rails[].path' \
    'rails[].numa_node' 'rails[].cpus' rail_optimized nccl_ib_hca warnings
  # '-': the document alone on standard output, the table on standard error.
  "$megascale" topo --hwloc-xml "$fixtures/dgx-h100.xml" --json - 2> /dev/null | $check - topo gpus nics rails
  ;;
fabric)
  fields=(name source tiers gpus servers nics_per_server nic_speed_gbps rail_optimized pods links
    host_bandwidth_gbps bisection_bandwidth_gbps 'switch_tiers[].tier' 'switch_tiers[].switches'
    'switch_tiers[].ports_used' 'switch_tiers[].radix' 'switch_tiers[].down_links'
    'switch_tiers[].down_speed_gbps' 'switch_tiers[].up_links' 'switch_tiers[].up_speed_gbps'
    'switch_tiers[].oversubscription' paths.from paths.to paths.scope paths.path_count paths.switch_sequences
    paths.links_per_path paths.switches_per_position 'paths.ecmp_hops[].decided_at_tier'
    'paths.ecmp_hops[].direction' 'paths.ecmp_hops[].choices' 'paths.first_paths[].switches'
    'paths.first_paths[].links' png)
  "$megascale" topo fabric megascale --from h0:n0 --to h300:n0 --no-plot --json - 2> "$dir/text" \
    > "$dir/fabric.json"
  $check "$dir/fabric.json" "topo fabric" "${fields[@]}"
  grep -q "^paths h0:n0 -> h300:n0 (different pods): 8192 equal-cost paths" "$dir/text" \
    || fail "with --json - the text did not go to standard error"
  # Without gnuplot on PATH: one line saying so, exit 0, no PNG.
  (cd "$dir" && PATH=/nonexistent "$megascale" topo fabric small-2tier > nognuplot.txt) \
    || fail "topo fabric without gnuplot exited non-zero"
  [[ $(grep -c "gnuplot" "$dir/nognuplot.txt") == 1 ]] || fail "no one-line gnuplot notice: $(cat "$dir/nognuplot.txt")"
  [[ ! -e $dir/out ]] || fail "a folder was made although nothing was drawn"
  if command -v gnuplot > /dev/null; then
    # By default it draws into out/topo/ under the working folder and says where.
    (cd "$dir" && "$megascale" topo fabric small-2tier --json f.json > drew.txt)
    grep -q "^drew out/topo/small-2tier.png: the whole fabric" "$dir/drew.txt" || fail "$(cat "$dir/drew.txt")"
    [[ $(head -c 4 "$dir/out/topo/small-2tier.png" | od -An -tx1 | tr -d ' \n') == 89504e47 ]] \
      || fail "out/topo/small-2tier.png is not a PNG"
    python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["png"] == "out/topo/small-2tier.png"' \
      "$dir/f.json" || fail "png field does not name the drawing"
  fi
  ;;
ports)
  "$megascale" topo ports megascale --from h0:n0 --to h300:n0 -q 64 --hash crc16-bisync:per-switch \
    --hash crc16-bisync:offset=5:per-switch --hash crc16-bisync:offset=10:per-switch --json "$dir/ports.json" \
    > "$dir/text"
  $check "$dir/ports.json" "topo ports" fabric from to scope path_count sport_min sport_max dport hash \
    distinct_paths reachable_paths_seen max_lanes_per_link fewest_max_lanes_per_link ports_hashed elapsed_ms \
    notes 'lanes[].lane' 'lanes[].sport' 'lanes[].path' 'lanes[].switches' source_ports
  grep -q "^64 lanes on 64 distinct paths; the busiest switch-to-switch link carries 2 lanes (the fewest possible)" \
    "$dir/text" || fail "$(tail -3 "$dir/text")"
  grep -q "^note" "$dir/text" && fail "a note for a hash that reaches every lane its own path"
  # One hash at every tier: polarised; the note says why and which specs do better, and JSON carries it.
  "$megascale" topo ports megascale --from h0:n0 --to h300:n0 -q 64 --hash crc16-bisync:per-switch \
    --json - 2> "$dir/text" | $check - "topo ports" 'notes[]'
  grep -q "^note: ports 49152-65535 reach only 32 of the 8192 paths: .*(hash polarisation).* would put these lanes on 64 distinct paths" \
    "$dir/text" || fail "no polarisation note: $(grep note "$dir/text")"
  # -n was lanes here and iterations elsewhere: refused, naming the new flag.
  if "$megascale" topo ports megascale --from h0:n0 --to h1:n0 -n 4 > "$dir/old.txt" 2>&1; then
    fail "-n was accepted"
  fi
  grep -q -- "-n was renamed: use -q/--lanes" "$dir/old.txt" || fail "$(cat "$dir/old.txt")"
  # Bad values are refused with status 2, naming the value.
  refused() {
    local want=$1
    shift
    local rc=0
    "$megascale" topo ports megascale "$@" > "$dir/bad.txt" 2>&1 || rc=$?
    [[ $rc == 2 ]] || fail "$* exited $rc"
    grep -q -- "$want" "$dir/bad.txt" || fail "$*: $(cat "$dir/bad.txt")"
  }
  refused "--from endpoint 'h0:n9': no such NIC" --from h0:n9 --to h1:n0
  refused "--sport-min 60000 is above --sport-max 50000" --from h0:n0 --to h1:n0 --sport-min 60000 --sport-max 50000
  refused "--lanes 20 needs 20 source ports, but --sport-min 1 to --sport-max 10 holds 10" \
    --from h0:n0 --to h1:n0 -q 20 --sport-min 1 --sport-max 10
  refused "hash 'crc17'" --from h0:n0 --to h1:n0 --hash crc17
  ;;
*)
  echo "usage: $0 MEGASCALE SOURCE_DIR host|fabric|ports" >&2
  exit 2
  ;;
esac
echo "ok: topo $which"
