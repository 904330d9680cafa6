/* Layer 7, the entry points (docs/internals.md, "Layers"): the exported
 * malloc family, start-up, and the public functions that act on the
 * calling thread's state.  They call down into the allocator and the
 * tasks' slow path.  Never installed. */
#ifndef ML_API_H
#define ML_API_H

#include "shared/shared.h"

/* The malloc family's definitions: exported, as ML_EXPORT makes the
 * public API. */
#define ML__API __attribute__((visibility("default")))

#endif
