"""The environment record stored with every timed run and profile (docs/concepts.md, "How
runs are timed").

Everything a reader needs to judge or reproduce a number: what hardware (device, CPU, clocks
where readable), what software (driver, CUDA, cuDNN, torch, torchvision, python), which math
switches were on (TF32, cudnn.benchmark, AMP dtype, memory format, compile mode, optimizer
implementation), where it ran (hostname, SLURM job/node, GPU identity) and which workflow
commit produced it.

Collect it *after* the run's settings were applied, so the flags recorded are the ones in
force. Readers that fail (no nvidia-smi, no cpufreq in a container) give null, never an error.
The pure parsers (`parse_nvidia_smi_csv`, `parse_cpuinfo`) are separate from the reads so they
can be tested on captured text.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from nnperf.core import precision as precision_mod
from nnperf.core.variant import VariantSettings
from nnperf.core import cpuinfo

# Fields asked from `nvidia-smi --query-gpu` (names from `nvidia-smi --help-query-gpu`).
NVIDIA_SMI_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "pstate",
    "persistence_mode",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "clocks.applications.graphics",
    "clocks.applications.memory",
    "power.limit",
    "temperature.gpu",
    "memory.total",
)
# With `--format=csv,noheader,nounits` fields are separated by ", " and missing values read
# "[N/A]" / "[Not Supported]" (nvidia-smi documentation, "CSV output" section).
NVIDIA_SMI_MISSING = ("[N/A]", "[Not Supported]", "N/A", "")
# SLURM exports these into every job step (sbatch(1), "OUTPUT ENVIRONMENT VARIABLES").
SLURM_VARIABLES = {
    "job_id": "SLURM_JOB_ID",
    "job_name": "SLURM_JOB_NAME",
    "node": "SLURMD_NODENAME",
    "partition": "SLURM_JOB_PARTITION",
    "cluster": "SLURM_CLUSTER_NAME",
    "step_id": "SLURM_STEP_ID",
    "job_gpus": "SLURM_JOB_GPUS",
    "array_task_id": "SLURM_ARRAY_TASK_ID",
}
COMMAND_TIMEOUT_S = 10


def _run(command: list[str], cwd: str | os.PathLike | None = None) -> str | None:
    """stdout of a command, or None when it is missing or fails."""
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def parse_nvidia_smi_csv(text: str, fields=NVIDIA_SMI_FIELDS) -> list[dict[str, str | None]]:
    """Rows of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` as dicts."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [value.strip() for value in line.split(", ")]
        if len(values) != len(fields):
            # A GPU name containing ", " would shift columns; refuse rather than misassign.
            continue
        rows.append(
            {
                field: (None if value in NVIDIA_SMI_MISSING else value)
                for field, value in zip(fields, values)
            }
        )
    return rows


def nvidia_smi_rows(fields: tuple[str, ...] = NVIDIA_SMI_FIELDS) -> list[dict[str, str | None]]:
    """One dict per GPU from `nvidia-smi --query-gpu` (`fields`); [] without it."""
    text = _run(
        [
            "nvidia-smi",
            f"--query-gpu={','.join(fields)}",
            "--format=csv,noheader,nounits",
        ]
    )
    return parse_nvidia_smi_csv(text or "", fields)


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """CPU model name and the per-core `cpu MHz` readings from /proc/cpuinfo text."""
    info = cpuinfo.parse_cpuinfo(text)
    return {"cpu_model": info["model_name"], "cpu_mhz": info["cpu_mhz_per_cpu"]}


def _read_text(path: str | os.PathLike) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_record() -> dict[str, Any]:
    """CPU model, logical CPUs, the CPUs this process may use, clocks where readable."""
    cpuinfo = parse_cpuinfo(_read_text("/proc/cpuinfo") or "")
    model = cpuinfo["cpu_model"]
    if model is None and sys.platform == "darwin":
        model = (_run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip() or None
    if model is None:
        model = platform.processor() or None
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    mhz = cpuinfo["cpu_mhz"]
    cpufreq = {}
    base = Path("/sys/devices/system/cpu/cpu0/cpufreq")
    for name in ("scaling_cur_freq", "scaling_max_freq", "cpuinfo_max_freq", "scaling_governor"):
        text = _read_text(base / name)
        if text is not None:
            value = text.strip()
            # cpufreq reports kHz (Documentation/admin-guide/pm/cpufreq.rst).
            cpufreq[name if name == "scaling_governor" else f"{name}_khz"] = (
                value if name == "scaling_governor" else int(value)
            )
    return {
        "cpu_model": model,
        "cpu_count_logical": os.cpu_count(),
        "cpu_affinity_count": affinity,
        "cpu_mhz": {"mean": sum(mhz) / len(mhz), "min": min(mhz), "max": max(mhz)} if mhz else None,
        "cpufreq": cpufreq or None,
    }


def device_uuid(index: int) -> str | None:
    """The UUID torch reports for CUDA device `index`, bare (`58e0d7ba-...`, without NVML's
    and nvidia-smi's `GPU-`/`MIG-` prefix): the one name of a GPU that CUDA, NVML and
    nvidia-smi share whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER say. None where
    torch has none (`_CudaDeviceProperties.uuid` came with torch 2.4) or cannot tell."""
    try:
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    except Exception:  # noqa: BLE001 - no CUDA, a bad index: no UUID
        return None
    return str(uuid) if uuid is not None and str(uuid) else None


def gpu_record(device: str) -> dict[str, Any] | None:
    """Identity and clocks of the GPU torch uses (cuda: torch + nvidia-smi; mps: name only)."""
    if device == "cuda" and torch.cuda.is_available():
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        uuid = device_uuid(index)
        record: dict[str, Any] = {
            "name": props.name,
            "uuid": uuid,
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "total_memory_bytes": int(props.total_memory),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "nvidia_smi": None,
        }
        rows = nvidia_smi_rows()
        match = [row for row in rows if uuid and row["uuid"] and row["uuid"].endswith(uuid)]
        if match:
            record["nvidia_smi"] = match[0]
        elif len(rows) == 1:
            record["nvidia_smi"] = rows[0]
        return record
    if device == "mps":
        name = (_run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip() or "Apple GPU"
        return {"name": f"{name} (MPS)"}
    return None


def git_commit(workflow_dir: str | os.PathLike | None) -> dict[str, Any]:
    """HEAD of the workflow's git checkout and whether it has local changes (null if none)."""
    if workflow_dir is None:
        return {"git_commit": None, "git_dirty": None}
    head = _run(["git", "rev-parse", "HEAD"], cwd=workflow_dir)
    if head is None:
        return {"git_commit": None, "git_dirty": None}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=workflow_dir)
    return {
        "git_commit": head.strip(),
        "git_dirty": bool(status.strip()) if status is not None else None,
    }


def _version(module_name: str) -> str | None:
    try:
        module = __import__(module_name)
    except ImportError:
        return None
    return getattr(module, "__version__", None)


def collect_environment(
    *,
    device: str,
    precision: str,
    settings: VariantSettings,
    optimizer_impl_resolved: str | None = None,
    workflow_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The full environment record for one run."""
    from nnperf import __version__ as nnperf_version

    cpu = cpu_record()
    gpu = gpu_record(device)
    smi = (gpu or {}).get("nvidia_smi") or {}
    cudnn_version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    amp_dtype = precision_mod.AUTOCAST_DTYPES.get(precision)
    record: dict[str, Any] = {
        "device": device,
        "device_name": (gpu or {}).get("name") or cpu["cpu_model"],
        "driver": smi.get("driver_version"),
        "cuda": torch.version.cuda,  # the CUDA torch was built with
        "cuda_available": torch.cuda.is_available(),
        "cudnn": cudnn_version,
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "numpy": _version("numpy"),
        "python": platform.python_version(),
        "nnperf": nnperf_version,
        "platform": platform.platform(),
        "cpu_model": cpu["cpu_model"],
        "cpu_count_logical": cpu["cpu_count_logical"],
        "cpu_affinity_count": cpu["cpu_affinity_count"],
        "cpu_threads": torch.get_num_threads(),
        "cpu_interop_threads": torch.get_num_interop_threads(),
        "clocks": {
            "cpu_mhz": cpu["cpu_mhz"],
            "cpufreq": cpu["cpufreq"],
            "gpu_sm_mhz": smi.get("clocks.sm"),
            "gpu_mem_mhz": smi.get("clocks.mem"),
            "gpu_max_sm_mhz": smi.get("clocks.max.sm"),
            "gpu_max_mem_mhz": smi.get("clocks.max.mem"),
            "gpu_applications_sm_mhz": smi.get("clocks.applications.graphics"),
        },
        **precision_mod.math_flags(),
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "memory_format": "channels_last" if settings.channels_last else "contiguous",
        "amp_dtype": str(amp_dtype).removeprefix("torch.") if amp_dtype is not None else None,
        "grad_scaler": precision == "fp16",
        "compile_mode": settings.compile or None,
        "optimizer_impl": settings.optimizer_impl,
        "optimizer_impl_resolved": optimizer_impl_resolved,
        "data_path": settings.data_path,
        "gpu": gpu,
        "hostname": socket.gethostname(),
        "slurm": {key: os.environ[var] for key, var in SLURM_VARIABLES.items() if var in os.environ}
        or None,
        **git_commit(workflow_dir),
    }
    return record
