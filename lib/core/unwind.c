/* Stacks: the call stack of an allocation, for run-mode profiles and for
 * frame safety (which code lies between an allocation and a task's
 * ml_run).
 *
 * The walk is libgcc's _Unwind_Backtrace, from the libgcc_s that the
 * library links anyway.  It opens no descriptor and takes no lock of its
 * own where glibc has _dl_find_object (2.35).
 * libunwind 1.6 was used before: its first use opens a pipe to validate
 * addresses (the lowest free descriptors: a program started with stdin
 * closed found a pipe as fd 0) and reopens it inside a later walk when the
 * program has closed it; no setting turns that off.  Costs of each way are
 * in docs/performance.md.
 *
 * Frame safety only runs after an interruption (never on the sampling
 * path).  Each frame is attributed to the object holding its return
 * address; an object is "runtime" when abandoning or failing inside it is
 * unsafe: the C library, the loader, libstdc++, libgcc, libunwind, the
 * allocator underneath (jemalloc, tcmalloc, mimalloc), and this
 * library (except its own task frames, which a jump is meant to leave). */
#define _GNU_SOURCE
#include "core/core.h"

#include <dlfcn.h>
#include <link.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <unwind.h>

/* What libgcc's _Unwind_Find_FDE fills in besides the FDE. */
struct ml_eh_bases {
	void *tbase, *dbase, *func;
};

/* libgcc_s's unwinder, by name (the same on every architecture). */
static struct {
	_Unwind_Reason_Code (*backtrace)(_Unwind_Trace_Fn, void *);
	_Unwind_Ptr (*get_ip_info)(struct _Unwind_Context *, int *);
	_Unwind_Word (*get_cfa)(struct _Unwind_Context *);
	_Unwind_Ptr (*region_start)(struct _Unwind_Context *);
	const void *(*find_fde)(void *, struct ml_eh_bases *); /* optional */
} U;
static _Atomic bool loaded;

/* ---- Loading ---------------------------------------------------------- */

void ml__unwind_load(void)
{
	/* libgcc_s is loaded already: the library needs it for its own
	 * -fexceptions cleanups (_Unwind_Resume).  By handle, so that a
	 * program's libunwind, which exports the same names, cannot stand
	 * in for it.  At start: a dlopen inside malloc can deadlock on the
	 * loader lock. */
	void *h = dlopen(ML_GCC_S_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		ml__diag(
		    "cannot load %s: jumps wait for ml_check or ml_unmask, "
		    "and run-mode reports have no stacks",
		    ML_GCC_S_SONAME);
		return;
	}
#define SYM(field, name) *(void **)&U.field = dlsym(h, name)
	SYM(backtrace, "_Unwind_Backtrace");
	SYM(get_ip_info, "_Unwind_GetIPInfo");
	SYM(get_cfa, "_Unwind_GetCFA");
	SYM(region_start, "_Unwind_GetRegionStart");
	SYM(find_fde, "_Unwind_Find_FDE");
#undef SYM
	if (U.backtrace && U.get_ip_info && U.get_cfa && U.region_start)
		atomic_store_explicit(&loaded, true, memory_order_release);
	else
		ml__diag("%s lacks _Unwind_Backtrace", ML_GCC_S_SONAME);
}

bool ml__unwind_loaded(void)
{
	return atomic_load_explicit(&loaded, memory_order_acquire);
}

/* ---- Capture ---------------------------------------------------------- */

struct capture {
	void **ip;
	int n, max;
};

static _Unwind_Reason_Code capture_frame(struct _Unwind_Context *ctx, void *arg)
{
	struct capture *c = arg;
	if (c->n == c->max)
		return _URC_END_OF_STACK;
	int before = 0;
	uintptr_t ip = U.get_ip_info(ctx, &before);
	if (!ip)
		return _URC_END_OF_STACK;
	/* Return addresses throughout, as the symbolizer expects (a signal
	 * frame's address is the interrupted instruction itself). */
	c->ip[c->n++] = (void *)(ip + (before != 0));
	return _URC_NO_REASON;
}

/* ---- The fast capture (x86-64) --------------------------------------- *
 *
 * _Unwind_Backtrace interprets each frame's call-frame information anew:
 * about 1 800 instructions a frame, 20 times what libunwind's trace cache
 * cost (docs/performance.md).  Profiles capture a stack at every sample, so
 * this keeps, per return address, the frame's rule (the CFA is rsp or rbp
 * plus an offset; the return address and rbp are saved at offsets from
 * it), computed once from the FDE that libgcc finds (_Unwind_Find_FDE), and
 * then walks by the rules: three loads a frame.  Anything else (signal
 * frames, DWARF expressions, code without an object) makes the whole
 * capture go the slow way. */
#if defined(__x86_64__) && HAVE__DL_FIND_OBJECT && !defined(ML_NO_FAST_UNWIND)
#define FAST_UNWIND 1

enum { RK_FREE = 0, RK_OK = 1, RK_END = 2, RK_SLOW = 3 };
#define RULE_SAME_BP 0x8u
#define RULE_BP_CFA 0x4u

static uint64_t pack(unsigned kind, bool cfa_bp, int32_t cfa_off, bool bp_same,
                     int32_t bp_off, int32_t ra_off)
{
	return kind | (cfa_bp ? RULE_BP_CFA : 0) |
	       (bp_same ? RULE_SAME_BP : 0) |
	       ((uint64_t)(uint32_t)(cfa_off & 0xffffff) << 8) |
	       ((uint64_t)(uint16_t)bp_off << 32) |
	       ((uint64_t)(uint16_t)ra_off << 48);
}
static int32_t rule_cfa_off(uint64_t r)
{
	return (int32_t)((uint32_t)(r >> 8) << 8) >> 8;
}
static int32_t rule_bp_off(uint64_t r)
{
	return (int16_t)(r >> 32);
}
static int32_t rule_ra_off(uint64_t r)
{
	return (int16_t)(r >> 48);
}

static uint64_t uleb(const uint8_t **p, const uint8_t *end, bool *bad)
{
	uint64_t v = 0;
	for (unsigned s = 0;; s += 7) {
		if (*p >= end || s > 63) {
			*bad = true;
			return 0;
		}
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			return v;
	}
}
static int64_t sleb(const uint8_t **p, const uint8_t *end, bool *bad)
{
	/* Unsigned arithmetic: no shift into the sign bit. */
	uint64_t v = 0;
	unsigned s = 0;
	uint8_t b;
	do {
		if (*p >= end || s > 63) {
			*bad = true;
			return 0;
		}
		b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << s;
		s += 7;
	} while (b & 0x80);
	if (s < 64 && (b & 0x40))
		v |= ~(uint64_t)0 << s;
	return (int64_t)v;
}
/* a * b, wrapping (malformed CFI must not be undefined behaviour; the
 * rule's range checks reject what wrapped). */
static int64_t mul(int64_t a, int64_t b)
{
	return (int64_t)((uint64_t)a * (uint64_t)b);
}

/* Size of a pointer in this DW_EH_PE encoding; -1: variable or unknown. */
static int enc_size(uint8_t enc)
{
	if (enc == 0xff)
		return 0;
	if ((enc & 0x70) == 0x50)
		return -1; /* DW_EH_PE_aligned: padding first */
	switch (enc & 0x0f) {
	case 0x00:
		return sizeof(void *);
	case 0x02:
	case 0x0a:
		return 2;
	case 0x03:
	case 0x0b:
		return 4;
	case 0x04:
	case 0x0c:
		return 8;
	}
	return -1;
}

enum { H_SAME = 0, H_OFF = 1, H_UNDEF = 2 };
struct row {
	unsigned cfa_reg;
	int64_t cfa_off;
	uint8_t how[2]; /* 0: rbp, 1: ra */
	int64_t off[2];
};
#define DW_RSP 7
#define DW_RBP 6

static int slot_of(uint64_t reg, uint64_t ra_col)
{
	return reg == DW_RBP ? 0 : reg == ra_col ? 1 : -1;
}

/* Run CFA instructions [p, end) from row r up to pc `target` (loc: where
 * they start).  false: something this walker does not follow. */
static bool run_cfa(const uint8_t *p, const uint8_t *end, struct row *r,
                    const struct row *init, uintptr_t loc, uintptr_t target,
                    uint64_t code_align, int64_t data_align, uint64_t ra_col)
{
	struct row stack[8];
	int depth = 0;
	bool bad = false;
	while (p < end && !bad) {
		uint8_t op = *p++;
		uint64_t reg, delta = 0;
		int64_t off;
		int s;
		switch (op >> 6) {
		case 1:
			delta = op & 0x3f;
			goto advance;
		case 2:
			reg = op & 0x3f;
			off = mul((int64_t)uleb(&p, end, &bad), data_align);
			goto offset;
		case 3:
			reg = op & 0x3f;
			goto restore;
		}
		switch (op) {
		case 0x00:
			continue;
		case 0x02:
			if (end - p < 1)
				return false;
			delta = p[0];
			p += 1;
			goto advance;
		case 0x03: {
			if (end - p < 2)
				return false;
			uint16_t v;
			memcpy(&v, p, 2);
			delta = v;
			p += 2;
			goto advance;
		}
		case 0x04: {
			if (end - p < 4)
				return false;
			uint32_t v;
			memcpy(&v, p, 4);
			delta = v;
			p += 4;
			goto advance;
		}
		case 0x05:
			reg = uleb(&p, end, &bad);
			off = mul((int64_t)uleb(&p, end, &bad), data_align);
			goto offset;
		case 0x11:
			reg = uleb(&p, end, &bad);
			off = mul(sleb(&p, end, &bad), data_align);
			goto offset;
		case 0x2f:
			reg = uleb(&p, end, &bad);
			off = mul((int64_t)uleb(&p, end, &bad), -data_align);
			goto offset;
		case 0x06:
			reg = uleb(&p, end, &bad);
			goto restore;
		case 0x07: /* undefined */
		case 0x08: /* same value */
			reg = uleb(&p, end, &bad);
			if ((s = slot_of(reg, ra_col)) >= 0)
				r->how[s] = op == 0x07 ? H_UNDEF : H_SAME;
			continue;
		case 0x09: /* register */
			reg = uleb(&p, end, &bad);
			uleb(&p, end, &bad);
			if (slot_of(reg, ra_col) >= 0 || reg == DW_RSP)
				return false;
			continue;
		case 0x0a:
			if (depth == 8)
				return false;
			stack[depth++] = *r;
			continue;
		case 0x0b:
			if (depth == 0)
				return false;
			*r = stack[--depth];
			continue;
		case 0x0c:
			r->cfa_reg = (unsigned)uleb(&p, end, &bad);
			r->cfa_off = (int64_t)uleb(&p, end, &bad);
			continue;
		case 0x12:
			r->cfa_reg = (unsigned)uleb(&p, end, &bad);
			r->cfa_off = mul(sleb(&p, end, &bad), data_align);
			continue;
		case 0x0d:
			r->cfa_reg = (unsigned)uleb(&p, end, &bad);
			continue;
		case 0x0e:
			r->cfa_off = (int64_t)uleb(&p, end, &bad);
			continue;
		case 0x13:
			r->cfa_off = mul(sleb(&p, end, &bad), data_align);
			continue;
		case 0x10: /* expression */
		case 0x16: /* val_expression */
			reg = uleb(&p, end, &bad);
			delta = uleb(&p, end, &bad);
			if (slot_of(reg, ra_col) >= 0 || reg == DW_RSP ||
			    delta > (uint64_t)(end - p))
				return false;
			p += delta;
			continue;
		case 0x14: /* val_offset */
		case 0x15:
			reg = uleb(&p, end, &bad);
			if (op == 0x14)
				uleb(&p, end, &bad);
			else
				sleb(&p, end, &bad);
			if (slot_of(reg, ra_col) >= 0 || reg == DW_RSP)
				return false;
			continue;
		case 0x2e: /* GNU_args_size */
			uleb(&p, end, &bad);
			continue;
		default: /* set_loc, def_cfa_expression, vendor ops */
			return false;
		}
	advance:
		loc += delta * code_align;
		if (loc > target)
			return true;
		continue;
	offset:
		if ((s = slot_of(reg, ra_col)) >= 0)
			r->how[s] = H_OFF, r->off[s] = off;
		else if (reg == DW_RSP)
			return false;
		continue;
	restore:
		if ((s = slot_of(reg, ra_col)) >= 0) {
			if (!init)
				return false;
			r->how[s] = init->how[s];
			r->off[s] = init->off[s];
		}
		continue;
	}
	return !bad;
}

/* The rule for the frame whose pc is `pc` (a return address minus one). */
static uint64_t build_rule(uintptr_t pc)
{
	struct ml_eh_bases bases;
	/* The walk lock keeps fork away from libgcc's own mutex (taken when
	 * frames were registered at run time). */
	ml__unwind_lock();
	const uint8_t *fde = U.find_fde((void *)pc, &bases);
	ml__unwind_unlock();
	if (!fde)
		return pack(RK_END, 0, 0, 1, 0, 0);
	uint32_t len, cie_id;
	memcpy(&len, fde, 4);
	if (len == 0 || len == 0xffffffffu)
		return RK_SLOW;
	const uint8_t *fde_end = fde + 4 + len;
	memcpy(&cie_id, fde + 4, 4);
	const uint8_t *cie = fde + 4 - cie_id;
	uint32_t cie_len;
	memcpy(&cie_len, cie, 4);
	if (cie_len == 0 || cie_len == 0xffffffffu)
		return RK_SLOW;
	const uint8_t *cie_end = cie + 4 + cie_len, *p = cie + 8;
	bool bad = false;
	uint8_t version = *p++;
	const char *aug = (const char *)p;
	const uint8_t *nul = memchr(p, 0, (size_t)(cie_end - p));
	if (!nul || (version != 1 && version != 3))
		return RK_SLOW;
	p = nul + 1;
	if (aug[0] == 'e' && aug[1] == 'h')
		return RK_SLOW;
	uint64_t code_align = uleb(&p, cie_end, &bad);
	int64_t data_align = sleb(&p, cie_end, &bad);
	uint64_t ra_col = version == 1 ? *p++ : uleb(&p, cie_end, &bad);
	uint8_t fde_enc = 0;
	bool z = aug[0] == 'z';
	if (z) {
		uint64_t alen = uleb(&p, cie_end, &bad);
		if (bad || alen > (uint64_t)(cie_end - p))
			return RK_SLOW;
		const uint8_t *aend = p + alen;
		for (const char *a = aug + 1; *a; a++) {
			if (*a == 'R') {
				fde_enc = *p++;
			} else if (*a == 'P') {
				int n = enc_size(*p++);
				if (n < 0)
					return RK_SLOW;
				p += n;
			} else if (*a == 'L') {
				p++;
			} else {
				return RK_SLOW; /* 'S' (signal frame) or unknown
				                 */
			}
		}
		if (p > aend)
			return RK_SLOW;
		p = aend;
	} else if (aug[0]) {
		return RK_SLOW;
	}
	if (bad || ra_col == DW_RBP || ra_col == DW_RSP)
		return RK_SLOW;
	struct row init = {.how = {H_SAME, H_SAME}}, r;
	if (!run_cfa(p, cie_end, &init, NULL, 0, UINTPTR_MAX, code_align,
	             data_align, ra_col))
		return RK_SLOW;
	/* The FDE: pc_begin, pc_range, augmentation data, instructions. */
	int n = enc_size(fde_enc);
	if (n <= 0)
		return RK_SLOW;
	const uint8_t *q = fde + 8 + 2 * n;
	if (z) {
		uint64_t alen = uleb(&q, fde_end, &bad);
		if (bad || alen > (uint64_t)(fde_end - q))
			return RK_SLOW;
		q += alen;
	}
	r = init;
	if (!run_cfa(q, fde_end, &r, &init, (uintptr_t)bases.func, pc,
	             code_align, data_align, ra_col))
		return RK_SLOW;
	if (r.how[1] == H_UNDEF)
		return pack(RK_END, 0, 0, 1, 0, 0);
	if ((r.cfa_reg != DW_RSP && r.cfa_reg != DW_RBP) || r.how[1] != H_OFF ||
	    r.how[0] == H_UNDEF || r.cfa_off < -(1 << 23) ||
	    r.cfa_off >= (1 << 23) || r.off[1] != (int16_t)r.off[1] ||
	    (r.how[0] == H_OFF && r.off[0] != (int16_t)r.off[0]))
		return RK_SLOW;
	return pack(RK_OK, r.cfa_reg == DW_RBP, (int32_t)r.cfa_off,
	            r.how[0] == H_SAME, (int32_t)r.off[0], (int32_t)r.off[1]);
}

#define NRULES 4096
/* pc -> rule, shared by all threads, lock-free: a seqlock on the key (BUSY
 * while a writer fills the entry).  The tag (the object's .eh_frame and
 * map start) keeps a rule from outliving its object: code dlopen'ed where
 * an unloaded object was gets its own. */
static struct {
	_Atomic uintptr_t key, tag;
	_Atomic uint64_t rule;
} rules[NRULES];
#define BUSY ((uintptr_t)1)

static uint64_t rule_for(uintptr_t pc)
{
	struct dl_find_object fo;
	if (_dl_find_object((void *)pc, &fo) != 0 || !fo.dlfo_eh_frame)
		return RK_SLOW; /* JIT code with registered frames, or none */
	uintptr_t tag =
	    (uintptr_t)fo.dlfo_eh_frame ^ ((uintptr_t)fo.dlfo_map_start << 1);
	size_t h = (size_t)((pc * 0x9e3779b97f4a7c15u) >> 40) & (NRULES - 1);
	uintptr_t k = atomic_load_explicit(&rules[h].key, memory_order_acquire);
	if (k == pc) {
		uint64_t r =
		    atomic_load_explicit(&rules[h].rule, memory_order_relaxed);
		uintptr_t t =
		    atomic_load_explicit(&rules[h].tag, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&rules[h].key, memory_order_relaxed) ==
		        pc &&
		    t == tag)
			return r;
	}
	uint64_t r = build_rule(pc);
	k = atomic_load_explicit(&rules[h].key, memory_order_relaxed);
	if (k != BUSY &&
	    atomic_compare_exchange_strong(&rules[h].key, &k, BUSY)) {
		atomic_thread_fence(memory_order_release);
		atomic_store_explicit(&rules[h].rule, r, memory_order_relaxed);
		atomic_store_explicit(&rules[h].tag, tag, memory_order_relaxed);
		atomic_store_explicit(&rules[h].key, pc, memory_order_release);
	}
	return r;
}

/* Frames from the caller of this function, as return addresses; -1: a
 * frame this walker does not follow (use the slow walk). */
__attribute__((noinline)) static int fast_backtrace(void **out, int max)
{
	uintptr_t *fp = __builtin_frame_address(0);
	uintptr_t bp = fp[0], ip = fp[1], sp = (uintptr_t)(fp + 2);
	int n = 0;
	while (n < max && ip) {
		out[n++] = (void *)ip;
		uint64_t r = rule_for(ip - 1);
		unsigned kind = r & 3;
		if (kind == RK_END)
			break;
		if (kind != RK_OK)
			return -1;
		uintptr_t cfa = ((r & RULE_BP_CFA) ? bp : sp) + rule_cfa_off(r);
		if (cfa <= sp)
			return -1;
		ip = *(uintptr_t *)(cfa + rule_ra_off(r));
		if (!(r & RULE_SAME_BP))
			bp = *(uintptr_t *)(cfa + rule_bp_off(r));
		sp = cfa;
	}
	return n;
}
#endif

int ml__backtrace(void **ip, int max)
{
	if (!ml__unwind_loaded())
		return 0;
	int n = -1;
#if FAST_UNWIND
	/* No lock: the rules are read lock-free, and a rule is built under
	 * the walk lock (build_rule). */
	if (U.find_fde) {
		n = fast_backtrace(ip, max);
#ifdef ML_UNWIND_VERIFY
		/* Development check: the slow walk must agree (frame 0 is
		 * this function, at two call sites). */
		void *slow[256];
		struct capture v = {slow, 0, max < 256 ? max : 256};
		ml__unwind_lock();
		U.backtrace(capture_frame, &v);
		ml__unwind_unlock();
		if (n >= 0 && n != v.n)
			ml__diag("fast walk: %d frames, slow: %d", n, v.n),
			    abort();
		for (int i = 1; n >= 0 && i < n; i++)
			if (ip[i] != slow[i])
				ml__diag("fast walk differs at frame %d: %p, "
				         "slow %p",
				         i, ip[i], slow[i]),
				    abort();
#endif
	}
#endif
	if (n < 0) {
		/* Under the walk lock, so that a fork never finds the
		 * unwinder's own mutex held (see walk_lock). */
		struct capture c = {ip, 0, max};
		ml__unwind_lock();
		U.backtrace(capture_frame, &c);
		ml__unwind_unlock();
		n = c.n;
	}
	return n;
}

/* ---- Frame safety ----------------------------------------------------- */

#define MAX_FRAMES 256

enum kind { K_USER, K_SELF, K_RUNTIME, K_LOADER };

/* libc functions that must never see an allocation fail: the first aborts
 * the process ("failed to register TLS destructor"); the locale loaders
 * remember a locale whose loading met ENOMEM as missing, for good. */
extern int __cxa_thread_atexit_impl(void (*)(void *), void *, void *);
static bool must_not_fail(uintptr_t start)
{
	return start == (uintptr_t)&__cxa_thread_atexit_impl ||
	       start == (uintptr_t)&setlocale || start == (uintptr_t)&newlocale;
}

static bool starts(const char *base, const char *prefix)
{
	return strncmp(base, prefix, strlen(prefix)) == 0;
}

static enum kind classify_name(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (starts(base, "ld-linux") || starts(base, "ld.so") ||
	    starts(base, "ld64.so"))
		return K_LOADER;
	if (starts(base, "libc.so") || starts(base, "libpthread.so") ||
	    starts(base, "libdl.so") || starts(base, "libstdc++.so") ||
	    starts(base, "libgcc_s.so") || starts(base, "libunwind"))
		return K_RUNTIME;
	return K_USER;
}

static uintptr_t self_base;

static enum kind classify(uintptr_t ip)
{
	struct ml__object o;
	if (ml__find_object(ip, &o) != 0)
		return K_USER; /* JIT code or similar: not ours to judge */
	if (o.start == self_base)
		return K_SELF;
	/* The allocator underneath: never jumped across, nor failed in. */
	uintptr_t lo;
	ml__allocator_object(&lo, NULL);
	if (o.start == lo && lo)
		return K_RUNTIME;
	/* The main program's link map has an empty name. */
	return classify_name(o.name);
}

void ml__unwind_init(void)
{
	struct ml__object o;
	if (ml__find_object((uintptr_t)&ml__unwind_init, &o) == 0)
		self_base = o.start;
}

/* libgcc keeps the frames registered at run time (JIT code) behind its own
 * mutex; a fork while another thread holds it would leave it held in the
 * child.  This lock is taken around every walk and backtrace, and by fork
 * (forklock.c). */
ML__LOCK(static, walk_lock, ML__RANK_UNWIND)

void ml__unwind_lock(void)
{
	ml__spin_lock(&walk_lock);
}

void ml__unwind_unlock(void)
{
	ml__spin_unlock(&walk_lock);
}

struct walk {
	uintptr_t stop, prev_cfa;
	int depth;
	bool leading, reached;
	enum ml__frames verdict;
};

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg)
{
	struct walk *w = arg;
	if (w->depth++ == MAX_FRAMES)
		return _URC_END_OF_STACK;
	int before = 0;
	uintptr_t ip = U.get_ip_info(ctx, &before);
	/* This frame's stack pointer is the frame below's CFA. */
	uintptr_t sp = w->prev_cfa;
	w->prev_cfa = (uintptr_t)U.get_cfa(ctx);
	if (!ip)
		return _URC_END_OF_STACK;
	if (w->stop && sp && sp >= w->stop) {
		w->reached = true;
		return _URC_END_OF_STACK;
	}
	/* A return address may sit just past the end of its caller. */
	enum kind k = classify(ip - (before == 0));
	if (w->leading && k == K_SELF)
		return _URC_NO_REASON; /* the allocation path itself */
	w->leading = false;
	if (k == K_LOADER ||
	    (k == K_RUNTIME && must_not_fail((uintptr_t)U.region_start(ctx)))) {
		w->verdict = ML__FRAMES_LOADER;
		return _URC_END_OF_STACK;
	}
	if (k == K_RUNTIME) {
		w->verdict = ML__FRAMES_RUNTIME;
	} else if (!w->stop && k == K_USER) {
		/* The loader check ends at the first user frame: what
		 * cannot survive a failure calls malloc through runtime
		 * frames only (ld.so, __tls_get_addr, the locale loaders,
		 * __cxa_thread_atexit_impl); deeper frames do not matter to
		 * it.  This bounds the cost of a refusal by the depth of
		 * that run, not of the stack. */
		w->reached = true;
		return _URC_END_OF_STACK;
	}
	return _URC_NO_REASON;
}

static enum ml__frames walk(uintptr_t stop)
{
	if (!self_base)
		ml__unwind_init();
	if (!ml__unwind_loaded())
		return ML__FRAMES_RUNTIME; /* no stack walks: not known safe */
	struct walk w = {.stop = stop,
	                 .leading = true,
	                 .reached = (stop == 0),
	                 .verdict = ML__FRAMES_SAFE};
	U.backtrace(walk_frame, &w);
	/* A stack we could not follow up to the task is not known safe. */
	if (!w.reached && w.verdict == ML__FRAMES_SAFE)
		w.verdict = ML__FRAMES_RUNTIME;
	return w.verdict;
}

enum ml__frames ml__frames_check(uintptr_t stop)
{
	ml__unwind_lock();
	enum ml__frames f = walk(stop);
	ml__unwind_unlock();
	return f;
}
