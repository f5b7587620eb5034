/* The MegaScale plugin's transport counters for its process, beside the ncclNetPlugin_vN tables: every
 * connection the plugin has opened in this process, open or closed, added up. A program that has NCCL
 * load the plugin reads them between two points of its own (`megascale coll` around each row): find the
 * loaded library (dl_iterate_phdr, then dlopen with RTLD_NOLOAD), dlsym "megascaleNetCounters_v1", call
 * it before and after, and subtract. Plain C, so that any program can include it; the version field and
 * the symbol's suffix change together when the layout does.
 *
 *   megascaleNetCounters_v1_t before, after;
 *   get(&before); ... ; get(&after);   // get = (megascaleNetCounters_v1_fn)dlsym(lib, MEGASCALE_NET_COUNTERS_V1)
 *   uint64_t retransmits = (after.retransmits_fast + after.retransmits_rto) - (before...);
 */
#ifndef MEGASCALE_NCCL_COUNTERS_H_
#define MEGASCALE_NCCL_COUNTERS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEGASCALE_NET_COUNTERS_V1 "megascaleNetCounters_v1"
/* RTT histogram buckets: the engine's (4 per power of two from 64 ns to about 68.7 s, and one above). */
#define MEGASCALE_NET_COUNTERS_RTT_BUCKETS 122

typedef struct {
  uint32_t version;      /* 1 */
  uint32_t rtt_buckets;  /* MEGASCALE_NET_COUNTERS_RTT_BUCKETS */
  uint64_t connections;  /* opened in this process so far (a comm's stripes count once) */
  uint64_t bytes_sent;   /* payload, retransmissions included */
  uint64_t segments_sent;
  uint64_t bytes_received; /* payload placed, each byte once */
  uint64_t retransmits_fast;  /* after SACK/RACK loss detection */
  uint64_t retransmits_rto;   /* after a retransmission timeout */
  uint64_t timeouts;          /* RTO expiries */
  uint64_t timeouts_spurious; /* of those, undone: the originals arrived */
  uint64_t tail_probes;
  uint64_t ecn_marks;         /* CE marks the peers echoed */
  uint64_t cnps_received;
  uint64_t duplicates_dropped; /* segments that arrived twice */
  uint64_t corrupt_dropped;    /* payload CRC mismatches */
  uint64_t rtt_samples;
  uint64_t rtt_bucket_counts[MEGASCALE_NET_COUNTERS_RTT_BUCKETS];
  uint64_t rtt_bucket_upper_ns[MEGASCALE_NET_COUNTERS_RTT_BUCKETS]; /* each bucket's upper edge */
} megascaleNetCounters_v1_t;

/* Fills *out; 0 on success, -1 when out is NULL. Safe from any thread at any time, before the first
 * init too (all zero then). */
typedef int (*megascaleNetCounters_v1_fn)(megascaleNetCounters_v1_t* out);

#ifdef __cplusplus
}
#endif

#endif /* MEGASCALE_NCCL_COUNTERS_H_ */
