/* The filter that lets free recognise a sampled block cheaply (alloc.h).
 *
 * Bits are set and cleared only on the slow path, under the lock that
 * the layer recording blocks holds for the bucket (one of its shards');
 * free reads them without a lock.  A free that
 * races with the marking of the same address cannot happen: a block is
 * marked after its allocation returned and before it is handed out, and
 * unmarked by its own free.  A bit read stale by another bucket's change
 * costs a lookup (set) or nothing (the block it stands for is not one
 * being freed). */
#include "alloc/alloc.h"

uint64_t ml__sampled_bits[ML__SAMPLED_BUCKETS / 64];
/* Recorded blocks per bucket; saturates, and a saturated bucket stays
 * marked (lookups, never a missed record).  A byte is enough: a 64-byte
 * bucket holds the start of one or two blocks, more only where regions
 * 256 MiB apart alias. */
static uint8_t counts[ML__SAMPLED_BUCKETS];
_Atomic bool ml__sampled_on;

void ml__sampled_mark(const void *p)
{
	uint32_t b = ml__sampled_bucket(p);
	if (counts[b] != UINT8_MAX)
		counts[b]++;
	__atomic_or_fetch(&ml__sampled_bits[b / 64], (uint64_t)1 << (b % 64),
	                  __ATOMIC_RELAXED);
}

void ml__sampled_unmark(const void *p)
{
	uint32_t b = ml__sampled_bucket(p);
	if (counts[b] == UINT8_MAX || --counts[b])
		return;
	__atomic_and_fetch(&ml__sampled_bits[b / 64],
	                   ~((uint64_t)1 << (b % 64)), __ATOMIC_RELAXED);
}
