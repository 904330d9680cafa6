/* The structure behind counted mappings (mapped.c): per-range records in
 * one array sorted by address, never overlapping, each a run of pages in
 * one state, RESERVED (private, anonymous, not writable: tracked so that
 * a later mprotect or MAP_FIXED can commit it) or COUNTED (private,
 * anonymous, writable).  Pure: no lock, no global, no system call, no
 * allocation (the caller gives the array): mapped.c holds its lock around
 * every call, fuzz/fuzz-ranges.c checks it against a page map.
 *
 * Costs: a lookup is a binary search; an insertion or a removal moves the
 * records on its shorter side (memmove; the array has free slots at both
 * ends, alloc.h), so one at either end is O(1) and one in the middle
 * O(log n + n / 2) with a small constant: 48-byte records, a few
 * thousand in the programs measured (docs/mapped.md, "Cost").  The
 * kernel places new mappings below the older ones (top-down), the
 * bench's land above: both are end insertions.  When the side an
 * insertion needs is out of slots, the records move to the middle of the
 * array (O(n), then O(1) for the next (free slots) / 2 insertions at
 * either end: amortized O(1) while the array is at most about a third
 * full).  Records are not merged: each commit's samples stay with its own
 * pieces.
 *
 * Samples.  A counted range carries the samples its bytes drew (s of them,
 * `unit` bytes each, under the key of the held record that holds them,
 * tasks/held.c).  Cutting a range of m bytes into pieces of m1 and m2
 * bytes gives the first Binomial(s, m1 / m) of them and the second the
 * rest: given s Poisson points placed uniformly on m bytes, that is the
 * law of the points that fall in m1, so each piece carries exactly the
 * samples a mapping of its size would (docs/statistics.md, "Mappings").
 * The samples of bytes that stop counting are given back through
 * R->drop (key, samples x unit).
 *
 * A full array: a piece that needs a record and finds none stops being
 * tracked (its bytes leave the count, its samples are given back, `lost`
 * counts it): the count may then fall below the truth, never above. */
#include "alloc/alloc.h"

#include <string.h>

static uint64_t mix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* Binomial(s, k / m) by s trials: s is a mapping's samples (13 per MiB at
 * the default interval), and cuts are rare next to the system call. */
static uint64_t binomial(struct ml__ranges *R, uint64_t s, uint64_t k,
                         uint64_t m)
{
	if (!s || k >= m)
		return k >= m ? s : 0;
	if (!k)
		return 0;
	double p = (double)k / (double)m;
	uint64_t got = 0;
	for (uint64_t i = 0; i < s; i++)
		got += (double)(mix(&R->rng) >> 11) * 0x1p-53 < p;
	return got;
}

static void give_back(struct ml__ranges *R, uintptr_t key, uint64_t samples,
                      uint64_t unit)
{
	if (key && samples) {
		R->released += samples;
		if (R->drop)
			R->drop(R->ctx, key, samples * unit);
	}
}

static uint64_t len_of(const struct ml__range *r)
{
	return r->end - r->start;
}

/* The records to the middle of the array: free slots on both sides. */
static void centre(struct ml__ranges *R)
{
	struct ml__range *base = R->r - R->front;
	size_t all = R->front + R->cap, front = (all - R->n) / 2;
	if (R->n)
		memmove(base + front, R->r, R->n * sizeof *R->r);
	R->r = base + front;
	R->front = front;
	R->cap = all - front;
}

struct ml__range *ml__ranges_open_slow(struct ml__ranges *R, size_t i)
{
	size_t n = R->n;
	bool down = i < n - i; /* fewer records before i: they move down */
	if (down ? !R->front : n == R->cap)
		centre(R);
	if (down && !R->front)
		down = false; /* one free slot, at the end */
	else if (!down && n == R->cap)
		down = true; /* one free slot, at the front */
	if (down) {
		memmove(R->r - 1, R->r, i * sizeof *R->r);
		R->r--;
		R->front--;
		R->cap++;
	} else if (i < n) {
		memmove(R->r + i + 1, R->r + i, (n - i) * sizeof *R->r);
	}
	R->n = n + 1;
	return R->r + i;
}

void ml__ranges_close_slow(struct ml__ranges *R, size_t i, size_t k)
{
	size_t n = R->n, after = n - i - k;
	if (i < after) {
		if (i)
			memmove(R->r + k, R->r, i * sizeof *R->r);
		R->r += k;
		R->front += k;
		R->cap -= k;
	} else if (after) {
		memmove(R->r + i, R->r + i + k, after * sizeof *R->r);
	}
	R->n = n - k;
}

/* Bytes [from, end) of record i stop being tracked: counted ones leave
 * the count, with their share of the samples. */
static void truncate_at(struct ml__ranges *R, size_t i, uintptr_t from)
{
	struct ml__range *r = &R->r[i];
	uint64_t keep = binomial(R, r->samples, from - r->start, len_of(r));
	give_back(R, r->key, r->samples - keep, r->unit);
	if (r->state == ML__RANGE_COUNTED)
		R->counted -= r->end - from;
	r->samples = keep;
	r->end = from;
}

/* Cut record i at x (start < x < end) into two; with no room, the part
 * from x on stops being tracked. */
static void cut(struct ml__ranges *R, size_t i, uintptr_t x)
{
	if (ml__ranges_full(R)) {
		/* Atomic: read without the lock (mapped.c's full flag). */
		__atomic_fetch_add(&R->lost, 1, __ATOMIC_RELAXED);
		truncate_at(R, i, x);
		return;
	}
	struct ml__range *h = ml__ranges_open(R, i + 1), *l = h - 1;
	*h = *l;
	uint64_t s = l->samples;
	l->samples = binomial(R, s, x - l->start, len_of(l));
	h->samples = s - l->samples;
	l->end = h->start = x;
}

/* Records [i, j) cover [a, b) exactly where they overlap it: cut the ones
 * that straddle a or b (a record truncated by a full array stops short of
 * its old end, and whatever it lost is untracked). */
static void cut_edges(struct ml__ranges *R, uintptr_t a, uintptr_t b,
                      size_t *ip, size_t *jp)
{
	size_t i = ml__ranges_find(R, a);
	if (i < R->n && R->r[i].start < a) {
		cut(R, i, a);
		i++;
	}
	size_t j = i;
	while (j < R->n && R->r[j].end <= b)
		j++;
	if (j < R->n && R->r[j].start < b) {
		cut(R, j, b);
		j++;
	}
	*ip = i;
	*jp = j;
}

static inline void remove_run(struct ml__ranges *R, size_t i, size_t j)
{
	for (size_t k = i; k < j; k++) {
		struct ml__range *r = &R->r[k];
		give_back(R, r->key, r->samples, r->unit);
		if (r->state == ML__RANGE_COUNTED)
			R->counted -= len_of(r);
	}
	if (j > i)
		ml__ranges_close(R, i, j - i);
}

bool ml__ranges_put(struct ml__ranges *R, uintptr_t a, uintptr_t b,
                    unsigned state, uintptr_t key, uint64_t s, uint64_t unit)
{
	if (a >= b)
		return false;
	size_t i = ml__ranges_find(R, a);
	/* Something tracked in [a, b): out first (the common mmap finds
	 * nothing there, the common munmap one whole record). */
	if (!state && i < R->n && R->r[i].start == a && R->r[i].end == b) {
		remove_run(R, i, i + 1);
		return false;
	}
	if (i < R->n && R->r[i].start < b) {
		size_t j;
		cut_edges(R, a, b, &i, &j);
		remove_run(R, i, j);
	}
	if (!state)
		return false;
	if (ml__ranges_full(R)) {
		__atomic_fetch_add(&R->lost, 1, __ATOMIC_RELAXED);
		return false; /* the caller gives its samples back */
	}
	*ml__ranges_open(R, i) =
	    (struct ml__range){.start = a,
	                       .end = b,
	                       .key = state == ML__RANGE_COUNTED ? key : 0,
	                       .samples = state == ML__RANGE_COUNTED ? s : 0,
	                       .unit = unit,
	                       .state = state};
	if (state == ML__RANGE_COUNTED)
		R->counted += b - a;
	return true;
}

uint64_t ml__ranges_bytes(const struct ml__ranges *R, uintptr_t a, uintptr_t b,
                          unsigned state)
{
	uint64_t sum = 0;
	for (size_t i = ml__ranges_find(R, a); i < R->n && R->r[i].start < b;
	     i++) {
		const struct ml__range *r = &R->r[i];
		uintptr_t lo = r->start > a ? r->start : a;
		uintptr_t hi = r->end < b ? r->end : b;
		if (r->state == state && lo < hi)
			sum += hi - lo;
	}
	return sum;
}

unsigned ml__ranges_state_at(const struct ml__ranges *R, uintptr_t x)
{
	size_t i = ml__ranges_find(R, x);
	return i < R->n && R->r[i].start <= x ? R->r[i].state : 0;
}

/* Does protecting [a, b) writable (w) or not change a record? */
static bool protect_changes(const struct ml__ranges *R, uintptr_t a,
                            uintptr_t b, bool w)
{
	for (size_t i = ml__ranges_find(R, a); i < R->n && R->r[i].start < b;
	     i++) {
		const struct ml__range *r = &R->r[i];
		if (w ? r->state == ML__RANGE_RESERVED || r->ro
		      : r->state == ML__RANGE_COUNTED && !r->ro)
			return true;
	}
	return false;
}

uint64_t ml__ranges_protect(struct ml__ranges *R, uintptr_t a, uintptr_t b,
                            unsigned state, uintptr_t key, uint64_t s,
                            uint64_t unit)
{
	bool w = state == ML__RANGE_COUNTED;
	if (a >= b || !protect_changes(R, a, b, w))
		return s; /* nothing there changes */
	size_t i, j;
	cut_edges(R, a, b, &i, &j);
	/* The bytes a commit makes counted share its samples by size. */
	uint64_t m = 0;
	for (size_t k = i; k < j; k++)
		if (w && R->r[k].state == ML__RANGE_RESERVED)
			m += len_of(&R->r[k]);
	for (size_t k = i; k < j; k++) {
		struct ml__range *r = &R->r[k];
		if (r->state == ML__RANGE_COUNTED) {
			/* Counted stays counted: made read-only or PROT_NONE
			 * it keeps its bytes (filled, then protected, they are
			 * still resident) until unmapped or given back. */
			r->ro = !w;
			continue;
		}
		if (!w)
			continue;
		uint64_t got = binomial(R, s, len_of(r), m);
		m -= len_of(r);
		s -= got;
		r->key = key;
		r->samples = got;
		r->unit = unit;
		r->ro = 0;
		r->state = ML__RANGE_COUNTED;
		R->counted += len_of(r);
	}
	return s; /* samples no piece took: none, unless nothing was reserved */
}

void ml__ranges_advise(struct ml__ranges *R, uintptr_t a, uintptr_t b)
{
	bool any = false;
	for (size_t i = ml__ranges_find(R, a);
	     i < R->n && R->r[i].start < b && !any; i++)
		any = R->r[i].state == ML__RANGE_COUNTED && R->r[i].ro;
	if (a >= b || !any)
		return;
	size_t i, j;
	cut_edges(R, a, b, &i, &j);
	for (size_t k = i; k < j; k++) {
		struct ml__range *r = &R->r[k];
		if (r->state != ML__RANGE_COUNTED || !r->ro)
			continue;
		give_back(R, r->key, r->samples, r->unit);
		R->counted -= len_of(r);
		r->key = 0;
		r->samples = 0;
		r->ro = 0;
		r->state = ML__RANGE_RESERVED;
	}
}

void ml__ranges_claim(struct ml__ranges *R, uintptr_t a, uintptr_t b,
                      uint32_t op)
{
	if (a >= b)
		return;
	size_t i = ml__ranges_find(R, a);
	if (i == R->n || R->r[i].start >= b)
		return; /* nothing tracked there */
	size_t j;
	cut_edges(R, a, b, &i, &j);
	for (size_t k = i; k < j; k++)
		R->r[k].op = op;
}

void ml__ranges_unclaim(struct ml__ranges *R, uintptr_t a, uintptr_t b,
                        uint32_t op, bool drop)
{
	/* The claimed records lie in [a, b), perhaps cut further since (a
	 * cut copies the claim), perhaps replaced by a mapping the kernel
	 * made there after the unmap (not claimed: it stays). */
	size_t i = ml__ranges_find(R, a);
	while (i < R->n && R->r[i].start < b) {
		if (R->r[i].op != op) {
			i++;
			continue;
		}
		if (!drop) {
			R->r[i++].op = 0;
			continue;
		}
		size_t j = i + 1;
		while (j < R->n && R->r[j].start < b && R->r[j].op == op)
			j++;
		remove_run(R, i, j);
	}
}

/* Reverse records [i, j). */
static void reverse(struct ml__range *r, size_t i, size_t j)
{
	while (i + 1 < j) {
		struct ml__range t = r[i];
		r[i++] = r[--j];
		r[j] = t;
	}
}

void ml__ranges_move(struct ml__ranges *R, uintptr_t from, uintptr_t len,
                     uintptr_t to)
{
	if (!len || from == to)
		return;
	/* The destination was unmapped by the move (MREMAP_FIXED). */
	ml__ranges_put(R, to, to + len, 0, 0, 0, 0);
	size_t i, j;
	cut_edges(R, from, from + len, &i, &j);
	if (i == j)
		return;
	for (size_t k = i; k < j; k++) {
		R->r[k].start = R->r[k].start - from + to;
		R->r[k].end = R->r[k].end - from + to;
	}
	/* The other records stay sorted, and none lies in the destination:
	 * rotate the run to its place among them. */
	if (to < from) {
		size_t p = ml__ranges_find_in(R, 0, i, to);
		reverse(R->r, p, i);
		reverse(R->r, i, j);
		reverse(R->r, p, j);
	} else {
		size_t q = ml__ranges_find_in(R, j, R->n, to);
		reverse(R->r, i, j);
		reverse(R->r, j, q);
		reverse(R->r, i, q);
	}
}

bool ml__ranges_check(const struct ml__ranges *R)
{
	uint64_t counted = 0;
	for (size_t i = 0; i < R->n; i++) {
		const struct ml__range *r = &R->r[i];
		if (r->start >= r->end || (i && R->r[i - 1].end > r->start))
			return false;
		if (r->state != ML__RANGE_RESERVED &&
		    r->state != ML__RANGE_COUNTED)
			return false;
		if (r->state == ML__RANGE_RESERVED && (r->samples || r->ro))
			return false;
		if (r->state == ML__RANGE_COUNTED)
			counted += len_of(r);
	}
	return counted == R->counted && R->n <= R->cap;
}
