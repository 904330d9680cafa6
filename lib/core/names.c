/* Named frames (ml_frame_name): text a frame source (ml_set_frame_source,
 * stacks.c) puts in a captured stack where the unwinder saw only an
 * interpreter's C function.  A named frame is a stack entry with the top
 * bit set and the name's index below it: no return address has that bit
 * (user space ends below 2^56 on x86-64 and aarch64), so the printers
 * (run/symbols.c) tell the two apart by it.
 *
 * Interned as stacks.c interns stacks, and for the same reason: called
 * inside an allocation, on any thread, it takes no lock.  The table of
 * names and the text they point into are our own mmap'd memory, made at
 * the first name; a slot is claimed by compare-and-swap on the 64-bit hash
 * of its text (two texts of one hash: about 2^-37 with the table full),
 * and the text's bytes are claimed from one bump pointer.  Nothing is
 * ever removed: a profile written later still names every frame. */
#define _GNU_SOURCE
#include "core/core.h"

#include <string.h>

#define NAMES 16384u    /* distinct names; indexes 1..NAMES */
#define TEXT (1u << 20) /* bytes of text, NULs included */
#define MAX_PROBES 64
enum { WRITING, READY, NO_ROOM }; /* a claimed slot's ready */

struct name {
	_Atomic uint64_t key;   /* 0: free; the text's hash, odd */
	_Atomic uint32_t ready; /* READY: off and the text are written */
	uint32_t off;           /* into text */
};

static struct names {
	struct name slot[NAMES];
	_Atomic uint32_t used; /* bytes of text claimed */
	char text[TEXT];
} * _Atomic names;

static struct names *table(void)
{
	return ml__raw_once((void *_Atomic *)&names, sizeof(struct names));
}

static uint64_t hash_text(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325u; /* FNV-1a, then a final mix */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3u;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdu;
	h ^= h >> 33;
	return h | 1;
}

ML_EXPORT uintptr_t ml_frame_name(const char *name, size_t len)
{
	if (!name)
		return 0;
	if (len > ML__NAME_MAX)
		len = ML__NAME_MAX;
	struct names *t = table();
	if (!t)
		return 0;
	uint64_t h = hash_text(name, len);
	for (unsigned p = 0; p < MAX_PROBES; p++) {
		uint32_t i = (uint32_t)((h + p) & (NAMES - 1));
		struct name *e = &t->slot[i];
		uint64_t k =
		    atomic_load_explicit(&e->key, memory_order_acquire);
		if (k == 0 && atomic_compare_exchange_strong(&e->key, &k, h)) {
			uint32_t off = atomic_fetch_add_explicit(
			    &t->used, (uint32_t)len + 1, memory_order_relaxed);
			if (off > TEXT - len - 1) {
				/* No room for the text: the slot keeps its
				 * key, marked, and names nothing (a later call
				 * of the same text finds it so). */
				atomic_store_explicit(&e->ready, NO_ROOM,
				                      memory_order_release);
				return 0;
			}
			char *dst = t->text + off;
			for (size_t j = 0; j < len; j++) {
				char c = name[j];
				dst[j] = c == ';' ? ':'
				                  : (c == '\n' || !c ? ' ' : c);
			}
			dst[len] = 0;
			e->off = off;
			atomic_store_explicit(&e->ready, READY,
			                      memory_order_release);
			return ML__FRAME_NAMED | (i + 1);
		}
		/* Another thread may still be copying the text: the value is
		 * valid now, the text by the time anyone prints it. */
		if (k == h)
			return atomic_load_explicit(
			           &e->ready, memory_order_acquire) == NO_ROOM
			           ? 0
			           : ML__FRAME_NAMED | (i + 1);
	}
	return 0;
}

const char *ml__frame_text(uintptr_t frame)
{
	struct names *t = atomic_load_explicit(&names, memory_order_acquire);
	uintptr_t i = frame & ~ML__FRAME_NAMED;
	if (!t || i == 0 || i > NAMES)
		return "[unnamed]";
	const struct name *e = &t->slot[i - 1];
	if (atomic_load_explicit(&e->ready, memory_order_acquire) != READY)
		return "[unnamed]";
	return t->text + e->off;
}
