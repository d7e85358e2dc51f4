#pragma once
/// @file
/// Data loading in volt::data: datasets, batches and collation, transforms, samplers, DataLoader, DataModule.
#include <volt/data/data.h>
