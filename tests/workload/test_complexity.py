"""FLOPs, saved activations and traffic against published anchors and hand-computed nets."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nnperf.core import files, vocab
from nnperf.core.contract import ComplexityRequest, TrainingSettings, from_dict
from nnperf.core.errors import NnperfError
from nnperf.workload import complexity, models
from nnperf.workload.complexity import complexity_document

CONTRACT_KEYS = {
    "model",
    "dataset",
    "num_classes",
    "input_shape",
    "params",
    "trainable_params",
    "forward_flops_per_image",
    "train_step_flops_per_image",
    "backward_flops_per_image",
    "saved_activation_bytes_per_image",
    "weight_bytes",
    "gradient_bytes",
    "optimizer_state_bytes",
    "traffic",
}


def _meta(name: str, num_classes: int) -> nn.Module:
    with torch.device("meta"):
        return models.build_model(name, num_classes)


def _estimate(name: str, num_classes: int = 1000, size: int | None = None):
    size = size or models.input_size(name)
    return complexity.estimate(_meta(name, num_classes), (3, size, size))


# --- published anchors ---------------------------------------------------------------


def test_resnet18_at_224_is_1_814_gmac_forward_and_about_3x_for_a_step():
    # torchvision's model card and fvcore/ptflops: ResNet-18, 224x224, 1000 classes,
    # conv + linear = 1.814 GMAC = 3.628 GFLOP.
    result = _estimate("resnet18")
    assert result.forward_flops_per_image / 2 == pytest.approx(1.814e9, rel=5e-4)
    assert result.forward_flops_per_image == pytest.approx(3.628e9, rel=5e-4)
    assert result.params == 11_689_512  # torchvision's documented count
    # Backward = input gradient + weight gradient, each one forward, except that the stem
    # conv needs no input gradient: just under 3x.
    ratio = result.train_step_flops_per_image / result.forward_flops_per_image
    assert 2.9 < ratio < 3.0
    stem = result.layers.set_index("layer").loc["conv1"]
    expected = result.forward_flops_per_image * 3 - stem["forward_flops_per_image"]
    assert result.train_step_flops_per_image == expected


def test_mobilenet_v2_at_224_is_0_301_gmac_and_its_step_is_about_3x_after_the_correction():
    # torchvision's model card: MobileNetV2, 224x224: 0.30 GMAC (the paper: 300M multiply-adds).
    result = _estimate("mobilenet_v2")
    assert result.forward_flops_per_image / 2 == pytest.approx(0.301e9, rel=3e-3)
    assert result.params == 3_504_872  # torchvision's documented count
    # Uncorrected, torch counts ~20x; corrected, the depthwise layers cost 3x like the rest.
    ratio = result.train_step_flops_per_image / result.forward_flops_per_image
    assert 2.9 < ratio < 3.0


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_every_registry_model_counts_fast_and_its_table_adds_up(name):
    result = _estimate(name, num_classes=10)
    layers = result.layers
    # Every FLOP and saved byte belongs to a leaf module of these models.
    assert complexity.OUTSIDE_LEAVES not in set(layers["layer"])
    assert layers["forward_flops_per_image"].sum() == result.forward_flops_per_image
    assert layers["saved_activation_unique_bytes_per_image"].sum() == (
        result.saved_activation_bytes_per_image
    )
    assert result.backward_flops_per_image > 1.9 * result.forward_flops_per_image
    assert result.train_step_flops_per_image <= 3 * result.forward_flops_per_image
    assert result.num_classes == 10
    assert layers["params"].sum() == result.params
    # The traffic grows with the batch and shrinks per image under autocast.
    traffic = result.traffic
    assert traffic["fp32"] == traffic["tf32"]
    assert traffic["bf16"] == traffic["fp16"]
    assert traffic["bf16"]["per_image_bytes"] < traffic["fp32"]["per_image_bytes"]
    assert traffic["fp32"]["fixed_bytes"] >= 5 * result.weight_bytes


# --- the grouped-convolution correction ------------------------------------------------


def _conv_counts(conv: nn.Module, x: torch.Tensor, counter: FlopCounterMode) -> tuple[int, int]:
    with counter:
        y = conv(x)
        forward = counter.get_total_flops()
        y.sum().backward()
    return forward, counter.get_total_flops() - forward


def test_depthwise_conv_backward_is_two_forwards_by_hand():
    # Depthwise 3x3 conv, 8 channels, one 5x5 image, padding 1: each of the 8 x 25 outputs
    # is 9 multiply-adds = 2 x 9 FLOPs, so forward = 2 * 8 * 25 * 9 = 3600 FLOPs. The input
    # gradient and the weight gradient are each the same 8 * 25 * 9 multiply-adds.
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
    x = torch.randn(1, 8, 5, 5, requires_grad=True)
    forward, backward = _conv_counts(conv, x, complexity.flop_counter())
    assert forward == 3600
    assert backward == 2 * 3600
    # What torch's own formula says: the weight-gradient term ignores `groups` and comes out
    # 8x too high (3600 for the input gradient + 8 * 3600). This is what is corrected.
    _, upstream = _conv_counts(conv, x.detach().requires_grad_(), FlopCounterMode(display=False))
    assert upstream == 3600 + 8 * 3600


def test_depthwise_first_layer_needs_no_input_gradient():
    # As the first layer of a model (input without grad) only the weight gradient runs.
    model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.Flatten())
    result = complexity.estimate(model, (8, 5, 5))
    assert result.forward_flops_per_image == 3600
    assert result.backward_flops_per_image == 3600


@settings(max_examples=40, deadline=None)
@given(
    groups=st.sampled_from([1, 2, 4]),
    in_mult=st.integers(1, 3),
    out_mult=st.integers(1, 3),
    kernel=st.integers(1, 4),
    stride=st.integers(1, 3),
    padding=st.integers(0, 2),
    dilation=st.integers(1, 2),
    size=st.integers(6, 11),
    batch=st.integers(1, 3),
    transposed=st.booleans(),
)
def test_corrected_formula_agrees_with_torch_where_torch_is_right(
    groups, in_mult, out_mult, kernel, stride, padding, dilation, size, batch, transposed
):
    cls = nn.ConvTranspose2d if transposed else nn.Conv2d
    with torch.device("meta"):
        conv = cls(
            groups * in_mult,
            groups * out_mult,
            kernel,
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
        )
    x = torch.empty(batch, groups * in_mult, size, size, device="meta", requires_grad=True)
    try:
        ours = _conv_counts(conv, x, complexity.flop_counter())
    except RuntimeError:
        return  # output would be empty for this kernel/padding: not a convolution to count
    theirs = _conv_counts(conv, x, FlopCounterMode(display=False))
    assert ours[0] == theirs[0]  # forward: torch is right
    assert ours[1] == 2 * ours[0]  # both gradients cost one forward each
    if groups == 1:
        assert ours[1] == theirs[1]  # dense backward: torch is right
    else:
        # torch counts the weight gradient `groups` times: (1 + groups) forwards.
        assert theirs[1] == (1 + groups) * ours[0]


# --- saved activations --------------------------------------------------------------


def _mlp(d_in=4, d_hidden=5, d_out=3, device="cpu") -> nn.Module:
    with torch.device(device):
        return nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_out))


def test_saved_activation_bytes_of_linear_relu_linear_by_hand():
    # Per image, fp32: the first Linear keeps its input (4 floats = 16 B) for its weight
    # gradient; ReLU keeps its output (5 floats = 20 B); the second Linear keeps the same
    # ReLU output (same storage: counted once) and its weight (a parameter: not counted).
    result = complexity.estimate(_mlp(), (4,))
    assert result.saved_activation_bytes_per_image == 16 + 20
    assert result.saved_activation_fixed_bytes == 0
    layers = result.layers.set_index("layer")
    assert list(layers.index) == ["0", "1", "2"]
    assert list(layers["saved_activation_bytes_per_image"]) == [16, 20, 20]
    assert list(layers["saved_activation_unique_bytes_per_image"]) == [16, 20, 0]
    assert list(layers["forward_flops_per_image"]) == [2 * 4 * 5, 0, 2 * 5 * 3]
    # backward: first Linear only its weight gradient; second Linear both gradients.
    assert list(layers["backward_flops_per_image"]) == [2 * 4 * 5, 0, 2 * (2 * 5 * 3)]
    assert result.params == 4 * 5 + 5 + 5 * 3 + 3 == 43
    assert result.weight_bytes == result.gradient_bytes == 43 * 4
    assert result.optimizer_state_bytes == 43 * 4  # SGD momentum: one buffer


def test_saved_bytes_of_a_conv_bn_relu_pool_net_by_hand_on_cpu_and_meta():
    # One 3x8x8 image. Conv keeps its input (3*8*8*4 = 768 B); BatchNorm keeps its input
    # (4*8*8*4 = 1024 B) plus the batch mean and inverse std (4 + 4 floats = 32 B, fixed);
    # ReLU keeps its output (1024 B); MaxPool keeps its input (the ReLU output, counted
    # already) and int64 indices (4*4*4*8 = 512 B); Linear keeps the pooled input (256 B).
    def net():
        return nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1, bias=False),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64, 2),
        )

    for device in ("cpu", "meta"):
        with torch.device(device):
            model = net()
        result = complexity.estimate(model, (3, 8, 8))
        assert result.saved_activation_bytes_per_image == 768 + 1024 + 1024 + 512 + 256
        assert result.saved_activation_fixed_bytes == 32
        pool = result.layers.set_index("layer").loc["3"]
        assert pool["saved_activation_bytes_per_image"] == 1024 + 512
        assert pool["saved_activation_float_bytes_per_image"] == 1024
        assert "4" not in set(result.layers["layer"])  # Flatten is a view: no row
        if device == "cpu":
            assert all(p.grad is None for p in model.parameters())


def test_in_place_relu_and_the_next_conv_share_one_saved_storage():
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(4, 2, 1), nn.Flatten()
    )
    result = complexity.estimate(model, (3, 6, 6))
    # conv1 input 3*36*4 = 432 B; the ReLU output (4*36*4 = 576 B) once, though both the
    # ReLU and conv2 keep it.
    assert result.saved_activation_bytes_per_image == 432 + 576


# --- traffic ----------------------------------------------------------------------------


def test_traffic_of_linear_relu_linear_by_hand():
    # Sizes per image in fp32 bytes: x 16, hidden 20, logits 12. P1 = 25, P2 = 18.
    result = complexity.estimate(_mlp(), (4,))
    # forward  (read in + write out)       L1 16+20, ReLU 20+20, L2 20+12
    # backward (saved + grad out + grad in) L1 16+20+0 (x needs no grad),
    #                                       ReLU 20+20+20, L2 20+12+20
    per_image_fp32 = (36 + 40 + 32) + (36 + 60 + 52)
    assert per_image_fp32 == 256
    # weights, fp32: L1 read 25*4 in forward, no read in backward (no input grad), gradient
    # write 25*4; L2 read 18*4 twice, gradient write 18*4; SGD momentum reads w, g, m and
    # writes w, m: 5 * 43 * 4.
    fixed_fp32 = 100 + 100 + 72 + 72 + 72 + 5 * 43 * 4
    assert result.traffic["fp32"] == {"fixed_bytes": fixed_fp32, "per_image_bytes": 256}
    assert result.traffic["tf32"] == result.traffic["fp32"]
    # bf16 autocast: activations 2 bytes (half of everything per image). Each Linear casts
    # its fp32 weights (read 4P, write 2P), reads the 2-byte copy, writes a 2-byte gradient
    # and casts it back (read 2P, write 4P); the optimizer stays fp32.
    l1 = 25 * (4 + 2) + 25 * 2 + 25 * 2 + 25 * (2 + 4)
    l2 = 18 * (4 + 2) + 2 * 18 * 2 + 18 * 2 + 18 * (2 + 4)
    expected_bf16 = {"fixed_bytes": l1 + l2 + 5 * 43 * 4, "per_image_bytes": 128}
    assert result.traffic["bf16"] == result.traffic["fp16"] == expected_bf16
    # Adam keeps two buffers: read w, g, m, v and write w, m, v.
    adam = complexity.step_traffic(result.layers, "fp32", optimizer="adam")
    assert adam["fixed_bytes"] == fixed_fp32 + 2 * 43 * 4
    plain_sgd = complexity.step_traffic(result.layers, "fp32", optimizer="sgd", momentum=0)
    assert plain_sgd["fixed_bytes"] == fixed_fp32 - 2 * 43 * 4


@settings(max_examples=25, deadline=None)
@given(
    d_in=st.integers(1, 40),
    d_hidden=st.integers(1, 40),
    d_out=st.integers(1, 40),
    optimizer=st.sampled_from(["sgd", "adam"]),
)
def test_traffic_of_any_mlp_follows_the_closed_form(d_in, d_hidden, d_out, optimizer):
    result = complexity.estimate(_mlp(d_in, d_hidden, d_out, device="meta"), (d_in,), optimizer)
    p1, p2 = d_in * d_hidden + d_hidden, d_hidden * d_out + d_out
    k = complexity.OPTIMIZER_STATE_BUFFERS[optimizer]
    optimizer_bytes = 4 * (p1 + p2) * (3 + 2 * k)
    for precision, act in (("fp32", 4), ("bf16", 2)):
        expected_per_image = act * (2 * d_in + 10 * d_hidden + 2 * d_out)
        if act == 4:
            weights = 4 * (2 * p1 + 3 * p2)
        else:
            weights = 16 * p1 + 18 * p2
        assert result.traffic[precision] == {
            "fixed_bytes": weights + optimizer_bytes,
            "per_image_bytes": expected_per_image,
        }
    assert result.saved_activation_bytes_per_image == 4 * (d_in + d_hidden)


def test_unknown_precision_and_optimizer_are_refused():
    layers = complexity.per_layer_table(_mlp(), (4,))
    with pytest.raises(NnperfError, match=r"precision 'fp8' is unknown; allowed: fp32, tf32"):
        complexity.step_traffic(layers, "fp8")
    with pytest.raises(NnperfError, match=r"optimizer 'lamb' is unknown; allowed: sgd, adam"):
        complexity.estimate(_mlp(), (4,), optimizer="lamb")


def test_per_layer_table_columns_and_shapes():
    layers = complexity.per_layer_table(_meta("resnet18_cifar", 10), (3, 32, 32))
    assert tuple(layers.columns) == complexity.LAYER_COLUMNS
    rows = layers.set_index("layer")
    assert rows.loc["conv1", "output_shape"] == "64x32x32"
    assert rows.loc["conv1", "input_requires_grad"] == False  # noqa: E712 (numpy bool)
    assert rows.loc["layer4.1.conv2", "output_shape"] == "512x4x4"
    assert rows.loc["fc", "output_shape"] == "10"
    assert rows.loc["layer1.0.relu", "calls"] == 2  # BasicBlock calls its ReLU twice
    assert rows.loc["bn1", "buffer_bytes"] == 64 * 4 * 2 + 8  # running mean, var, counter


def test_backward_flops_land_on_the_layer_that_ran_them():
    # Every conv and linear costs two forwards in backward (input and weight gradient), the
    # stem only one (its input needs no gradient). The shortcut convs of a ResNet block are
    # where torch's ModuleTracker would also book the main branch's backward.
    rows = complexity.per_layer_table(_meta("resnet18_cifar", 10), (3, 32, 32))
    compute = rows[rows["type"].isin(["Conv2d", "Linear"])].set_index("layer")
    assert "layer2.0.downsample.0" in compute.index
    expected = 2 * compute["forward_flops_per_image"]
    expected.loc["conv1"] = compute.loc["conv1", "forward_flops_per_image"]
    assert compute["backward_flops_per_image"].to_dict() == expected.to_dict()
    others = rows[~rows["type"].isin(["Conv2d", "Linear"])]
    assert (others[["forward_flops_per_image", "backward_flops_per_image"]] == 0).all().all()


# --- rule complexity: the request in, the JSON and the per-layer CSV out ------------------


def _document(model="resnet18_cifar", dataset="synthetic", **training):
    request = ComplexityRequest(model=model, dataset=dataset, training=TrainingSettings(**training))
    return complexity_document(request)[0]


def test_complexity_document_takes_classes_from_the_dataset():
    assert _document(dataset="cifar100")["num_classes"] == 100
    assert _document(dataset="synthetic")["num_classes"] == 10
    with pytest.raises(
        NnperfError, match="dataset.name 'mnist' is unknown; allowed: synthetic, cifar10, cifar100"
    ):
        _document(dataset="mnist")
    with pytest.raises(NnperfError, match=r"model 'resnet19' is unknown \(closest: resnet18"):
        _document(model="resnet19")


def test_complexity_document_refuses_a_bad_input_size():
    request = ComplexityRequest(model="resnet18_cifar", input_size=0)
    with pytest.raises(NnperfError, match=r"input_size 0 is invalid; allowed: an integer >= 1"):
        complexity_document(request)
    request = ComplexityRequest(model="vgg16_cifar", input_size=1)
    with pytest.raises(NnperfError, match=r"input_size 1 does not fit model 'vgg16_cifar'"):
        complexity_document(request)


def test_document_records_the_optimizer_it_counted():
    """The timed runs' optimiser settings reach the count, and the document says which."""
    default = _document()
    assert default["training"] == {"optimizer": "sgd", "momentum": TrainingSettings.momentum}
    assert default["optimizer_state_bytes"] == default["gradient_bytes"]  # one momentum buffer
    plain = _document(momentum=0.0)
    assert plain["training"] == {"optimizer": "sgd", "momentum": 0.0}
    assert plain["optimizer_state_buffers"] == 0 and plain["optimizer_state_bytes"] == 0
    # Weights, gradients and the k buffers: 4 bytes x P x (3 + 2k) less without the buffer.
    for precision in vocab.PRECISIONS:
        saved = (
            default["traffic"][precision]["fixed_bytes"]
            - plain["traffic"][precision]["fixed_bytes"]
        )
        assert saved == 2 * default["gradient_bytes"]
    adam = _document(optimizer="adam", momentum=0.0)  # Adam keeps its two moments regardless
    assert adam["training"]["optimizer"] == "adam"
    assert adam["optimizer_state_bytes"] == 2 * adam["gradient_bytes"]


def test_write_complexity_from_plain_request_writes_the_json_and_the_layer_csv(tmp_path):
    out_json = tmp_path / "results" / "complexity" / "mobilenet_v2_cifar.json"
    out_csv = tmp_path / "results" / "complexity" / "mobilenet_v2_cifar_layers.csv"
    plain = {
        "model": "mobilenet_v2_cifar",
        "dataset": "cifar100",
        "training": {"optimizer": "adam"},
    }
    returned = complexity.write_complexity(from_dict(ComplexityRequest, plain), out_json, out_csv)
    document = files.read_json(out_json)
    assert document == {"schema_version": files.SCHEMA_VERSION, **json.loads(json.dumps(returned))}
    assert complexity.summary(document).startswith("mobilenet_v2_cifar: ")
    assert CONTRACT_KEYS <= set(document)
    assert document["model"] == "mobilenet_v2_cifar"
    assert document["dataset"] == "cifar100"
    assert document["num_classes"] == 100
    assert document["input_shape"] == [3, 32, 32]
    assert document["optimizer"] == "adam" and document["training"]["optimizer"] == "adam"
    assert document["optimizer_state_bytes"] == 2 * document["gradient_bytes"]
    assert set(document["traffic"]) == set(vocab.PRECISIONS)
    assert document["flop_counter"] == "flop_counter_mode"
    assert document["grouped_conv_backward_corrected"] is True
    assert all(
        set(v) == {"fixed_bytes", "per_image_bytes"} and all(isinstance(b, int) for b in v.values())
        for v in document["traffic"].values()
    )
    assert document["train_step_flops_per_image"] == (
        document["forward_flops_per_image"] + document["backward_flops_per_image"]
    )
    layers = pd.read_csv(out_csv)
    assert tuple(layers.columns) == complexity.LAYER_COLUMNS
    assert layers["forward_flops_per_image"].sum() == document["forward_flops_per_image"]
    assert layers["params"].sum() == document["params"]


def test_bad_request_writes_nothing(tmp_path):
    with pytest.raises(NnperfError, match=r"model 'resnet19' is unknown \(closest: resnet18"):
        complexity.write_complexity(
            ComplexityRequest(model="resnet19"), tmp_path / "a.json", tmp_path / "a.csv"
        )
    assert list(tmp_path.iterdir()) == []


def test_optimizer_state_table_covers_the_vocabulary():
    assert tuple(complexity.OPTIMIZER_STATE_BUFFERS) == vocab.OPTIMIZERS
