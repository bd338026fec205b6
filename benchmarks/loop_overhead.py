"""How much does nnperf's timed loop cost compared with a plain PyTorch training loop?

Runs the same configuration (model, device, precision, batch size, device-resident data
without augmentation, SGD) through

  A. nnperf's engine: `nnperf.engine.step.build_training` + `nnperf.engine.timing.time_window`
     (phase marks between data wait, h2d, forward, backward, optimizer), and
  B. a minimal hand-written loop: index a device tensor, normalise, forward, backward, step,
     timed only around the whole window,

in one process, interleaved A B A B ... so that drifts of a shared machine hit both alike, and
prints the median of the per-round ratios A / B (a paired estimate: each ratio compares two
windows run back to back), next to the ratio of median throughputs. Target: >= 0.98.

Not a test: timings on a shared machine are noisy; run it on a quiet one.

    PYTHONPATH=src python benchmarks/loop_overhead.py --device cpu --batch-size 16
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from nnperf.core import precision as precision_mod
from nnperf.core.contract import TrainingSettings
from nnperf.core.variant import parse_variant_settings
from nnperf.engine.step import build_training, seed_everything
from nnperf.engine.timing import DeviceMemoryTracker, synchronize, time_window, warmup_step

MEAN = (0.4914, 0.4822, 0.4465)  # CIFAR-10 channel statistics
STD = (0.2470, 0.2435, 0.2616)


def make_model(name: str, num_classes: int) -> torch.nn.Module:
    try:
        from nnperf.workload.models import build_model
    except ImportError:  # before the models module exists: torchvision's ResNet-18
        import torchvision

        return torchvision.models.resnet18(num_classes=num_classes)
    return build_model(name, num_classes)


def hand_written_window(model, optimizer, images, labels, batch_size, steps, device, precision):
    """The loop people write; returns images/s over `steps` steps after one warm-up step."""
    criterion = torch.nn.CrossEntropyLoss()
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    scaler = precision_mod.make_grad_scaler(device.type, precision)
    order = torch.randperm(len(labels), device=device)

    def step(i):
        index = order[(i * batch_size) % (len(labels) - batch_size + 1) :][:batch_size]
        x = (images[index].float() / 255 - mean) / std
        with precision_mod.autocast(device.type, precision):
            loss = criterion(model(x), labels[index])
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step(0)
    synchronize(device)
    start = time.perf_counter()
    for i in range(1, steps + 1):
        step(i)
    synchronize(device)
    return batch_size * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="resnet18_cifar")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per window")
    parser.add_argument("--rounds", type=int, default=5, help="A/B pairs")
    parser.add_argument("--images", type=int, default=512, help="synthetic training images")
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        help="torch.set_num_threads (1 avoids OpenMP stalls on a busy machine)",
    )
    args = parser.parse_args()

    device = torch.device(args.device)
    rng = np.random.default_rng(0)
    images_np = rng.integers(0, 256, size=(args.images, 32, 32, 3), dtype=np.uint8)
    labels_np = rng.integers(0, 10, size=args.images).astype(np.int64)
    settings = parse_variant_settings(
        {"data_path": "device_resident", "cpu_threads": args.cpu_threads}
    )
    hyper = TrainingSettings(augment=False)

    seed_everything(0)
    training = build_training(
        make_model(args.model, 10),
        device=args.device,
        precision=args.precision,
        batch_size=args.batch_size,
        settings=settings,
        hyper=hyper,
        seed=0,
        images=images_np,
        labels=labels_np,
        mean=MEAN,
        std=STD,
        input_size=32,
    )
    seed_everything(0)
    plain_model = make_model(args.model, 10).to(device).train()
    plain_optimizer = torch.optim.SGD(
        plain_model.parameters(),
        lr=hyper.lr,
        momentum=hyper.momentum,
        weight_decay=hyper.weight_decay,
    )
    images = torch.from_numpy(images_np).to(device).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(labels_np).to(device)

    nnperf_rates, plain_rates = [], []
    memory = DeviceMemoryTracker(device)
    for round_index in range(args.rounds):
        warmup_step(training, memory)
        result = time_window(training, args.steps, memory)
        nnperf_rates.append(args.batch_size * args.steps / result.window_s)
        plain_rates.append(
            hand_written_window(
                plain_model,
                plain_optimizer,
                images,
                labels,
                args.batch_size,
                args.steps,
                device,
                args.precision,
            )
        )
        print(
            f"round {round_index}: nnperf {nnperf_rates[-1]:8.1f} img/s   "
            f"hand-written {plain_rates[-1]:8.1f} img/s   "
            f"ratio {nnperf_rates[-1] / plain_rates[-1]:.3f}",
            flush=True,
        )
    ratio_of_medians = statistics.median(nnperf_rates) / statistics.median(plain_rates)
    pair_ratios = [a / b for a, b in zip(nnperf_rates, plain_rates)]
    print(
        f"{args.model} {args.device} {args.precision} bs{args.batch_size}, "
        f"threads {torch.get_num_threads()}, {args.rounds} x {args.steps} steps each"
    )
    print(
        f"throughput ratio nnperf / hand-written: {statistics.median(pair_ratios):.3f} "
        f"(median of per-round ratios; min {min(pair_ratios):.3f}, "
        f"max {max(pair_ratios):.3f}; ratio of medians {ratio_of_medians:.3f}); "
        "target >= 0.98"
    )


if __name__ == "__main__":
    main()
