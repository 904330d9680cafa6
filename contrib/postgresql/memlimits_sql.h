/* The rows of memlimits_activity() (sql.c), which memlimits_metrics()
 * (metrics.c) writes too. */
#ifndef MEMLIMITS_SQL_H
#define MEMLIMITS_SQL_H

#include "memlimits_pg.h"

typedef struct member_row {
	int32 pid;
	uint64 heap, held;
} member_row;
/* The rows the caller may see, palloc'd; *n their count. */
member_row *mlpg_member_rows(size_t *n);

#endif
