// train_main (train_cli.h): lockstep-train's program, for it and for users' programs.
//
// Options come from the command line and an optional INI file (train_options.h). Anything a user
// can get wrong is reported once, by rank 0, before training, and every rank exits 2 (run_app).
// Every rank exits 0 when training completed, and 75 (kExitStoppedEarly) when a stop signal ended
// it early: a scheduler requeues on 75 and the next run resumes from the checkpoint.
#include "apps/train_cli.h"

#include <unistd.h>

#include <cstdio>

#include "apps/train_options.h"
#include "apps/train_report.h"
#include "runtime/base/build_info.h"
#include "runtime/base/error.h"
#include "runtime/base/knobs.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/model/layer_registry.h"
#include "runtime/model/layers.h"
#include "runtime/observe/trace.h"
#include "runtime/observe/trace_writer.h"
#include "runtime/process/blas_threads.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/context.h"
#include "runtime/process/output_path.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/train_checkpoint.h"

namespace lockstep {
namespace {

int train(int argc, char** argv, const World& world, Communicator& world_comm) {
  TrainOptions o;
  std::string problem;
  try {
    o = parse_train_options(argc, argv);
    configured_knobs();  // the environment knobs, refused in words at start-up (knobs.h)
    // A CPU-only layer (a user's, say) is refused by name before a device is opened, so the
    // message is the same with or without a GPU.
    if (o.device == "cuda") check_cuda_layers(parse_model_spec(o.config.model));
  } catch (const UsageError& e) {
    problem = e.what();
  }
  agree_or_throw(world_comm, problem.empty(), problem);
  if (o.help) {
    if (world.rank == 0) std::fputs(o.help_text.c_str(), stdout);
    return 0;
  }
  if (o.version) {
    if (world.rank == 0)
      std::fputs(version_text(program_name(argc > 0 ? argv[0] : nullptr)).c_str(), stdout);
    return 0;
  }
  // Start-up was quiet; the launcher line was logged only if debug logging was already on.
  if (o.verbose && !log_enabled(LogLevel::debug)) {
    set_log_level(LogLevel::debug);
    LS_LOG(debug) << world.launch_summary;
  }
  // --resume and --eval-only: the checkpoint's run's options where the command line gives none
  // (rank 0 reads the file's attributes; the other ranks need not see the file).
  if (!o.resume.empty()) {
    std::string record;
    if (world.rank == 0) try {
        record = load_checkpoint_header(o.resume).config;
      } catch (const UsageError& e) {
        problem = e.what();
      }
    agree_or_throw(world_comm, problem.empty(), problem);
    int64_t size = static_cast<int64_t>(record.size());
    world_comm.broadcast(&size, 1, DType::i64, 0);
    record.resize(static_cast<size_t>(size));
    world_comm.broadcast(record.data(), record.size(), DType::u8, 0);
    try {
      if (o.eval_only) {
        adopt_checkpoint_options(o, record, world.size);
        evaluate_test_split_only(o, world.size);
      } else if (const std::string taken = adopt_resumed_options(o, record);
                 !taken.empty() && world.rank == 0) {
        LS_LOG(info) << "--resume " << o.resume << ": as the checkpoint's run had them, " << taken;
      }
      if (o.device == "cuda") check_cuda_layers(parse_model_spec(o.config.model));
    } catch (const UsageError& e) {
      problem = e.what();
    }
    agree_or_throw(world_comm, problem.empty(), problem);
  }
  // Output files are checked before any training, by rank 0, which writes them.
  if (world.rank == 0) {
    const NamedPaths inputs = {{"--data", o.config.train.path}, {"--resume", o.resume}};
    NamedPaths with_metrics = inputs;
    with_metrics.emplace_back("--metrics", o.config.metrics_path);
    problem = output_path_problem("--metrics", o.config.metrics_path, inputs);
    if (problem.empty()) problem = output_path_problem("--trace", o.trace, with_metrics);
  }
  agree_or_throw(world_comm, problem.empty(), problem);
  // A build without CUDA refuses --device cuda in words, and --device auto trains on the CPU.
  if (o.device == "cuda" && !layers_available(DeviceKind::cuda))
    agree_or_throw(world_comm, false,
                   "--device cuda: " + gpu_training_missing() + "; use --device cpu");
  agree_or_throw(world_comm, blas_threads_problem(o.threads).empty(),
                 blas_threads_problem(o.threads));
  ContextOptions co;
  co.device = layers_available(DeviceKind::cuda) ? o.device : "cpu";
  co.comm = o.comm;
  co.timeout = Millis(static_cast<int64_t>(o.timeout_seconds * 1000));
  co.startup_timeout = Millis(static_cast<int64_t>(o.startup_timeout_seconds * 1000));
  Context ctx = make_context(world, world_comm, co);

  const int threads = o.threads > 0 ? o.threads : default_blas_threads(world);
  set_blas_threads(threads);

  TrainConfig& c = o.config;
  c.device = ctx.device;
  c.host_ranks = world.local_size;
  const bool terminal = isatty(STDERR_FILENO) != 0;
  c.print = o.progress != "none";
  c.progress_bar = o.progress == "bar" || (o.progress == "auto" && terminal);
  Trainer trainer(*ctx.host, *ctx.grads, c);
  trainer.set_deadlines(co.timeout, co.startup_timeout);
  if (world.rank == 0 && c.print)
    print_run_header(trainer, world.size, device_kind_name(ctx.device),
                     backend_name(ctx.grads->backend()), threads, o.eval_only);
  // After the header, which names the thread count; rank 0 speaks for its host.
  if (const std::string crowded = blas_threads_oversubscribed(threads, world); !crowded.empty()) {
    LS_LOG(warn) << "warning: " << crowded;
  }
  if (!o.resume.empty()) {
    const std::string file = resume_from_checkpoint(trainer, o.resume, o.eval_only);
    // --steps and --epochs count from the run's start, not from the checkpoint (every rank holds
    // the same position now).
    const int64_t at = trainer.state().global_step, end = trainer.total_steps();
    agree_or_throw(
        world_comm, o.eval_only || at < end,
        "checkpoint " + file + " is at step " + std::to_string(at) +
            ", and this run ends at step " + std::to_string(end) +
            (c.steps > 0 ? " (--steps " + std::to_string(c.steps) + ")"
                         : " (--epochs " + std::to_string(c.epochs) + ")") +
            ": nothing is left to train (--steps and --epochs count from the run's start); ask "
            "for more, or evaluate the checkpoint with --eval-only");
  }
  if (o.eval_only) {
    if (world.rank == 0 && !o.unused_outputs.empty()) {
      LS_LOG(info) << "--eval-only writes nothing: " << o.unused_outputs << " not used";
    }
    // The evaluation of the end of training, on --test-group, sharded over the ranks as in
    // training.
    const EvalResult test = trainer.evaluate();
    if (world.rank == 0) print_test_figures(trainer, test);
    return kExitDone;
  }
  if (!o.trace.empty()) {
    start_tracing(*ctx.host);
    trainer.set_phase_hook(
        trace_phase_hook(static_cast<int64_t>(trainer.model().param_count() * sizeof(float)),
                         c.device == DeviceKind::cuda));
  }
  TrainResult result = trainer.run();
  if (!o.trace.empty()) write_trace(*ctx.host, o.trace);
  // The guard's verdict was agreed by all ranks, and a stopped run has written its checkpoint
  // (with a barrier behind it) before run() returned: every rank returns the same code.
  if (trainer.guard().stopped_early()) return kExitStoppedEarly;
  if (world.rank == 0) print_final_report(trainer, result);
  return kExitDone;
}

}  // namespace

int train_main(int argc, char** argv) {
  return run_app(argc, argv, [&](const World& world, Communicator& world_comm) {
    return train(argc, argv, world, world_comm);
  });
}

}  // namespace lockstep
