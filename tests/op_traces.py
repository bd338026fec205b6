"""Hand-built torch.profiler traces for the operator-profile tests: every duration chosen so
the tables' numbers can be computed by hand (they are, in the tests' comments).

The events have the fields and categories Kineto writes (`cpu_op`, `user_annotation`,
`cuda_runtime`, `kernel`, `[memory]` instant events; `External id`, `correlation`,
`Sequence number`, `Input Dims`), and the ranges `nnperf.torchprof.profile` opens.
"""

from __future__ import annotations

PID = 4242
MAIN = PID
AUTOGRAD = PID + 1  # autograd's device thread on a GPU


def op(name, start, end, tid=MAIN, cat="cpu_op", **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": PID,
        "tid": tid,
        "ts": float(start),
        "dur": float(end - start),
        "args": args,
    }


def annotation(name, start, end, tid=MAIN):
    return op(name, start, end, tid=tid, cat="user_annotation")


def kernel(name, start, end, correlation, stream=7):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": float(start),
        "dur": float(end - start),
        "args": {"correlation": correlation, "device": 0, "stream": stream},
    }


def launch(start, end, correlation, name="cudaLaunchKernel", tid=MAIN):
    return op(name, start, end, tid=tid, cat="cuda_runtime", correlation=correlation)


def memory(time, size, addr, device_type=0):
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": PID,
        "tid": MAIN,
        "ts": float(time),
        "args": {"Bytes": size, "Addr": addr, "Device Type": device_type, "Device Id": -1},
    }


def cpu_step(offset: float, index: int) -> list[dict]:
    """One CPU training step of 100 µs starting at `offset`, on one thread.

    Phases: data_wait [0,10) h2d [10,15) forward [15,50) backward [50,90) optimizer [90,98).
    Per step (µs of self time): operators 59, torch ranges 7 (DataLoader 4, Optimizer.step 3),
    outside operators 34 (nnperf ranges: step 2, data_wait 2, h2d 2, forward 7, model 5,
    conv 2, loss 2, backward 10, optimizer 2). Top-level operators cover 59 µs.
    """
    t = offset
    seq_conv, seq_loss = 10 + 2 * index, 11 + 2 * index
    return [
        annotation(f"nnperf_step#{index}", t, t + 100),
        annotation("nnperf_phase:data_wait", t, t + 10),
        annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 1, t + 9),
        op("aten::stack", t + 2, t + 6, **{"Input Dims": [[3, 32, 32], [3, 32, 32]]}),
        annotation("nnperf_phase:h2d", t + 10, t + 15),
        op("aten::to", t + 11, t + 14),
        annotation("nnperf_phase:forward", t + 15, t + 50),
        annotation("nnperf_module:(model)", t + 16, t + 34),
        annotation("nnperf_module:features.conv", t + 17, t + 30),
        op(
            "aten::conv2d",
            t + 18,
            t + 29,
            **{"Sequence number": seq_conv, "Input Dims": [[2, 3, 32, 32], [8, 3, 3, 3], []]},
        ),
        op("aten::convolution", t + 19, t + 28, **{"Sequence number": seq_conv}),
        op(
            "aten::mkldnn_convolution",
            t + 20,
            t + 27,
            **{"Input Dims": [[2, 3, 32, 32], [8, 3, 3, 3], []]},
        ),
        annotation("nnperf_module:(loss)", t + 35, t + 45),
        op("aten::cross_entropy_loss", t + 36, t + 44, **{"Sequence number": seq_loss}),
        annotation("nnperf_phase:backward", t + 50, t + 90),
        op(
            "autograd::engine::evaluate_function: NllLossBackward0",
            t + 52,
            t + 58,
            **{"Sequence number": seq_loss},
        ),
        op("NllLossBackward0", t + 53, t + 57, **{"Sequence number": seq_loss}),
        op("aten::nll_loss_backward", t + 54, t + 56),
        op(
            "autograd::engine::evaluate_function: ConvolutionBackward0",
            t + 60,
            t + 80,
            **{"Sequence number": seq_conv},
        ),
        op("aten::convolution_backward", t + 62, t + 78),
        op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", t + 82, t + 86),
        annotation("nnperf_phase:optimizer", t + 90, t + 98),
        annotation("Optimizer.step#SGD.step", t + 91, t + 97),
        op("aten::add_", t + 92, t + 95),
    ]


def cpu_trace(steps: int = 2) -> dict:
    """`steps` CPU steps back to back (step i starts at 1000 + 100 i µs)."""
    events = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "py"}}]
    for index in range(steps):
        events += cpu_step(1000 + 100 * index, index)
    return {"schemaVersion": 1, "traceEvents": events}


def cuda_trace() -> dict:
    """One GPU step of 100 µs (from 0): forward on the main thread, backward on autograd's
    device thread, three kernels, a synchronising call inside the last step.

    Device busy: kernels [10,30) [50,70) [93,95) = 42 µs. Top-level host operators:
    linear [2,19) 17, AddmmBackward0 node [42,60) 18, add_ [90,93) 3, cudaDeviceSynchronize
    [94,100) 6 = 44 µs, of which 6 blocked in a sync: dispatch 38 µs. Launch calls 3+4+1 = 8.
    """
    return {
        "schemaVersion": 1,
        "traceEvents": [
            annotation("nnperf_step#0", 0, 100),
            annotation("nnperf_phase:data_wait", 0, 0.5),
            annotation("nnperf_phase:h2d", 0.5, 1),
            annotation("nnperf_phase:forward", 1, 40),
            annotation("nnperf_module:fc", 1, 20),
            op("aten::linear", 2, 19, **{"Sequence number": 3, "Input Dims": [[4, 8], [2, 8]]}),
            op("aten::addmm", 3, 18, **{"Input Dims": [[2], [4, 8], [8, 2]]}),
            launch(5, 8, 100),
            annotation("nnperf_phase:backward", 40, 90),
            op(
                "autograd::engine::evaluate_function: AddmmBackward0",
                42,
                60,
                tid=AUTOGRAD,
                **{"Sequence number": 3},
            ),
            op("aten::mm", 44, 58, tid=AUTOGRAD),
            launch(46, 50, 101, tid=AUTOGRAD),
            annotation("nnperf_phase:optimizer", 90, 93.5),
            op("aten::add_", 90, 93),
            launch(91, 92, 102),
            op("cudaDeviceSynchronize", 94, 100, cat="cuda_runtime"),
            kernel("sm90_gemm_forward", 10, 30, 100),
            kernel("sm90_gemm_backward", 50, 70, 101),
            kernel("elementwise_add", 93, 95, 102),
            {
                "ph": "X",
                "cat": "cuda_sync",
                "name": "Device Sync",
                "pid": 0,
                "tid": 7,
                "ts": 95.0,
                "dur": 5.0,
                "args": {},
            },
        ],
    }
