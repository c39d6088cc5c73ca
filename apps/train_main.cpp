// lockstep-train: synchronous data-parallel training on every rank mpiexec (or srun) starts.
//
//   mpiexec -n 2 lockstep-train --data data/fashion-mnist.h5 --model cnn --epochs 5
//
// The program is train_main (apps/train_cli.h), which a user's program with its own layers calls
// the same way.
#include "apps/train_cli.h"

int main(int argc, char** argv) { return lockstep::train_main(argc, argv); }
