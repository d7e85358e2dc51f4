#pragma once
/// @file
/// All of Volt's public API in one include. Per-area headers: `<volt/tensor.h>`, `<volt/nn.h>`, `<volt/optim.h>`,
/// `<volt/data.h>`, `<volt/distributed.h>`, `<volt/trainer.h>`; per file: `<volt/<layer>/<file>.h>`.
#include <volt/data.h>
#include <volt/distributed.h>
#include <volt/nn.h>
#include <volt/optim.h>
#include <volt/tensor.h>
#include <volt/trainer.h>
