// lockstep-train with one more layer: "layernorm" (layer_norm.h), registered before train_main, so
// that --model names it like a built-in layer and everything else (options, checkpoints, resume,
// --trace, --metrics, exit codes) is lockstep-train's:
//
//   mpiexec -n 2 ./custom_train --data fashion-mnist --model
//   "flatten,layernorm,dense:32,relu,dense"
//       --steps 200 --checkpoint-dir ckpt
#include <lockstep/train_cli.h>

#include "layer_norm.h"

int main(int argc, char** argv) {
  example::register_layer_norm();  // every rank, before train_main reads --model
  return lockstep::train_main(argc, argv);
}
