# shellcheck shell=bash
# The ceiling step: NCCL's own ceiling over a host-memory net. The Null net
# (build/collectives/nccl/libnccl-net-null.so, NCCL_NET=Null: it moves no bytes, a send completes at
# once, up to 16 ahead of the peer's receives, a receive once its send is posted; results are wrong, so
# --no-check; NCCL_PROTO=Simple, since LL and LL128 wait for flags inside the data) beside Socket 4x4 and
# MegaScale, the bandwidth step's sizes, ROUNDS interleaved rounds; table in $OUT/ceiling.md
# (nccl-bandwidth-table.py --variants: each net over Socket 4x4 round by round, and per collective how
# many pairs reach 1.5x: where the Null net's do not, no net reaches the goal). The Null net reports the
# MegaScale plugin's speed and no PCI path, so NCCL gives it the same channels: what it reaches is the
# most any host-memory net could at that channel count. NULL_RECV_US="100 200" adds the Null net with
# each receive done that many microseconds after its message starts (MEGASCALE_NULL_RECV_US; nets
# null-r100, null-r200): what NCCL reaches over a net whose message takes that long, to set beside
# MegaScale's own time per message, which the step measures from both ends' request timelines
# (MEGASCALE_TRACE_FILE; scripts/megascale-message-times.py: the mean and where it went), and the goal as
# a time per message on that curve. NULL_GDR=1 adds the Null net taking NCCL's GPU buffers
# (MEGASCALE_NULL_PTR_CUDA=1 with NCCL_NET_GDR_LEVEL=SYS; channels via NET/Null/N/GDRDMA), untimed
# (null-gdr) and at each NULL_RECV_US (null-gdr-rN): NCCL's ceiling and curve over a net with GPUDirect,
# where its kernels no longer move the bytes through host memory; NULL_GDR=rx the same on GPU buffers for
# receives only (NCCL_NET_GDR_READ=0 too: null-gdrrx, null-gdrrx-rN), and NULL_GDR="1 rx" both.
step_ceiling() {
  ceiling_nets="socket-4x4 megascale null"  # the first is what the others are compared with
  for u in "${null_recv_us[@]}"; do ceiling_nets+=" null-r$u"; done
  for g in "${null_gdr[@]}"; do
    [[ $g == 0 ]] && continue
    base=null-gdr
    [[ $g == rx ]] && base=null-gdrrx
    ceiling_nets+=" $base"
    for u in "${null_recv_us[@]}"; do ceiling_nets+=" $base-r$u"; done
  done
  NETS="$ceiling_nets" rounds_of ceiling "${bench_args[@]}"
  variants=()
  for net in $ceiling_nets; do variants+=("$net=${round_csvs[$net]:-}"); done
  if python3 scripts/nccl-bandwidth-table.py --variants --goal 1.5 --ranks "$nranks" "${variants[@]}" \
    > "$out/ceiling.md"; then
    printf '\n"null" is the Null net: no bytes moved, a send done at once (up to 16 ahead of the receives), a receive once its send is posted (its results are not checked). Where its pairs fall below 1.5x socket-4x4, no net that takes host buffers and that NCCL gives the same channels reaches the goal there.\n' >> "$out/ceiling.md"
    if [[ " ${null_gdr[*]} " == *" 1 "* ]]; then printf '"null-gdr" and "null-gdr-rN" are the same on NCCL'"'"'s GPU buffers (MEGASCALE_NULL_PTR_CUDA=1, NCCL_NET_GDR_LEVEL=SYS): NCCL'"'"'s ceiling and curve over a net with GPUDirect, whose kernels leave the bytes in GPU memory.\n' >> "$out/ceiling.md"; fi
    if [[ " ${null_gdr[*]} " == *" rx "* ]]; then printf '"null-gdrrx" and "null-gdrrx-rN" are the same on GPU buffers for receives only (NCCL_NET_GDR_READ=0 too): NCCL'"'"'s kernels write their sends to pinned host memory and read their receives from GPU memory.\n' >> "$out/ceiling.md"; fi
    if (( ${#null_recv_us[@]} )); then printf '"null-rN" is the Null net with each receive done N microseconds after its message starts (both its send and its receive posted): what NCCL reaches over a net whose message takes that long. Compare N with MegaScale'"'"'s request times in the transport lines below.\n' >> "$out/ceiling.md"; fi
    { printf "\nMegaScale's time per message in each run (scripts/megascale-message-times.py: both ends' request timelines, from the later of a message's two posts to the receive's test()-done, the start the null-rN nets use):\n\n"
      for ((k = 1; k <= rounds; k++)); do
        # The line for all pairs and, under it, where their time went.
        times=$(python3 scripts/megascale-message-times.py "$out/ceiling-megascale-r$k".trace-*.json 2>&1 |
                  sed -n '1p; 2{/^where it went/s/^/  /p}')
        echo "- ceiling-megascale-r$k: $times"
      done; } >> "$out/ceiling.md"
    report_table ceiling "$out/ceiling.md" "${ms_stats[@]}"
  else
    echo "!! ceiling: no table (see above)"
    verdict=1
  fi
}
