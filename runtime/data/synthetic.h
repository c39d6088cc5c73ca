// Synthetic datasets in the layout the loader reads, for trying Lockstep without a download and for
// benchmarks whose speed does not depend on the values (lockstep-data synthetic, lockstep-bench
// train). Deterministic: the same arguments write the same file. Throws Error on an HDF5 failure,
// a failed write (a full disk) included: the writers flush and close the file, checked, before
// they return.
// One thread; no collective calls.
#pragma once

#include <cstdint>
#include <string>

namespace lockstep {

// train/images (N, 28, 28, 1) uint8 and train/labels (N,) in 10 classes, test/ likewise, with the
// attributes num_classes, norm_mean and norm_std: Fashion-MNIST's shape. Noise images in which a
// brighter column stripe marks the class, so the loss can fall.
void write_synthetic_images(const std::string& path, int64_t train_rows, int64_t test_rows);

// train/tokens and test/tokens (N, seq_len + 1) of random ids below `vocab` (uint8 up to 256, else
// int32), with the vocab_size and seq_len attributes lockstep-data text writes. Random text cannot
// be learnt past log2(vocab) bits per token.
void write_synthetic_tokens(const std::string& path, int64_t train_rows, int64_t test_rows,
                            int seq_len, int vocab);

}  // namespace lockstep
