"""One line naming the machine a benchmark ran on: figures move with it, so every report says."""

from __future__ import annotations

import os
import platform

import torch


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what the platform module says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    """E.g. ``machine: AMD EPYC, 2 cores; torch 2.13.0+cpu; no CUDA``."""
    gpu = (
        f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
        if torch.cuda.is_available()
        else "no CUDA"
    )
    return f"machine: {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}; {gpu}"
