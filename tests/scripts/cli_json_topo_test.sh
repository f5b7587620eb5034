#!/usr/bin/env bash
# `megascale topo`, `topo fabric` and `topo ports` with --json FILE: each document has the fields
# docs/CLI.md ("## megascale topo") lists, checked by cli_json_check.py; plus the behaviour around them:
# `--json -` leaves standard output parseable, `topo fabric` draws by default (or says in one line that
# gnuplot is missing and exits 0), `topo ports -n` is refused naming --lanes, and a polarised hash gets a
# note naming what limits it and the --hash specs that do better. `rdma`: `topo --rdma-only` over the
# verbs fixtures (rxe, ConnectX): the table, every field of the `rdma` object and its values, the GID
# the verbs wire picks under MEGASCALE_IB_*, no devices, a bad root and a malformed GID.
# Usage: cli_json_topo_test.sh MEGASCALE_BINARY SOURCE_DIR host|fabric|ports|rdma
# Exits 77 (skipped) for `host` when megascale was built without hwloc, for `rdma` without the verbs wire.
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
    'rails[].numa_node' 'rails[].cpus' rail_optimized nccl_ib_hca warnings rdma.root rdma.note rdma.devices
  # The RDMA section reads SYSFS_ROOT/class/infiniband: eight devices whose ports have no `state` file,
  # each listed with the reason.
  python3 - "$dir/topo.json" "$fixtures/dgx-h100-sysfs/class/infiniband" << 'EOF'
import json, sys
rdma = json.load(open(sys.argv[1]))["rdma"]
assert rdma["root"] == sys.argv[2], rdma["root"]
if "built without the verbs wire" not in rdma["note"]:
    names = [d["name"] for d in rdma["devices"]]
    assert names == [f"mlx5_{i}" for i in range(8)], names
    for d in rdma["devices"]:
        assert "cannot read the port's state" in d["ports"][0]["problems"][0], d
        assert not d["verbs_choice"]["usable"], d
EOF
  grep -q "^mlx5_0: mlx5, node GUID -, no PCI device" "$dir/topo.txt" || grep -q "built without the verbs wire" \
    "$dir/topo.txt" || fail "no RDMA section after the host table"
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
rdma)
  fixtures=$src/tests/unit/wire/verbs/fixtures
  # The GID choice under the defaults: no MEGASCALE_IB_* from the caller's environment.
  topo() { env -u MEGASCALE_IB_GID_INDEX -u MEGASCALE_IB_ADDR_FAMILY -u MEGASCALE_IB_ADDR_RANGE \
    -u MEGASCALE_IB_ROCE_VERSION_NUM "$megascale" topo --rdma-only "$@"; }
  topo --rdma-root "$fixtures/rxe" --json "$dir/rxe.json" > "$dir/rxe.txt" 2>&1 || fail "$(cat "$dir/rxe.txt")"
  if grep -q "built without the verbs wire" "$dir/rxe.txt"; then
    echo "SKIPPED: megascale built without the verbs wire"
    exit 77
  fi
  has() { grep -qxF -- "$1" "$2" || fail "no line '$1' in $2: $(cat "$2")"; }
  has "RDMA devices ($fixtures/rxe): 1" "$dir/rxe.txt"
  has "rxe0: rxe, node GUID 5054:00ff:fe12:3456, software, on eth0" "$dir/rxe.txt"
  has "  port 1: ACTIVE, LinkUp, Ethernet, MTU 1024, 10 Gb/s, netdev eth0" "$dir/rxe.txt"
  grep -qE "^    1 +RoCE v2 +::ffff:10.0.2.15 +eth0  <- verbs wire$" "$dir/rxe.txt" || fail "GID 1 row"
  grep -q "^  verbs wire: port 1 GID 1 (::ffff:10.0.2.15, RoCE v2): RoCE v2 as MEGASCALE_IB_ROCE_VERSION_NUM=2 asks" \
    "$dir/rxe.txt" || fail "no choice line"
  fields=(rdma.root rdma.note rdma.gid_selection.gid_index rdma.gid_selection.addr_family
    rdma.gid_selection.addr_range rdma.gid_selection.roce_version rdma.gid_selection.error
    'rdma.devices[].name' 'rdma.devices[].kind' 'rdma.devices[].driver' 'rdma.devices[].node_guid'
    'rdma.devices[].pci_path' 'rdma.devices[].pci_bus_id' 'rdma.devices[].parent' 'rdma.devices[].problems'
    'rdma.devices[].ports[].port' 'rdma.devices[].ports[].state' 'rdma.devices[].ports[].active'
    'rdma.devices[].ports[].phys_state' 'rdma.devices[].ports[].link_layer'
    'rdma.devices[].ports[].active_mtu_bytes' 'rdma.devices[].ports[].rate' 'rdma.devices[].ports[].speed_gbps'
    'rdma.devices[].ports[].netdev' 'rdma.devices[].ports[].problems' 'rdma.devices[].ports[].gids[].index'
    'rdma.devices[].ports[].gids[].type' 'rdma.devices[].ports[].gids[].gid' 'rdma.devices[].ports[].gids[].netdev'
    'rdma.devices[].ports[].gids[].ipv4' 'rdma.devices[].ports[].gids[].link_local'
    'rdma.devices[].verbs_choice.usable' 'rdma.devices[].verbs_choice.port' 'rdma.devices[].verbs_choice.gid_index'
    'rdma.devices[].verbs_choice.gid' 'rdma.devices[].verbs_choice.type' 'rdma.devices[].verbs_choice.why'
    'rdma.devices[].verbs_choice.error')
  $check "$dir/rxe.json" topo "${fields[@]}"
  topo --rdma-root "$fixtures/connectx" --json - 2> "$dir/cx.txt" > "$dir/cx.json"
  $check "$dir/cx.json" topo "${fields[@]}"
  has "mlx5_0: mlx5 (mlx5_core), node GUID 0ac0:eb03:0011:2233, PCI 0000:3b:00.0" "$dir/cx.txt"
  has "  port 1: DOWN, Disabled, Ethernet, MTU -, 40 Gb/s, netdev ens1f1" "$dir/cx.txt"
  has "  port 1: ACTIVE, LinkUp, InfiniBand, MTU 4096, 200 Gb/s, netdev ib0" "$dir/cx.txt"
  python3 - "$dir/rxe.json" "$dir/cx.json" << 'EOF'
import json, sys
rxe, cx = (json.load(open(p))["rdma"] for p in sys.argv[1:3])
assert rxe["gid_selection"] == {"gid_index": -1, "addr_family": "AF_INET", "addr_range": "", "roce_version": 2,
                                "error": ""}, rxe["gid_selection"]
assert rxe["note"] == ""
[d] = rxe["devices"]
assert (d["name"], d["kind"], d["driver"], d["node_guid"], d["pci_path"], d["pci_bus_id"], d["parent"],
        d["problems"]) == ("rxe0", "rxe", "", "5054:00ff:fe12:3456", "", "", "eth0", []), d
[p] = d["ports"]
assert (p["port"], p["state"], p["active"], p["phys_state"], p["link_layer"], p["active_mtu_bytes"], p["rate"],
        p["speed_gbps"], p["netdev"], p["problems"]) == (
    1, "ACTIVE", True, "LinkUp", "Ethernet", 1024, "10 Gb/sec (1X QDR)", 10, "eth0", []), p
assert p["gids"] == [
    {"index": 0, "type": "RoCE v2", "gid": "fe80::5054:ff:fe12:3456", "netdev": "eth0", "ipv4": False,
     "link_local": True},
    {"index": 1, "type": "RoCE v2", "gid": "::ffff:10.0.2.15", "netdev": "eth0", "ipv4": True,
     "link_local": False}], p["gids"]
c = d["verbs_choice"]
assert (c["usable"], c["port"], c["gid_index"], c["gid"], c["type"], c["error"]) == (
    True, 1, 1, "::ffff:10.0.2.15", "RoCE v2", ""), c
assert "IPv4 (AF_INET)" in c["why"] and "a global address" in c["why"], c["why"]

m0, m1, m2 = cx["devices"]
assert [d["name"] for d in cx["devices"]] == ["mlx5_0", "mlx5_1", "mlx5_2"]
for d, bus in ((m0, "0000:3b:00.0"), (m1, "0000:3b:00.1"), (m2, "0000:5e:00.0")):
    assert (d["kind"], d["driver"], d["pci_bus_id"], d["parent"]) == ("mlx5", "mlx5_core", bus, ""), d
    assert d["pci_path"].endswith("/" + bus), d["pci_path"]
assert m0["node_guid"] == "0ac0:eb03:0011:2233"
assert [g["index"] for g in m0["ports"][0]["gids"]] == list(range(8))
assert [g["type"] for g in m0["ports"][0]["gids"][:2]] == ["RoCE v1", "RoCE v2"]
assert m0["ports"][0]["active_mtu_bytes"] == 0 and m0["ports"][0]["speed_gbps"] == 100
assert (m0["verbs_choice"]["gid_index"], m0["verbs_choice"]["gid"]) == (3, "::ffff:192.168.1.10")
assert (m1["ports"][0]["state"], m1["ports"][0]["phys_state"], m1["ports"][0]["active"]) == ("DOWN", "Disabled", False)
assert not m1["verbs_choice"]["usable"] and 'state "1: DOWN"' in m1["verbs_choice"]["error"], m1["verbs_choice"]
assert m2["ports"][0]["link_layer"] == "InfiniBand" and m2["ports"][0]["netdev"] == "ib0"
assert m2["ports"][0]["gids"][0]["netdev"] == ""
assert "not Ethernet" in m2["verbs_choice"]["error"], m2["verbs_choice"]
EOF
  # MEGASCALE_IB_*: IPv6 picks the fd00::10 RoCE v2 entry; an explicit index; a bad value is reported.
  MEGASCALE_IB_ADDR_FAMILY=AF_INET6 "$megascale" topo --rdma-only --rdma-root "$fixtures/connectx" > "$dir/v6.txt"
  grep -q "^  verbs wire: port 1 GID 5 (fd00::10, RoCE v2): .*IPv6 (AF_INET6)" "$dir/v6.txt" || fail "$(cat "$dir/v6.txt")"
  MEGASCALE_IB_GID_INDEX=0 "$megascale" topo --rdma-only --rdma-root "$fixtures/rxe" > "$dir/idx.txt"
  has "  verbs wire: port 1 GID 0 (fe80::5054:ff:fe12:3456, RoCE v2): MEGASCALE_IB_GID_INDEX=0" "$dir/idx.txt"
  MEGASCALE_IB_ADDR_RANGE=10.9.0.0/16 "$megascale" topo --rdma-only --rdma-root "$fixtures/rxe" > "$dir/range.txt"
  grep -q "^  verbs wire: unusable: rxe0 port 1: no usable GID for AF_INET.*outside MEGASCALE_IB_ADDR_RANGE" \
    "$dir/range.txt" || fail "$(cat "$dir/range.txt")"
  MEGASCALE_IB_ROCE_VERSION_NUM=3 "$megascale" topo --rdma-only --rdma-root "$fixtures/rxe" --json - 2> "$dir/bad.txt" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin)["rdma"]; e=r["gid_selection"]["error"]; assert "MEGASCALE_IB_ROCE_VERSION_NUM=3" in e, e; assert r["devices"][0]["verbs_choice"]["error"] == e'
  grep -q "^  verbs wire: no choice: MEGASCALE_IB_ROCE_VERSION_NUM=3: expected 1 or 2" "$dir/bad.txt" || fail "$(cat "$dir/bad.txt")"
  # No devices: one line, an empty list; an absent root and an empty one.
  topo --rdma-root "$dir/none" --json - 2> "$dir/none.txt" | python3 -c 'import json,sys; assert json.load(sys.stdin)["rdma"]["devices"] == []'
  [[ $(grep -cv '^$' "$dir/none.txt") == 1 ]] || fail "more than one line: $(cat "$dir/none.txt")"
  has "no RDMA devices (no $dir/none)" "$dir/none.txt"
  mkdir "$dir/empty"
  topo --rdma-root "$dir/empty" > "$dir/empty.txt"
  has "no RDMA devices (no device under $dir/empty)" "$dir/empty.txt"
  # A root that is a file: status 2, naming it.
  rc=0
  topo --rdma-root "$fixtures/README.md" > "$dir/file.txt" 2>&1 || rc=$?
  [[ $rc == 2 ]] || fail "a file as --rdma-root exited $rc"
  grep -q "^megascale topo: RDMA devices: $fixtures/README.md: Not a directory" "$dir/file.txt" || fail "$(cat "$dir/file.txt")"
  # A malformed GID is left out with the reason; the rest is listed and chosen from.
  cp -r "$fixtures/rxe" "$dir/broken"
  echo "fe80::1" > "$dir/broken/rxe0/ports/1/gids/0"
  topo --rdma-root "$dir/broken" --json "$dir/broken.json" > "$dir/broken.txt" || fail "$(cat "$dir/broken.txt")"
  has "    ! $dir/broken/rxe0/ports/1/gids/0: \"fe80::1\" is not a GID (entry left out)" "$dir/broken.txt"
  grep -q "^  verbs wire: port 1 GID 1 " "$dir/broken.txt" || fail "no choice beside the malformed GID"
  python3 - "$dir/broken.json" << 'EOF'
import json, sys
[p] = json.load(open(sys.argv[1]))["rdma"]["devices"][0]["ports"]
assert [g["index"] for g in p["gids"]] == [1], p["gids"]
assert len(p["problems"]) == 1 and "is not a GID (entry left out)" in p["problems"][0], p["problems"]
EOF
  # --rdma-only takes none of the host model's inputs.
  rc=0
  "$megascale" topo --rdma-only --xml "$dir/x.xml" > "$dir/only.txt" 2>&1 || rc=$?
  [[ $rc == 2 ]] && grep -q "takes no --xml" "$dir/only.txt" || fail "--rdma-only --xml: $rc $(cat "$dir/only.txt")"
  ;;
*)
  echo "usage: $0 MEGASCALE SOURCE_DIR host|fabric|ports|rdma" >&2
  exit 2
  ;;
esac
echo "ok: topo $which"
