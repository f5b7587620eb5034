#!/usr/bin/env bash
# Builds the Soft-RoCE guest's initramfs (gzip'd cpio): busybox-static, the kernel modules for rxe and
# a virtio NIC in load order, rdma-core's rxe provider, the programs the commands use with every
# library `ldd` lists, the guest's /init (scripts/rxe/init) and the commands each guest runs.
# Usage: build-initramfs.sh --kernel-root DIR --commands-dir DIR --out FILE [--bin PATH]...
#                           [--lib PATH]... [--module NAME]...
#   --kernel-root   an unpacked linux-image-*-amd64 package (has lib/modules/VERSION/kernel/)
#   --commands-dir  commands-N files as rxe_parse_commands (lib.sh) writes them
#   --bin PATH      one more host program for the guest's /usr/bin (its libraries come along)
#   --lib PATH      a shared object for the guest's /usr/local/lib, on its LD_LIBRARY_PATH (a plugin
#                   a program opens with dlopen, which ldd does not list; its libraries come along)
#   --module NAME   one more kernel module (its dependencies come along), e.g. sch_netem
# Needs busybox (busybox-static), cpio, gzip, objcopy (binutils) and the verbs programs below.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "build-initramfs: $*" >&2; exit 2; }

kroot="" cmds="" out="" libs=()
bins=(/usr/bin/rdma /usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong
  /usr/bin/ibv_ud_pingpong /usr/bin/ibv_uc_pingpong /usr/bin/ibv_srq_pingpong
  /usr/bin/ib_send_bw /usr/bin/ib_write_bw /usr/bin/ib_read_bw /usr/bin/ib_send_lat /usr/bin/ib_write_lat)
# rxe needs the crypto crc32 (without it `rdma link add` fails: "No such file or directory").
modules=(crc32_generic rdma_rxe virtio_pci virtio_net)
while [ $# -gt 0 ]; do
  case $1 in
    --kernel-root) kroot=$2; shift 2 ;;
    --commands-dir) cmds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --bin) bins+=("$2"); shift 2 ;;
    --module) modules+=("$2"); shift 2 ;;
    --lib) libs+=("$2"); shift 2 ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[ -n "$kroot" ] && [ -n "$cmds" ] && [ -n "$out" ] || die "--kernel-root, --commands-dir and --out are required"
mdirs=("$kroot"/lib/modules/*/kernel)
[ -d "${mdirs[0]}" ] || die "no lib/modules/VERSION/kernel under $kroot"
mdir=${mdirs[0]}
busybox=$(command -v busybox) || die "no busybox (Debian package busybox-static)"
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' ||
  ldd "$busybox" 2>&1 | grep -q 'not a dynamic' || die "$busybox is not static (install busybox-static)"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,root,rxe/modules.d,usr/bin,usr/lib,etc/libibverbs.d}
# The host's merged-/usr links (/lib -> usr/lib, ...), so every library lands where ldd saw it.
for l in lib lib64; do
  if [ -L "/$l" ]; then ln -s "$(readlink "/$l")" "$root/$l"; fi
done
cp "$busybox" "$root/bin/busybox"
cp "$here/init" "$root/init"
cp "$here/rxe-retry" "$root/usr/bin/rxe-retry"
cp "$here/rxe-perftest" "$root/usr/bin/rxe-perftest"
chmod 755 "$root/init" "$root/usr/bin/rxe-retry" "$root/usr/bin/rxe-perftest"
mkdir -p "$root/etc/megascale"
cp "$here/rxe-tcg.yaml" "$root/etc/megascale/rxe-tcg.yaml"
cp "$cmds"/commands-* "$root/rxe/"

# copy_file PATH: PATH's contents at the same path in the guest (links followed).
copy_file() {
  local dest
  dest="$root$(realpath "$(dirname "$1")")/$(basename "$1")"
  [ -e "$dest" ] && return 0
  mkdir -p "$(dirname "$dest")"
  cp -L "$1" "$dest"
}
# copy_libs PATH: every library ldd lists for PATH.
copy_libs() {
  local lib
  while read -r lib; do
    copy_file "$lib"
  done < <(ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
}

for b in "${bins[@]}"; do
  [ -x "$b" ] || die "program $b not found (scripts/install-deps.sh installs ibverbs-utils, perftest, iproute2)"
  ldd "$b" 2>&1 | grep -q 'not found' && die "$b: a library is missing: $(ldd "$b" | grep 'not found')"
  cp -L "$b" "$root/usr/bin/"
  copy_libs "$b"
done
mkdir -p "$root/usr/local/lib"
for l in "${libs[@]}"; do
  [ -r "$l" ] || die "shared object $l not found"
  cp -L "$l" "$root/usr/local/lib/"
  copy_libs "$l"
done
# libibverbs loads the provider named by /etc/libibverbs.d/*.driver from its libibverbs/ folder.
[ -r /etc/libibverbs.d/rxe.driver ] || die "no /etc/libibverbs.d/rxe.driver (package ibverbs-providers)"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
libibverbs=$(ldd /usr/bin/ibv_devinfo | awk '$1 ~ /^libibverbs\.so/ { print $3 }')
providers=("$(dirname "$libibverbs")"/libibverbs/librxe-rdmav*.so)
provider=${providers[0]}
[ -r "$provider" ] || die "no librxe-rdmav*.so beside $libibverbs (package ibverbs-providers)"
copy_file "$provider"
copy_libs "$provider"

# Modules in load order: each after the modules its .modinfo `depends=` names.
declare -A path_of=() loaded=()
while read -r f; do
  n=${f##*/}
  n=${n%.ko}
  path_of[${n//-/_}]=$f
done < <(find "$mdir" -name '*.ko')
order=()
add_module() {
  local name=${1//-/_} dep deps
  [ -n "${loaded[$name]:-}" ] && return 0
  [ -n "${path_of[$name]:-}" ] || die "kernel module $name not in $mdir (built in, or not built?)"
  loaded[$name]=1
  objcopy --dump-section .modinfo="$root/modinfo" "${path_of[$name]}" /dev/null ||
    die "cannot read the .modinfo section of ${path_of[$name]}"
  deps=$(tr '\0' '\n' <"$root/modinfo" | sed -n 's/^depends=//p' | tr ',' ' ')
  rm -f "$root/modinfo"
  for dep in $deps; do add_module "$dep"; done
  order+=("$name")
  cp "${path_of[$name]}" "$root/rxe/modules.d/$name.ko"
}
for m in "${modules[@]}"; do add_module "$m"; done
printf '%s\n' "${order[@]}" >"$root/rxe/modules"

mkdir -p "$(dirname "$out")"
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) | gzip -1 >"$out.tmp"
mv "$out.tmp" "$out"
echo "initramfs $out: $(du -k "$out" | cut -f1) KiB, modules: ${order[*]}"
