"""The two ways a timed run feeds images to the model.

* `DataLoaderFeeder`: the plain PyTorch way. A `torch.utils.data.DataLoader` (workers,
  pin_memory, prefetch_factor from the variant) yields uint8 batches that were cropped and
  flipped per image on the host; the batch is then copied to the device.
* `DeviceResidentFeeder`: the whole training split lives on the device as one uint8 tensor;
  each batch is drawn by a device-side permutation and augmented there with tensor ops
  (random crop with zero padding 4 and horizontal flip, the standard CIFAR augmentation).

An ImageFolder (`nnperf.workload.imagefolder.Split`) goes either way: the DataLoader decodes
each file and applies RandomResizedCrop and flip on its workers, every step
(`nnperf.workload.image_decoding.ImageFiles`); the device-resident path decodes the split
once, resized and center-cropped at image_size like evaluation images, and then augments it
on the device as above. "Decoded every step" against "decoded once" is one variant apart.

Both hand over uint8 NCHW batches; `InputPreparer` then does the same thing for both on the
device: uint8 -> float32, normalise with the dataset's mean/std, resize when the model's input
size differs from the image size (ImageNet-style models at 224 on 32x32 CIFAR images), and
convert to channels_last when the variant asks for it. Keeping the copy uint8 and converting
on the device moves 4x fewer bytes over PCIe and keeps the two data paths comparable.

Timing phases map onto this as: `data_wait` = `next_batch()`, `h2d` = `to_device()` (copy
plus input preparation). This module does not time anything (`nnperf.engine.timing` does).

Training to accuracy (`nnperf.training.to_accuracy`) feeds whole epochs instead of an
endless stream: `make_epoch_feeder()` gives the same two data paths as `epoch()` iterators,
each epoch drawn from one explicit `torch.Generator` (`.generator`), so that a run restored at
an epoch boundary from a checkpoint holding that generator's state draws exactly the batches
it would have.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from nnperf.core.errors import NnperfError
from nnperf.core.variant import VariantSettings
from nnperf.workload.imagefolder import Split

# The usual CIFAR augmentation (He et al. 2016, §4.2): pad 4 pixels, random 32x32 crop, flip.
CROP_PADDING_PX = 4


class Uint8ImageDataset(Dataset):
    """CIFAR-shaped uint8 images (NHWC numpy) as CHW uint8 tensors, augmented per image."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, augment: bool):
        # One permute/copy up front so __getitem__ only slices.
        self.images = (
            torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).contiguous()
        )
        self.labels = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        height, width = self.images.shape[-2:]
        self.transform = (
            v2.Compose(
                [
                    v2.RandomCrop((height, width), padding=CROP_PADDING_PX),
                    v2.RandomHorizontalFlip(),
                ]
            )
            if augment
            else None
        )

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]


def image_side(images) -> int:
    """The side of the images a feeder hands over: an ImageFolder split's decode size, or
    the arrays' height."""
    return images.image_size if isinstance(images, Split) else int(images.shape[1])


def image_dataset(images, labels: np.ndarray, augment: bool) -> Dataset:
    """The DataLoader's dataset: an ImageFolder split decoded per item (on the workers), or
    in-memory arrays cropped and flipped per item."""
    if isinstance(images, Split):
        from nnperf.workload.image_decoding import ImageFiles

        return ImageFiles(images, augment)
    return Uint8ImageDataset(images, labels, augment)


def resident_images(images, device: torch.device) -> np.ndarray:
    """The arrays the device_resident path keeps on `device`: an ImageFolder split decoded
    once (resize and center crop, the evaluation transform), after checking it fits."""
    if not isinstance(images, Split):
        return images
    from nnperf.workload import image_decoding

    image_decoding.check_resident_fits(images, device)
    return image_decoding.decode_all(images)


def check_batch_fits(num_images: int, batch_size: int) -> None:
    """Full batches only (drop_last): a dataset smaller than one batch cannot be timed."""
    if batch_size > num_images:
        raise NnperfError(
            f"batch_size {batch_size} is larger than the training split ({num_images} images); "
            f"allowed: at most {num_images}"
        )


def _data_loader(
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int,
    settings: VariantSettings,
    augment: bool,
    generator: torch.Generator,
    device: torch.device,
    persistent_workers: bool,
) -> DataLoader:
    """The variant's DataLoader: shuffled full batches, order drawn from `generator`."""
    extra = {}
    if settings.num_workers > 0:
        extra["persistent_workers"] = persistent_workers
        if settings.prefetch_factor is not None:
            extra["prefetch_factor"] = settings.prefetch_factor
    return DataLoader(
        image_dataset(images, labels, augment),
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=settings.num_workers,
        pin_memory=settings.pin_memory and device.type != "cpu",
        generator=generator,
        **extra,
    )


class _DataLoaderSource:
    """The variant's DataLoader with its seeded order `generator`, and the copy to the
    device; what the timed feeder and the epoch feeder share."""

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        batch_size: int,
        settings: VariantSettings,
        augment: bool,
        seed: int,
        device: torch.device,
        persistent_workers: bool,
    ):
        check_batch_fits(len(labels), batch_size)
        self.device = device
        self.non_blocking = bool(settings.pin_memory)
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)
        self.loader = _data_loader(
            images,
            labels,
            batch_size,
            settings,
            augment,
            self.generator,
            device,
            persistent_workers,
        )

    def to_device(self, batch):
        images, labels = batch
        return (
            images.to(self.device, non_blocking=self.non_blocking),
            labels.to(self.device, non_blocking=self.non_blocking),
        )


class DataLoaderFeeder(_DataLoaderSource):
    """Batches from a DataLoader, cycled over epochs (the epoch restart is timed too)."""

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        batch_size: int,
        settings: VariantSettings,
        augment: bool,
        seed: int,
        device: torch.device,
    ):
        super().__init__(images, labels, batch_size, settings, augment, seed, device, True)
        self._iterator = iter(self.loader)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = iter(self.loader)
            return next(self._iterator)


def random_crop_flip(
    images: torch.Tensor, padding: int, generator: torch.Generator
) -> torch.Tensor:
    """Per-image random crop (zero padding) and horizontal flip of a uint8 NCHW batch.

    Done as one gather with per-image row/column indices, so it costs one kernel-sized pass on
    any device; torchvision's v2 transforms draw one crop for the whole batch, which is not the
    same augmentation.
    """
    batch, _, height, width = images.shape
    device = images.device
    padded = F.pad(images, (padding, padding, padding, padding))
    offset_y = torch.randint(0, 2 * padding + 1, (batch,), generator=generator, device=device)
    offset_x = torch.randint(0, 2 * padding + 1, (batch,), generator=generator, device=device)
    flip = torch.randint(0, 2, (batch,), generator=generator, device=device).bool()
    rows = offset_y[:, None] + torch.arange(height, device=device)
    forward_cols = torch.arange(width, device=device)
    cols = offset_x[:, None] + torch.where(flip[:, None], forward_cols.flip(0), forward_cols)
    batch_index = torch.arange(batch, device=device)[:, None, None]
    # Advanced indices separated by a slice move to the front: result is [B, H, W, C].
    cropped = padded.permute(0, 2, 3, 1)[batch_index, rows[:, :, None], cols[:, None, :]]
    return cropped.permute(0, 3, 1, 2)


class DeviceResidentFeeder:
    """The whole split on the device; batches drawn and augmented there."""

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        batch_size: int,
        augment: bool,
        seed: int,
        device: torch.device,
    ):
        check_batch_fits(len(labels), batch_size)
        self.device = device
        self.batch_size = batch_size
        self.augment = augment
        self.images = (
            torch.from_numpy(np.ascontiguousarray(resident_images(images, device)))
            .to(device)
            .permute(0, 3, 1, 2)
            .contiguous()
        )
        self.labels = torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(device)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self._order = None
        self._position = len(self.labels)  # forces a permutation on the first batch

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._position + self.batch_size > len(self.labels):
            self._order = torch.randperm(
                len(self.labels), generator=self.generator, device=self.device
            )
            self._position = 0
        index = self._order[self._position : self._position + self.batch_size]
        self._position += self.batch_size
        images = self.images[index]
        if self.augment:
            images = random_crop_flip(images, CROP_PADDING_PX, self.generator)
        return images, self.labels[index]

    def to_device(self, batch):
        return batch


class InputPreparer:
    """uint8 NCHW batch on the device -> normalised float32 model input."""

    def __init__(
        self, mean, std, image_size: int, input_size: int, channels_last: bool, device: torch.device
    ):
        mean_t = torch.tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
        std_t = torch.tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)
        # (x/255 - mean)/std as one multiply-subtract.
        self.scale = 1.0 / (255.0 * std_t)
        self.shift = mean_t / std_t
        self.resize = input_size != image_size
        self.input_size = input_size
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        x = images.to(torch.float32).mul_(self.scale).sub_(self.shift)
        if self.resize:
            x = F.interpolate(
                x, size=(self.input_size, self.input_size), mode="bilinear", align_corners=False
            )
        return x.contiguous(memory_format=self.memory_format)


def make_feeder(
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int,
    settings: VariantSettings,
    augment: bool,
    seed: int,
    device: torch.device,
):
    """The feeder the variant's `data_path` names."""
    if settings.data_path == "device_resident":
        return DeviceResidentFeeder(images, labels, batch_size, augment, seed, device)
    return DataLoaderFeeder(images, labels, batch_size, settings, augment, seed, device)


# --- whole epochs, for training to accuracy ---------------------------------------------------


class DataLoaderEpochs(_DataLoaderSource):
    """The `dataloader` path one epoch at a time: each `epoch()` is one full pass of a fresh
    DataLoader iterator.

    Its randomness is the DataLoader's `generator` (shuffling; each epoch's worker seeds)
    and, with no worker processes, torch's global RNG (the per-image crop and flip run in
    this process). Workers are not persistent, unlike the timed feeder's: a persistent
    worker's RNG carries over from epoch to epoch where no checkpoint can reach it, while a
    fresh one is seeded from `generator`, so a resumed run gets the same augmentations. The
    pass is always run to its end, because the sampler draws from `generator` once more when
    it finds the epoch exhausted; stopping one batch short would leave the generator behind.
    """

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        batch_size: int,
        settings: VariantSettings,
        augment: bool,
        seed: int,
        device: torch.device,
    ):
        super().__init__(images, labels, batch_size, settings, augment, seed, device, False)
        self.steps_per_epoch = len(self.loader)

    def epoch(self):
        """The batches of one epoch (host tensors; `to_device` moves them)."""
        return iter(self.loader)


class DeviceResidentEpochs(DeviceResidentFeeder):
    """The `device_resident` path one epoch at a time: `steps_per_epoch` batches of one
    permutation, drawn with their augmentation from `generator` (on the device)."""

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        batch_size: int,
        augment: bool,
        seed: int,
        device: torch.device,
    ):
        super().__init__(images, labels, batch_size, augment, seed, device)
        self.steps_per_epoch = len(self.labels) // batch_size

    def epoch(self):
        """The batches of one epoch: a new permutation is drawn by the first of them."""
        for _ in range(self.steps_per_epoch):
            yield self.next_batch()


def make_epoch_feeder(
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int,
    settings: VariantSettings,
    augment: bool,
    seed: int,
    device: torch.device,
) -> DataLoaderEpochs | DeviceResidentEpochs:
    """The epoch feeder of the variant's `data_path`, for training to accuracy."""
    if settings.data_path == "device_resident":
        return DeviceResidentEpochs(images, labels, batch_size, augment, seed, device)
    return DataLoaderEpochs(images, labels, batch_size, settings, augment, seed, device)
