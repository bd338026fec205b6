"""The profiling and training jobs of a plan: ncu profiles, operator profiles and training to
accuracy, priced from a machine's recordings (`nnperf.study.plan`'s planner, whose state these
methods read: its timings, machine, requests and notes). Apart from plan.py because these
three stages price whole processes, not timed windows.
"""

from __future__ import annotations

import math
from typing import Iterable

from nnperf.core import config as study_config
from nnperf.core import contract, vocab
from nnperf.study.estimate_sources import ASSUMED, BUDGET_BOUND, H100, Cost
from nnperf.study.plan_model import NCU, OPERATORS, TRAINING, JobEstimate, Part

# Images in the test split of the real datasets (CIFAR-10 and CIFAR-100 both have 10,000).
CIFAR_TEST_IMAGES = 10_000
# Seconds to decode and hash one ImageFolder image in prepare_dataset (see `data`).
IMAGEFOLDER_PREPARE_S_PER_IMAGE = 0.0011


def training_seconds(
    *,
    epochs: int,
    max_seconds: float | None,
    steps_per_epoch: int,
    step_s: float,
    compile_s: float,
) -> tuple[float, int]:
    """(training seconds, epochs run) by `nnperf.training.to_accuracy`'s rule: an epoch is started
    only when the training time so far plus its projection (the last epoch's time, or before
    any epoch the step time x steps per epoch) fits in `max_seconds`. The first epoch pays
    the compilation. Every epoch runs: a target reached earlier ends the run earlier."""
    trained, run, last = 0.0, 0, None
    while run < epochs:
        projected = last if last is not None else step_s * steps_per_epoch
        if max_seconds is not None and trained + projected > max_seconds:
            break
        last = step_s * steps_per_epoch + (compile_s if run == 0 else 0.0)
        trained += last
        run += 1
    return trained, run


def dataset_images(dataset: contract.DatasetSettings) -> tuple[int, int]:
    """(train, test) images of the study's dataset; an ImageFolder's are counted on disk."""
    if dataset.name == "synthetic":
        return dataset.synthetic.train_images, dataset.synthetic.test_images
    if dataset.name == vocab.IMAGEFOLDER:
        from nnperf.workload import imagefolder

        found = imagefolder.scan_once(dataset.path)
        return found.count("train"), found.count("val")
    return study_config.CIFAR_TRAIN_IMAGES, CIFAR_TEST_IMAGES


def _key_name(key: study_config.RunKey) -> str:
    return f"{key.device}/{key.model}/{key.precision}/bs{key.batch_size}/{key.variant}"


class ProfileCosts:
    """The profiling and training stages of `plan._Planner` (a mixin: it holds no state)."""

    def ncu_profiles(self, keys: Iterable[study_config.RunKey]) -> list[JobEstimate]:
        m = self.machine
        jobs = []
        measured = self.timings.measured
        for key in keys:
            name = _key_name(key)
            jobs.append(
                JobEstimate(
                    NCU,
                    f"profile_request {name}",
                    (Part("job start", m.job_start.seconds, m.job_start.source),),
                )
            )
            seconds = measured.ncu_wall_s(self.dataset, key) if measured else None
            if seconds is not None:
                cost = Cost(seconds, measured.source)
            else:
                self.note_missing("ncu profiles")
                cost = self.ncu_default(key)
            jobs.append(
                JobEstimate(
                    NCU,
                    f"ncu_profile {name}",
                    (
                        Part("job start", m.job_start.seconds, m.job_start.source),
                        Part("ncu", cost.seconds, cost.source),
                    ),
                )
            )
            jobs.append(
                JobEstimate(
                    NCU,
                    f"ncu_export {name}",
                    (
                        Part("job start", m.job_start.seconds, m.job_start.source),
                        Part("export", m.ncu_export.seconds, m.ncu_export.source),
                    ),
                )
            )
        return jobs

    def ncu_default(self, key: study_config.RunKey) -> Cost:
        m = self.machine
        if key.device != m.device or m.ncu_other is None:
            # No ncu profile was recorded on this kind of machine: about the H100's.
            return Cost(H100.ncu_other.seconds, ASSUMED)
        if self.study.variants[key.variant].compile:
            return m.ncu_compiled or m.ncu_other
        return m.ncu_eager.get(key.precision, m.ncu_other)

    def operator_profiles(self, keys: Iterable[study_config.RunKey]) -> list[JobEstimate]:
        m = self.machine
        settings = self.study.operator_profile
        measured = self.timings.measured
        jobs = []
        for key in keys:
            name = f"operator_profile {_key_name(key)}"
            seconds = measured.operator_profile_s(self.dataset, key) if measured else None
            if seconds is not None:
                parts = (
                    Part("job start", m.job_start.seconds, m.job_start.source),
                    Part("imports", m.imports.seconds, m.imports.source),
                    Part("profile", seconds, measured.source),
                )
                jobs.append(JobEstimate(OPERATORS, name, parts))
                continue
            self.note_missing("operator profiles")
            step_s, compile_s, source = self.step_s(key)
            steps = (settings.warmup_steps + settings.steps) * step_s
            # The profiled steps run slower under the profiler.
            overhead = settings.steps * step_s * (m.profiler_slowdown.seconds - 1)
            detail = f"{settings.warmup_steps} + {settings.steps} steps of {step_s * 1000:.3g} ms"
            parts = [
                *self.fresh_process(device=key.device != "cpu"),
                Part("model build", m.model_build.seconds, m.model_build.source),
            ]
            if compile_s:
                # Not in the budget: the first step of a compiled variant is compilation.
                parts.append(Part("compile", compile_s, source))
            if steps + overhead > settings.max_seconds:
                parts.append(
                    Part(
                        "steps", settings.max_seconds, BUDGET_BOUND, detail + ", cut to max_seconds"
                    )
                )
            else:
                parts.append(Part("steps", steps, source, detail))
                parts.append(Part("profiler overhead", overhead, m.profiler_slowdown.source))
            parts.append(
                Part("trace export and analysis", m.profile_export.seconds, m.profile_export.source)
            )
            jobs.append(JobEstimate(OPERATORS, name, tuple(parts)))
        return jobs

    def training(self, runs: Iterable[tuple[study_config.RunKey, str]]) -> list[JobEstimate]:
        m = self.machine
        measured = self.timings.measured
        train_images, test_images = dataset_images(self.study.dataset)
        jobs = []
        for key, recipe in runs:
            settings = self.study.recipes[recipe]
            name = f"train_to_accuracy {_key_name(key)}/{recipe}"
            fixed = [
                *self.fresh_process(device=key.device != "cpu"),
                Part("data load", m.training_data_load.seconds, m.training_data_load.source),
            ]
            seconds = measured.training_s(self.dataset, key, recipe, settings) if measured else None
            if seconds is not None:
                jobs.append(
                    JobEstimate(
                        TRAINING, name, (*fixed, Part("training", seconds, measured.source))
                    )
                )
                continue
            self.note_missing("training runs")
            step_s, compile_s, source = self.step_s(key)
            steps_per_epoch = max(train_images // key.batch_size, 1)
            trained, epochs_run = training_seconds(
                epochs=settings.epochs,
                max_seconds=settings.max_seconds,
                steps_per_epoch=steps_per_epoch,
                step_s=step_s,
                compile_s=compile_s,
            )
            eval_steps = math.ceil(test_images / key.batch_size) * (epochs_run + 1)
            eval_s = eval_steps * step_s * m.eval_step_fraction.seconds
            detail = (
                f"{epochs_run} of {settings.epochs} epochs x {steps_per_epoch} steps of "
                f"{step_s * 1000:.3g} ms"
            )
            if epochs_run < settings.epochs:
                detail += " (max_seconds stops it)"
            jobs.append(
                JobEstimate(
                    TRAINING,
                    name,
                    (
                        *fixed,
                        Part("epochs", trained, source, detail),
                        Part(
                            "evaluation",
                            eval_s,
                            m.eval_step_fraction.source,
                            f"{eval_steps} forward steps",
                        ),
                    ),
                )
            )
        return jobs
