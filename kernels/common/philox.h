#pragma once
// The Philox generator math moved beside the generator state: runtime/philox.h. This forwarding include keeps
// the kernels' existing includes (optim_math.h, softmax.h, philox_int.h, the factory fills) unchanged.
#include <volt/runtime/philox.h>
