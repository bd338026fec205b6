"""Data paths: on-device crop/flip, epoch cycling, input preparation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nnperf.core.errors import NnperfError
from nnperf.core.variant import parse_variant_settings
from nnperf.engine.feeders import (
    DataLoaderFeeder,
    DeviceResidentFeeder,
    InputPreparer,
    random_crop_flip,
)

CPU = torch.device("cpu")


def _images(n=16, size=8):
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)


def test_crop_flip_is_a_padded_crop_per_image():
    """Each output image equals some (dy, dx) window of the zero-padded input, maybe mirrored."""
    images = torch.from_numpy(_images(32)).permute(0, 3, 1, 2).contiguous()
    generator = torch.Generator().manual_seed(3)
    out = random_crop_flip(images, 2, generator)
    assert out.shape == images.shape and out.dtype == torch.uint8
    padded = F.pad(images, (2, 2, 2, 2))
    offsets, flips = set(), set()
    for i in range(len(images)):
        found = [
            (dy, dx, flip)
            for dy in range(5)
            for dx in range(5)
            for flip in (False, True)
            if torch.equal(
                out[i],
                (lambda w: w.flip(-1) if flip else w)(padded[i, :, dy : dy + 8, dx : dx + 8]),
            )
        ]
        assert found, f"image {i} is not a crop of its padded input"
        offsets.add(found[0][:2])
        flips.add(found[0][2])
    assert len(offsets) > 5 and flips == {False, True}  # per-image randomness, not one draw


def test_crop_flip_is_seeded():
    images = torch.from_numpy(_images()).permute(0, 3, 1, 2)
    a = random_crop_flip(images, 4, torch.Generator().manual_seed(7))
    b = random_crop_flip(images, 4, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def test_device_resident_cycles_epochs_without_repeats_inside_one():
    images = _images(16)
    labels = np.arange(16)
    feeder = DeviceResidentFeeder(images, labels, batch_size=4, augment=False, seed=0, device=CPU)
    seen = [feeder.next_batch()[1] for _ in range(8)]
    first_epoch = torch.cat(seen[:4]).sort().values
    second_epoch = torch.cat(seen[4:]).sort().values
    assert torch.equal(first_epoch, torch.arange(16)) and torch.equal(
        second_epoch, torch.arange(16)
    )
    x, y = feeder.to_device(feeder.next_batch())
    # Without augmentation an image is exactly the stored one (NCHW view of the NHWC array).
    assert torch.equal(x[0], torch.from_numpy(images[int(y[0])]).permute(2, 0, 1))


def test_dataloader_feeder_restarts_and_keeps_shapes():
    settings = parse_variant_settings({})
    feeder = DataLoaderFeeder(
        _images(12),
        np.arange(12),
        batch_size=5,
        settings=settings,
        augment=True,
        seed=0,
        device=CPU,
    )
    # 12 images, batch 5, drop_last: 2 batches per epoch; the third call starts epoch two.
    batches = [feeder.to_device(feeder.next_batch()) for _ in range(3)]
    for x, y in batches:
        assert x.shape == (5, 3, 8, 8) and x.dtype == torch.uint8 and y.dtype == torch.int64


def test_batch_larger_than_dataset_is_refused():
    with pytest.raises(
        NnperfError,
        match=r"^batch_size 32 is larger than the training split "
        r"\(16 images\); allowed: at most 16",
    ):
        DeviceResidentFeeder(_images(16), np.arange(16), 32, False, 0, CPU)


def test_input_preparer_normalises_resizes_and_sets_memory_format():
    mean, std = (0.5, 0.25, 0.0), (0.5, 0.25, 1.0)
    images = torch.tensor([0, 255, 51], dtype=torch.uint8).view(1, 3, 1, 1).expand(2, 3, 4, 4)
    prepare = InputPreparer(mean, std, image_size=4, input_size=4, channels_last=False, device=CPU)
    x = prepare(images.contiguous())
    # (0/255 - 0.5)/0.5 = -1; (255/255 - 0.25)/0.25 = 3; (51/255 - 0)/1 = 0.2
    assert torch.allclose(x[0, :, 0, 0], torch.tensor([-1.0, 3.0, 0.2]), atol=1e-6)
    resize = InputPreparer(mean, std, image_size=4, input_size=12, channels_last=True, device=CPU)
    y = resize(images.contiguous())
    assert y.shape == (2, 3, 12, 12)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(y[0, :, 5, 5], torch.tensor([-1.0, 3.0, 0.2]), atol=1e-5)
