#pragma once
/// @file
/// Everything in volt::data: datasets (tensors, IDX/MNIST, NumPy .npy/.npz, CSV, image folders), batches with named fields and
/// their collation, transforms (whole-dataset and per-sample random), samplers, DataLoader, DataModule.
#include <volt/data/batch.h>
#include <volt/data/collate.h>
#include <volt/data/csv_dataset.h>
#include <volt/data/data_loader.h>
#include <volt/data/data_module.h>
#include <volt/data/dataset.h>
#include <volt/data/idx.h>
#include <volt/data/image.h>
#include <volt/data/image_folder.h>
#include <volt/data/mnist.h>
#include <volt/data/npy.h>
#include <volt/data/npy_dataset.h>
#include <volt/data/npz.h>
#include <volt/data/permutation.h>
#include <volt/data/pinned_pool.h>
#include <volt/data/sampler.h>
#include <volt/data/token_shard.h>
#include <volt/data/token_window_dataset.h>
#include <volt/data/transforms.h>
