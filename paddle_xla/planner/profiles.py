"""Device profiles: what one device holds and computes, and how fast devices talk, with where each
figure comes from. The planner predicts bytes per device and step time from them. Paddle-free."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import StrategyError

GB = 1e9


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    memory_bytes: float  # memory one device computes from (an IPU's SRAM, a GPU's HBM)
    bf16_tflops: float  # dense half-precision peak
    fp32_tflops: float
    link_gbytes: float  # per-device bandwidth of the links between devices of a host, GB/s
    efficiency: float = 0.5  # achievable fraction of peak for a transformer step (an assumption)
    offchip_bytes: float = 0.0  # memory beside it for state that need not be on the device (IPU streaming memory)
    source: str = ""
    precisions: tuple[str, ...] = ("bf16", "fp32")  # the half precision the device computes in first

    def rate(self, precision: str) -> float:
        """Achievable FLOP/s in `precision`."""
        return (self.bf16_tflops if precision in ("bf16", "fp16") else self.fp32_tflops) * 1e12 * self.efficiency


PROFILES = {
    # NOTE: Graphcore's GC200 (Colossus MK2) product brief: 900 MB In-Processor-Memory, 250 TFLOPS FP16.16,
    # 62.5 TFLOPS FP32, IPU-Links 320 GB/s; the IPU-M2000 datasheet: up to 448 GB Streaming Memory per 4 IPUs.
    "ipu-gc200": DeviceProfile(
        "ipu-gc200",
        0.9 * GB,
        250.0,
        62.5,
        320.0,
        0.5,
        112 * GB,
        "Graphcore GC200 product brief; IPU-M2000 datasheet",
        ("fp16", "fp32"),
    ),
    # NOTE: Graphcore's Bow IPU (wafer-on-wafer GC200): 350 TFLOPS FP16, the same 900 MB and links.
    "ipu-bow": DeviceProfile(
        "ipu-bow", 0.9 * GB, 350.0, 87.5, 320.0, 0.5, 112 * GB, "Graphcore Bow-2000 datasheet", ("fp16", "fp32")
    ),
    # NOTE: NVIDIA H100 SXM datasheet: 80 GB HBM3, BF16 1,979 TFLOPS with sparsity (989 dense), FP32 67 TFLOPS,
    # NVLink 900 GB/s.
    "h100": DeviceProfile("h100", 80 * GB, 989.0, 67.0, 900.0, 0.5, 0.0, "NVIDIA H100 datasheet"),
    # NOTE: NVIDIA H200 SXM datasheet: 141 GB HBM3e, BF16 1,979 TFLOPS with sparsity (989 dense),
    # FP32 67 TFLOPS, NVLink 900 GB/s.
    "h200": DeviceProfile("h200", 141 * GB, 989.0, 67.0, 900.0, 0.5, 0.0, "NVIDIA H200 datasheet"),
    # NOTE: Google Cloud TPU v5e: 16 GB HBM, 197 TFLOPS bf16, ICI 1,600 Gbps; fp32 runs as bf16 passes
    # (taken as 1/4 of the bf16 rate, an assumption).
    "tpu-v5e": DeviceProfile("tpu-v5e", 16 * GB, 197.0, 49.0, 200.0, 0.5, 0.0, "Google Cloud TPU v5e documentation"),
    # NOTE: Google Cloud TPU v5p: 95 GB HBM, 459 TFLOPS bf16, ICI 4,800 Gbps.
    "tpu-v5p": DeviceProfile("tpu-v5p", 95 * GB, 459.0, 115.0, 600.0, 0.5, 0.0, "Google Cloud TPU v5p documentation"),
}


def measured_cpu(devices: int) -> DeviceProfile:
    """This machine, measured on the spot: its matmul peak and memory shared by `devices` XLA devices."""
    from .perf import matmul_peak

    peak = matmul_peak(sizes=(1024,), repeats=3)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # NOTE: virtual CPU devices share the cores and the memory; "links" are memory copies (~10 GB/s, assumed).
    return DeviceProfile(
        "cpu",
        memory / devices,
        peak["bf16_f32acc_gflops"] / 1e3 / devices,
        peak["fp32_gflops"] / 1e3 / devices,
        10.0,
        0.8,
        0.0,
        f"measured here: {peak['fp32_gflops']} GFLOP/s fp32, {memory / GB:.0f} GB",
    )


def profile(name: str, devices: int = 1) -> DeviceProfile:
    if name == "cpu":
        return measured_cpu(devices)
    try:
        return PROFILES[name]
    except KeyError:
        raise StrategyError(f"No device profile {name!r}; the planner knows {sorted(PROFILES) + ['cpu']}.") from None
