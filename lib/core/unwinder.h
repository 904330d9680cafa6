/* libgcc_s's unwinder, found by handle at start by capture.c
 * (ml__unwind_load, which says why by handle) and shared with frames.c:
 * the two walks of lib/core.  Private to lib/core. */
#ifndef ML_CORE_UNWINDER_H
#define ML_CORE_UNWINDER_H

#include "core/core.h"

#include <unwind.h>

#pragma GCC visibility push(hidden)

/* What libgcc's _Unwind_Find_FDE fills in besides the FDE. */
struct ml__eh_bases {
	void *tbase, *dbase, *func;
};

/* Written once, before ml__unwind_loaded() says true; read only after it
 * does (the same names on every architecture). */
struct ml__gcc_s {
	_Unwind_Reason_Code (*backtrace)(_Unwind_Trace_Fn, void *);
	_Unwind_Ptr (*get_ip_info)(struct _Unwind_Context *, int *);
	_Unwind_Word (*get_cfa)(struct _Unwind_Context *);
	_Unwind_Ptr (*region_start)(struct _Unwind_Context *);
	const void *(*find_fde)(void *, struct ml__eh_bases *); /* optional */
};
extern struct ml__gcc_s ml__gcc_s;

#pragma GCC visibility pop

#endif
