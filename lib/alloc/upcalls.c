/* The table of upward hooks (alloc.h, "The upward hooks"): its one
 * definition.  Every entry starts NULL; the layer that consumes an event
 * stores its function with an atomic store. */
#include "alloc/alloc.h"

struct ml__upcalls ml__upcalls;
