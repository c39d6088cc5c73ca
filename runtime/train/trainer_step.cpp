// Trainer (trainer.h): one training step, the same work eager or replayed from a CUDA graph.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/observe/gpu_trace.h"
#include "runtime/observe/nvtx.h"
#include "runtime/observe/trace.h"
#include "runtime/train/trainer.h"
#include "runtime/train/trainer_impl.h"

namespace lockstep {

LossTotals Trainer::train_step() {
  Impl& m = *impl_;
  const double t_start = m.timer->start_step();  // device phases on a GPU (step_times.h)
  const int64_t B = config_.global_batch;
  const int64_t first_row = state_.step_in_epoch * B;
  const int64_t want_valid = config_.drop_remainder ? B : std::min(B, m.info.rows - first_row);
  // The gradient of the mean loss over the global batch's predictions: each valid row's
  // positions (a token split's T) count, in every micro-batch alike.
  const float scale = 1.0f / static_cast<float>(static_cast<double>(want_valid) * m.info.positions);
  // Nsight sees the same phases as the trace and the step-time breakdown (nvtx.h).
  NvtxRange step_range("step", "step");
  NvtxPhases phases;
  inject_test_faults();
  Step::Outcome o;
  bool captured = false;
  try {
    phases.next("data wait", "data");
    const bool have = take_batch();
    // Every row of every rank's slice is real: the same answer on every rank.
    const bool full = have && want_valid == B && m.batch.global_valid == B;
    if (m.graphs && m.graphs->ready(full) && !tracing() && graph_step(scale, phases, o)) {
      captured = true;
      captured_steps_ += 1;
      check_valid(m.batch.global_valid, want_valid);
    } else {
      o = eager_step(scale, have, want_valid, phases);
      if (m.graphs) m.graphs->ran_eagerly(full);
    }
  } catch (const std::exception& e) {
    // A layer, the loader or a reduction failed with bucket reductions in flight: they write into
    // the gradients, so they must finish before the error unwinds past the buffers.
    m.reducer->drain();
    if (m.graphs) m.graphs->note_failure(e.what());
    throw;
  } catch (...) {
    m.reducer->drain();
    throw;
  }
  const bool apply =
      m.guard->check_update(o.grads_finite, state_.global_step, state_.epoch) == Verdict::proceed;
  if (captured)
    confirm_captured_update(apply);
  else if (apply)
    apply_update(StepMode::eager);
  const double t_end = captured ? steady_seconds() : m.timer->updated();
  phases.done();
  times_.total += t_end - t_start;
  times_.steps += 1;
  times_.samples += want_valid;
  state_.step_in_epoch += 1;
  state_.global_step += 1;
  state_.samples_seen += want_valid;
  if (m.startup_steps_left > 0 && --m.startup_steps_left == 0) apply_timeout(m.steady);
  return apply ? o.totals : LossTotals{};  // a skipped step stays out of the reported loss
}

void Trainer::inject_test_faults() {
  Impl& m = *impl_;
  if (m.hooks.inf_loss_rank == comm_.rank() && m.hooks.inf_loss_step == state_.global_step + 1)
    m.step->poison_loss();
  if (m.hooks.delay_rank == comm_.rank() && m.hooks.delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(m.hooks.delay_ms));
    m.hooks.delay_ms = -1;
  }
}

void Trainer::check_valid(int64_t got, int64_t want) const {
  if (got != want)
    throw Error("step " + std::to_string(state_.global_step) + " of epoch " +
                std::to_string(state_.epoch + 1) + " got " + std::to_string(got) +
                " samples from the loader, expected " + std::to_string(want));
}

Step::Outcome Trainer::eager_step(float scale, bool have, int64_t want_valid, NvtxPhases& phases) {
  Impl& m = *impl_;
  begin_step(StepMode::eager);
  int64_t got_valid = 0;
  for (int j = 0; have;) {
    const float* x = m.step->upload(m.batch);
    m.timer->data_ready();
    micro_batch_work(x, scale, j + 1 == config_.grad_accum, StepMode::eager, &phases);
    m.step->release();
    m.timer->backward_end();
    got_valid += m.batch.global_valid;
    if (++j == config_.grad_accum) break;
    phases.next("data wait", "data");
    have = take_batch();
  }
  check_valid(got_valid, want_valid);
  phases.next("all_reduce", "collective");
  return reduce_gradients(phases);
}

void Trainer::confirm_captured_update(bool apply) {
  // The graph applied the update unless the loss over all ranks or the reduced gradient was not
  // finite: what the guard's agreed verdict says too.
  const bool applied = impl_->graphs->graphs().applied();
  if (applied != apply)
    throw Error("step " + std::to_string(state_.global_step + 1) +
                ": the captured step (CUDA "
                "graph) " +
                (applied ? "applied" : "left out") +
                " the update, but the ranks' "
                "agreed verdict " +
                (apply ? "applies" : "leaves out") +
                " it; rerun with "
                "--cuda-graphs off");
  if (apply) optimizer_->count_update();
}

bool Trainer::take_batch() {
  Impl& m = *impl_;
  if (m.ahead) {
    std::swap(m.batch, m.next);  // staged during the step before
    m.ahead = false;
    return true;
  }
  return m.train->next(m.batch);
}

bool Trainer::graph_step(float scale, NvtxPhases& phases, Step::Outcome& o) {
  Impl& m = *impl_;
  // An eager step's all-gathers (ZeRO) are waited for on the host here, not inside a capture.
  sync_params();
  const float* x = m.step->upload(m.batch);  // outside the graph: the copy stream's event
  m.timer->data_ready();
  // Read by the graph's update: the coefficients of this step's update (the last replay is done).
  optimizer_->set_captured_lr(static_cast<float>(lr_at_step(state_.global_step)));
  phases.next("captured step", "step");
  const bool fault = m.hooks.launch_fault_step == state_.global_step + 1;
  if (fault && comm_.rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(30));
  // A graph per input slot (`x`): the graph reads its slot's buffers.
  const bool ran = m.graphs->run(
      x, m.batch, [&] { record_step(x, scale); },
      [&] {
        if (fault && comm_.rank() == 1)
          throw Error(
              "test hook LOCKSTEP_TEST_LAUNCH_FAULT: rank 1 fails with its replay in flight");
        m.step->release();
        // The next step's first micro-batch is taken and staged while the graph runs.
        m.ahead = m.train->next(m.next);
        if (m.ahead) m.step->stage(m.next);
        phases.next("step wait", "step");
      });
  if (!ran) return false;
  o = m.graphs->graphs().outcome();
  m.guard->before_reduce(o.totals.loss_sum);
  return true;
}

void Trainer::record_step(const float* x, float scale) {
  Impl& m = *impl_;
  begin_step(StepMode::recording);
  micro_batch_work(x, scale, /*last=*/true, StepMode::recording, nullptr);
  m.timer->backward_end();
  m.reducer->join();
  m.timer->reduced();
  if (m.zero)  // this rank's blocks' norms, all-reduced in the graph
    m.zero->record_norm(reduced_grads(), m.graphs->graphs().norm_slot());
  else
    m.graphs->graphs().gradient_norm(model_->grads(), model_->param_count());
  apply_update(StepMode::recording);
  m.timer->updated();
}

float* Trainer::reduced_grads() {
  return impl_->reducer->stage() == 2 ? impl_->reducer->sharded_grads() : model_->grads();
}

void Trainer::begin_step(StepMode mode) {
  sync_params();
  model_->zero_grads();
  impl_->reducer->start_step(model_->grads(), mode == StepMode::recording);
}

void Trainer::micro_batch_work(const float* x, float scale, bool last, StepMode mode,
                               NvtxPhases* phases) {
  Impl& m = *impl_;
  StepTimer& timer = *m.timer;
  if (phases) phases->next("forward", "forward");
  timer.forward_begin();
  const int rows = static_cast<int>(m.batch.rows);
  // The training step takes bf16 logits where the model writes them (LOCKSTEP_CUDA_LOGITS);
  // evaluation and prediction keep fp32 ones.
  const float* out = model_->forward(x, rows, /*bf16_ok=*/true);
  if (model_->output_bf16())
    m.step->loss_bf16(m.batch, reinterpret_cast<const uint16_t*>(out), scale,
                      reinterpret_cast<uint16_t*>(model_->output_grad()));
  else
    m.step->loss(m.batch, out, scale, model_->output_grad());
  // Recorded, the loss over every rank becomes the gate of the graph's update.
  if (mode == StepMode::recording) m.graphs->graphs().share_loss(grad_comm_);
  timer.forward_end();
  if (phases) phases->next("backward", "backward");
  // Only the last micro-batch's backward finishes the gradients, so only it starts reductions;
  // at ZeRO stage 2 every micro-batch's does (no whole buffer accumulates them: buckets.h).
  m.reducer->begin_micro_batch();
  if (last || m.reducer->stage() == 2)
    model_->backward(rows, [&](int layer) {
      if (last && mode == StepMode::eager) timer.backward_progress();
      m.reducer->layer_done(layer);
    });
  else
    model_->backward(rows);
}

void Trainer::apply_update(StepMode mode) {
  Impl& m = *impl_;
  if (m.zero && mode == StepMode::recording) {
    // As below, on the device: clipped by the graph's norm, the update gated as unsharded, and
    // the all-gathers part of the graph.
    StepGraphs& g = m.graphs->graphs();
    m.zero->clip_on_device(reduced_grads(), g.norm_slot(), config_.clip_norm);
    optimizer_->step_captured(m.zero->update_target(model_->params()), reduced_grads(), g.gate(),
                              g.gates());
    m.zero->publish(model_->params());
    m.zero->join();
    return;
  }
  if (m.zero) {
    // This rank's blocks only, then every bucket's parameters gathered from their owners.
    m.zero->clip(reduced_grads(), m.zero_norm, config_.clip_norm);
    GpuSpan span(m.step->trace(), "optimizer update", "optimizer");
    optimizer_->step(m.zero->update_target(model_->params()), reduced_grads(),
                     static_cast<float>(lr_at_step(state_.global_step)));
    m.zero->publish(model_->params());
    return;
  }
  if (config_.clip_norm > 0)
    m.step->clip(model_->grads(), model_->param_count(), config_.clip_norm);
  if (mode == StepMode::recording) {
    optimizer_->step_captured(model_->params(), model_->grads(), m.graphs->graphs().gate(),
                              m.graphs->graphs().gates());
    return;
  }
  GpuSpan span(m.step->trace(), "optimizer update", "optimizer");
  optimizer_->step(model_->params(), model_->grads(),
                   static_cast<float>(lr_at_step(state_.global_step)));
}

Step::Outcome Trainer::reduce_gradients(NvtxPhases& phases) {
  Impl& m = *impl_;
  // The guard's flags travel with the gradients when the local loss is known before they are
  // reduced; otherwise they leave after the step's read-back (a round trip more).
  const LossTotals* early = m.step->totals_before_reduce();
  if (early != nullptr) m.guard->before_reduce(early->loss_sum);
  m.reducer->wait_all();
  m.timer->reduced();
  // The next step's first micro-batch is taken and staged now: after the reduction has completed
  // on the host, so that no collective is in flight into the gradients should the read fail, and
  // before finish() waits for the device, whose work the copy overlaps (at an epoch's end there is
  // none).
  m.ahead = m.train->next(m.next);
  if (m.ahead) m.step->stage(m.next);
  m.timer->ahead_taken();
  phases.next("optimizer", "optimizer");
  Step::Outcome o;
  if (m.zero) {
    // This rank's blocks of the reduced gradient; the norm is the whole gradient's (collective).
    o = m.step->finish(nullptr, 0);
    m.zero_norm = m.zero->global_norm(reduced_grads());
    o.grads_finite = std::isfinite(m.zero_norm);
  } else {
    o = m.step->finish(model_->grads(), model_->param_count());
  }
  m.timer->collect(/*synced=*/true);  // on a device, finish() has waited for the stream
  if (early == nullptr) m.guard->before_reduce(o.totals.loss_sum);
  return o;
}

}  // namespace lockstep
