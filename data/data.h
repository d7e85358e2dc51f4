#pragma once
// Everything in volt::data: datasets (tensors, IDX/MNIST, NumPy .npy/.npz, CSV), batches with named fields and
// their collation, transforms (whole-dataset and per-sample random), samplers, DataLoader, DataModule.
#include "data/batch.h"
#include "data/collate.h"
#include "data/csv_dataset.h"
#include "data/data_loader.h"
#include "data/data_module.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/mnist.h"
#include "data/npy.h"
#include "data/npy_dataset.h"
#include "data/npz.h"
#include "data/permutation.h"
#include "data/pinned_pool.h"
#include "data/sampler.h"
#include "data/transforms.h"
