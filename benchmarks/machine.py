"""One line naming the machine a benchmark ran on: figures move with it, so every report says."""

from __future__ import annotations

import os
import platform

import torch

# the instruction sets int8 and bf16 kernels choose between: a virtual machine's model name
# ("AMD EPYC") often hides the generation, and int8 ratios moved with it
KERNEL_FLAGS = ("avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")


def cpu_model() -> str:
    """The CPU's model name, family / model numbers and int8-relevant instruction sets (Linux:
    /proc/cpuinfo), else what the platform module says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            fields: dict[str, str] = {}
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        fields = {}
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    flags = [f for f in KERNEL_FLAGS if f in fields.get("flags", "").split()]
    numbers = f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    return f"{fields['model name']} ({numbers}; {', '.join(flags) or 'no VNNI'})"


def describe() -> str:
    """E.g. ``machine: AMD EPYC, 2 cores; torch 2.13.0+cpu; no CUDA``."""
    gpu = (
        f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
        if torch.cuda.is_available()
        else "no CUDA"
    )
    return f"machine: {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}; {gpu}"
