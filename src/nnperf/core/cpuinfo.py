"""/proc/cpuinfo, parsed once for all of nnperf: the derived CPU peak
(`nnperf.roofline.peaks`) and the environment record (`nnperf.core.environment`) read it.

Pure functions of the file's text (the caller reads it), so they are tested on captured
text anywhere: `parse_cpuinfo` gives the model, vendor, family, flags, physical cores and
clocks; `physical_cores_of` the physical cores among a set of logical CPUs.
"""

from __future__ import annotations


def _processors(text: str) -> list[dict]:
    """One {field: value} dict per `processor` block of /proc/cpuinfo (lower-case keys)."""
    processors = []
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if ":" in line:
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip()
        if fields.get("processor", "").isdigit():
            processors.append(fields)
    return processors


def _core_id(fields: dict):
    """A physical core's identity; SMT siblings share it. Without ids, the processor."""
    if "core id" in fields:
        return (fields.get("physical id"), fields["core id"])
    return ("cpu", fields["processor"])


def parse_cpuinfo(text: str) -> dict:
    """Model name, vendor, family, flags, physical cores and clocks from /proc/cpuinfo text.

    The one /proc/cpuinfo parser of nnperf: the derived peak and the environment record
    (`nnperf.core.environment`) both read it.

    Physical cores are the distinct (physical id, core id) pairs; SMT siblings share their
    core's FMA units and add no peak. Where the ids are missing (arm64, some VMs) every
    processor counts as a core.
    """
    processors = _processors(text)
    if not processors:
        return {
            "model_name": None,
            "vendor": None,
            "family": None,
            "flags": [],
            "logical_cpus": 0,
            "physical_cores": 0,
            "cpu_mhz": None,
            "cpu_mhz_per_cpu": [],
        }
    first = processors[0]
    flags = (first.get("flags") or first.get("features") or "").split()
    mhz = [float(p["cpu mhz"]) for p in processors if "cpu mhz" in p]
    family = first.get("cpu family", "")
    return {
        "model_name": first.get("model name") or first.get("hardware"),
        "vendor": first.get("vendor_id") or first.get("cpu implementer"),
        "family": int(family) if family.isdigit() else None,
        "flags": sorted(set(flags)),
        "logical_cpus": len(processors),
        "physical_cores": len({_core_id(p) for p in processors}),
        "cpu_mhz": max(mhz) if mhz else None,
        "cpu_mhz_per_cpu": mhz,
    }


def physical_cores_of(text: str, cpu_ids) -> int:
    """Physical cores among the logical CPUs `cpu_ids` (this process's affinity set)."""
    wanted = set(cpu_ids)
    return len({_core_id(p) for p in _processors(text) if int(p["processor"]) in wanted})
