#pragma once
// Everything in volt::data: datasets, IDX/MNIST reading, transforms, samplers, DataLoader, DataModule.
#include "data/batch.h"
#include "data/data_loader.h"
#include "data/data_module.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/mnist.h"
#include "data/permutation.h"
#include "data/pinned_pool.h"
#include "data/sampler.h"
#include "data/transforms.h"
