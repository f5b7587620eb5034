#!/usr/bin/env bash
# nccl-tests (github.com/NVIDIA/nccl-tests), built from a checkout of its public source with MPI, and the
# Open MPI runtime it needs, into one folder that can be carried to a GPU host without MPI or a network:
# scripts/bench-coll-nccl-tests.sh runs it there beside `megascale coll`. Nothing of nccl-tests is kept
# in this repository; OUT (default build-nccl-tests/, ignored by git) holds the build.
#
#   git clone https://github.com/NVIDIA/nccl-tests /tmp/nccl-tests
#   scripts/nccl-tests/build.sh /tmp/nccl-tests [OUT]
#
# Needs CUDA (nvcc; CUDA_HOME, default /usr/local/cuda), NCCL (NCCL_HOME, default CUDA_HOME) and Debian's
# Open MPI (openmpi-bin, libopenmpi-dev: installed with apt-get for the build when missing, and removed
# again at the end). GENCODE (default
# sm_90) picks the GPU architecture. OUT gets:
#   bin/*_perf                     nccl-tests' programs of PROGRAMS (default "all_reduce all_gather")
#   openmpi/bin/mpirun, orted      Open MPI 4's launcher, run with OPAL_PREFIX=OUT/openmpi
#   openmpi/lib/                   the libraries both need beyond the C runtime
#   openmpi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/, openmpi/share/openmpi/, openmpi/pmix2/lib/pmix/
#                                  Open MPI's and PMIx's components and help texts, where a relocated
#                                  prefix looks for them
#   env.sh                         the variables that make the relocated runtime find itself
set -euo pipefail
src=${1:?usage: build.sh NCCL_TESTS_SOURCE [OUT]}
out=$(mkdir -p "${2:-build-nccl-tests}" && cd "${2:-build-nccl-tests}" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
nccl=${NCCL_HOME:-$cuda}
gencode=${GENCODE:--gencode=arch=compute_90,code=sm_90}
[[ -f $src/src/common.cu ]] || { echo "build.sh: $src is not an nccl-tests checkout (no src/common.cu)"; exit 2; }
# Open MPI is needed only while this script runs: what it installs it removes again on the way out, since
# its packages bring hwloc's plugins, whose PCI plugin's allocations LeakSanitizer then reports in every
# test that discovers the topology (scripts/test.sh's asan stage).
if ! command -v mpicc > /dev/null || ! command -v orterun > /dev/null; then
  before=$(dpkg-query -W -f '${Package}\n' | sort)
  apt-get update -q && apt-get install -y -q openmpi-bin libopenmpi-dev
  added=$(comm -13 <(echo "$before") <(dpkg-query -W -f '${Package}\n' | sort) | tr '\n' ' ')
  # shellcheck disable=SC2064  # the list is fixed now
  trap "apt-get remove -y -q $added > /dev/null" EXIT
fi
mpi_home=$(dirname "$(dirname "$(mpicc --showme:incdirs | tr ' ' '\n' | grep -m1 openmpi)")")
[[ -d $mpi_home/lib ]] || mpi_home=/usr/lib/x86_64-linux-gnu/openmpi
make -C "$src" -j"$(nproc)" MPI=1 MPI_HOME="$mpi_home" CUDA_HOME="$cuda" NCCL_HOME="$nccl" \
  NVCC_GENCODE="$gencode" BUILDDIR="$out/obj" > "$out/make.log" 2>&1 ||
  { tail -20 "$out/make.log"; echo "build.sh: make failed (the log: $out/make.log)"; exit 1; }
mkdir -p "$out/bin"
# The programs `megascale coll` is compared with (PROGRAMS; each carries its kernels for every type, about
# 6.5 MB).
for p in ${PROGRAMS:-all_reduce all_gather}; do cp "$out/obj/${p}_perf" "$out/bin/"; done

# The runtime, laid out as Open MPI's configured prefix (/usr) maps under OPAL_PREFIX.
ompi=$out/openmpi
rm -rf "$ompi"
mkdir -p "$ompi/bin" "$ompi/lib" "$ompi/share" "$ompi/pmix2/lib"
multi=lib/x86_64-linux-gnu
cp -L "$(command -v orterun)" "$ompi/bin/mpirun"
cp -L "$(command -v orted)" "$ompi/bin/orted"
mkdir -p "$ompi/$multi/openmpi/lib"
cp -r /usr/$multi/openmpi/lib/openmpi3 "$ompi/$multi/openmpi/lib/"
cp -r /usr/share/openmpi "$ompi/share/"
cp -r /usr/$multi/pmix2/lib/pmix "$ompi/pmix2/lib/"
mkdir -p "$ompi/pmix2/share"
cp -r /usr/$multi/pmix2/share/pmix "$ompi/pmix2/share/"
# Every library the programs, the launcher and the components load, but the C runtime and the
# driver's (libcuda) and NCCL (the GPU host's own, the one megascale-coll loads there too).
base='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcuda|libnccl)\.'
libs() { { ldd "$@" 2> /dev/null || true; } | awk '$3 ~ /^\// {print $1, $3}' | sort -u; }
for _ in 1 2; do  # twice: a library's own dependencies
  libs "$out"/bin/*_perf "$ompi"/bin/* "$ompi/$multi"/openmpi/lib/openmpi3/*.so "$ompi"/pmix2/lib/pmix/*.so \
    "$ompi"/lib/*.so* 2> /dev/null | while read -r name path; do
    [[ $name =~ $base ]] || [[ -e $ompi/lib/$name ]] || cp -L "$path" "$ompi/lib/$name"
  done
done
cat > "$out/env.sh" <<'ENV'
# Source this to run the carried nccl-tests under the carried Open MPI (scripts/nccl-tests/build.sh).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX=$here/openmpi PMIX_INSTALL_PREFIX=$here/openmpi/pmix2
export PMIX_MCA_mca_base_component_path=$here/openmpi/pmix2/lib/pmix
export PATH=$here/openmpi/bin:$here/bin:$PATH LD_LIBRARY_PATH=$here/openmpi/lib:${LD_LIBRARY_PATH:-}
# One host, no InfiniBand or fabric libraries: shared memory and TCP between the processes.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_mtl=^ofi,psm,psm2 OMPI_MCA_osc=^ucx
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ENV
echo "nccl-tests $(grep -m1 NCCL_TESTS_VERSION "$src/src/common.h" | tr -d '"' | awk '{print $3}') in $out/bin," \
  "Open MPI in $ompi ($(du -sh "$out" | cut -f1) in all)"
