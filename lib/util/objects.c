/* Which loaded object holds an address: for the stack walk's frame
 * classification, the meter's allocator detection and the capability
 * query.  Never allocates. */
#define _GNU_SOURCE
#include "util/elf.h"

#include <link.h>

#if HAVE__DL_FIND_OBJECT
int ml__find_object(uintptr_t addr, struct ml__object *o)
{
	/* Lock-free: safe inside malloc, also while another thread is in
	 * dlopen. */
	struct dl_find_object fo;
	if (_dl_find_object((void *)addr, &fo) != 0)
		return -1;
	o->start = (uintptr_t)fo.dlfo_map_start;
	o->end = (uintptr_t)fo.dlfo_map_end;
	o->bias = fo.dlfo_link_map ? fo.dlfo_link_map->l_addr : 0;
	o->name = fo.dlfo_link_map && fo.dlfo_link_map->l_name
	              ? fo.dlfo_link_map->l_name
	              : "";
	return 0;
}
#else
struct find {
	uintptr_t addr;
	struct ml__object *o;
};

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct find *f = arg;
	(void)size;
	if (!ml__elf_span(info, f->addr, &f->o->start, &f->o->end))
		return 0;
	f->o->bias = info->dlpi_addr;
	f->o->name = info->dlpi_name ? info->dlpi_name : "";
	return 1;
}

int ml__find_object(uintptr_t addr, struct ml__object *o)
{
	/* Before glibc 2.35: dl_iterate_phdr takes the loader's list lock
	 * only briefly (dlopen holds it while linking an object in, not
	 * while it allocates). */
	struct find f = {addr, o};
	return dl_iterate_phdr(find_cb, &f) ? 0 : -1;
}
#endif
