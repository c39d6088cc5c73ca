// The training program's command line as a library call: lockstep-train is one call of
// train_main, and so is a user's program that first registers its own layers
// (register_layer, <lockstep/model/layer_registry.h>), so that its --model words name them:
//
//   int main(int argc, char** argv) {
//     lockstep::register_layer(my_layer_type());   // before train_main: --model reads the registry
//     return lockstep::train_main(argc, argv);
//   }
//
// It gets every option of lockstep-train (--help lists the registered layer words), checkpoints,
// resume, trace, metrics and exit codes. Library target lockstep_train_cli; installed as
// <lockstep/train_cli.h> and Lockstep::train_cli (find_package(Lockstep 0.2 COMPONENTS train_cli),
// or lockstep-train-cli.pc); apps/examples/custom_layer/ is such a program.
//
// Collective: every rank of the job calls it once, with the same arguments. It starts MPI (a world
// of one without mpiexec) and finalises it, so a program calls it at most once, from its main
// thread, and makes no MPI calls of its own around it. Layers must be registered before it, on
// every rank alike.
#pragma once

namespace lockstep {

// Trains as `lockstep-train` with these arguments and returns the exit code every rank shares:
// 0 done (also --help, --version), 1 runtime error, 2 bad input or configuration (reported once,
// by rank 0), 75 stopped early by a signal after writing a checkpoint (README.md, "Exit codes").
// --help and error messages name the program by argv[0]'s file name.
int train_main(int argc, char** argv);

}  // namespace lockstep
