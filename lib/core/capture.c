/* Capture: the call stack of an allocation as return addresses
 * (ml__backtrace), for profiles (stacks.c interns them) and run-mode
 * reports; and the loading of libgcc's unwinder, which frames.c walks
 * with too.
 *
 * The unwinder is libgcc's, from the libgcc_s that the library links
 * anyway: _Unwind_Backtrace opens no descriptor and takes no lock of its
 * own where glibc has _dl_find_object (2.35).  libunwind 1.6 was used
 * before, and its unw_backtrace was cheap (a trace cache), but its first
 * use opens a pipe to validate addresses (the lowest free descriptors: a
 * program started with stdin closed found a pipe as fd 0) and reopens it
 * inside a later walk when the program has closed it; no setting turns
 * that off.
 *
 * _Unwind_Backtrace alone interprets each frame's CFI anew at every walk:
 * about 1 800 instructions a frame, 20 times what unw_backtrace cost, and
 * profiles capture a stack at every sample.  So on x86-64 the capture
 * caches a rule per return address, built once from libgcc's FDE, and
 * walks by the rules: 88 instructions a frame (docs/performance.md,
 * "Stacks"; `make bench` counts it).  A frame the rules do not cover
 * sends the whole capture to _Unwind_Backtrace; so do other
 * architectures, and glibc before 2.35 (no _dl_find_object to tag each
 * rule with its object). */
#define _GNU_SOURCE
#include "core/unwinder.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

struct ml__gcc_s ml__gcc_s;
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
#define SYM(field, name) *(void **)&ml__gcc_s.field = dlsym(h, name)
	SYM(backtrace, "_Unwind_Backtrace");
	SYM(get_ip_info, "_Unwind_GetIPInfo");
	SYM(get_cfa, "_Unwind_GetCFA");
	SYM(region_start, "_Unwind_GetRegionStart");
	SYM(find_fde, "_Unwind_Find_FDE");
#undef SYM
	if (ml__gcc_s.backtrace && ml__gcc_s.get_ip_info && ml__gcc_s.get_cfa &&
	    ml__gcc_s.region_start)
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
	uintptr_t ip = ml__gcc_s.get_ip_info(ctx, &before);
	if (!ip)
		return _URC_END_OF_STACK;
	/* Return addresses throughout, as the symbolizer expects (a signal
	 * frame's address is the interrupted instruction itself). */
	c->ip[c->n++] = (void *)(ip + (before != 0));
	return _URC_NO_REASON;
}

/* ---- The fast capture (x86-64) --------------------------------------- *
 *
 * Per return address, the frame's rule (the CFA is rsp or rbp plus an
 * offset; the return address and rbp are saved at offsets from it),
 * computed once from the FDE that libgcc finds (_Unwind_Find_FDE); then
 * the walk goes by the rules: three loads a frame.  Anything else (signal
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
	struct ml__eh_bases bases;
	/* The walk lock keeps fork away from libgcc's own mutex (taken when
	 * frames were registered at run time). */
	ml__unwind_lock();
	const uint8_t *fde = ml__gcc_s.find_fde((void *)pc, &bases);
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
	if (ml__gcc_s.find_fde) {
		n = fast_backtrace(ip, max);
#ifdef ML_UNWIND_VERIFY
		/* Development check: the slow walk must agree (frame 0 is
		 * this function, at two call sites). */
		void *slow[256];
		struct capture v = {slow, 0, max < 256 ? max : 256};
		ml__unwind_lock();
		ml__gcc_s.backtrace(capture_frame, &v);
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
		ml__gcc_s.backtrace(capture_frame, &c);
		ml__unwind_unlock();
		n = c.n;
	}
	return n;
}

/* ---- The walk lock ---------------------------------------------------- */

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
