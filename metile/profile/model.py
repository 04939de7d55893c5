"""The Apple GPU model: a `Profile`'s counts over a GPU's peaks (`metile.profile.gpus`) give lower bounds on its
run time, one per resource, and the largest names what binds (docs/performance.md, "The model").

- compute: the simdgroup_matrix FLOPs by dtype over the matching peak (half on the matrix path, float and bfloat
  at the FP32 peak), plus the tensor-op (matmul2d) FLOPs by input type over the tensor-op peaks (`tensor_peak_flops`:
  the Neural Accelerators on M5, the simdgroup_matrix rates before; execution_thread on the shader ALUs). Scalar
  arithmetic is not counted, so a kernel without matrix work has no compute bound here.
- device memory, two figures: with no reuse across threadgroups (the aligned segments each threadgroup touches,
  each once, summed) and with perfect reuse (the dispatch's segments, each once), both over the peak bandwidth:
  memory moves whole segments, so a strided access pays for the segment it touches. The binding device figure is
  the first when the dispatch's segments do not fit in the last-level cache, else the second.
- threadgroup memory: the passes of threadgroup-memory instructions (a pass serves one word per bank) times the
  bytes one pass can move, over the GPU's threadgroup-memory bandwidth.
"""

from __future__ import annotations

import attrs

from metile.profile.gpus import GpuSpec
from metile.profile.gpus import gpu as find_gpu


@attrs.frozen
class Estimate:
    """Lower bounds (seconds) of a profiled dispatch on `gpu`, and which binds."""

    gpu: GpuSpec
    compute_s: float
    device_s: float               # no reuse across threadgroups
    device_reuse_s: float         # perfect reuse (the footprint)
    threadgroup_s: float
    footprint_fits_cache: bool
    flops: float

    @property
    def device_binding_s(self) -> float:
        return self.device_reuse_s if self.footprint_fits_cache else self.device_s

    @property
    def bounds(self) -> dict[str, float]:
        return {"compute": self.compute_s, "device memory": self.device_binding_s,
                "threadgroup memory": self.threadgroup_s}

    @property
    def binding(self) -> str:
        """The resource whose bound is largest ("compute", "device memory" or "threadgroup memory")."""
        return max(self.bounds.items(), key=lambda kv: kv[1])[0]

    @property
    def seconds(self) -> float:
        """The largest bound: the dispatch cannot run faster on this GPU (by this model)."""
        return max(self.bounds.values())

    def fraction_of_peak(self, measured_s: float) -> float:
        """The share of the binding resource's peak a run of `measured_s` seconds reaches."""
        return self.seconds / measured_s if measured_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {"gpu": self.gpu.name, "compute_s": self.compute_s, "device_s": self.device_s,
                "device_reuse_s": self.device_reuse_s, "threadgroup_s": self.threadgroup_s,
                "footprint_fits_cache": self.footprint_fits_cache, "binding": self.binding,
                "seconds": self.seconds, "flops": self.flops}


def peak_flops(spec: GpuSpec, dtype: str) -> float:
    """The peak a simdgroup_matrix multiply of `dtype` inputs can reach."""
    return spec.fp16_matrix_flops if dtype == "half" else spec.fp32_flops


def tensor_peak_flops(spec: GpuSpec, input_type: str, thread: bool = False) -> float:
    """The peak a matmul2d of `input_type` inputs ("float", "tf32", "half", "bfloat") can reach: at
    execution_thread (`thread`) the shader ALUs', else the tensor-op peak (metile.profile.gpus, "Tensor ops")."""
    if thread:
        return spec.fp16_flops if input_type == "half" else spec.fp32_flops
    return spec.tensor_fp16_flops if input_type in ("half", "bfloat") else spec.tensor_fp32_flops


def estimate(profile, gpu: str | GpuSpec = "M1") -> Estimate:
    spec = gpu if isinstance(gpu, GpuSpec) else find_gpu(gpu)
    counts = profile.totals
    compute = (sum(n / peak_flops(spec, d) for d, n in counts.flops.items())
               + sum(n / tensor_peak_flops(spec, t) for t, n in counts.tensor_flops.items())
               + sum(n / tensor_peak_flops(spec, t, thread=True) for t, n in counts.tensor_thread_flops.items()))
    bw = spec.memory_bandwidth
    pass_bytes = profile.model.banks * profile.model.bank_bytes
    return Estimate(
        gpu=spec,
        compute_s=compute,
        device_s=profile.device_traffic_per_threadgroup / bw,
        device_reuse_s=profile.device_traffic / bw,
        threadgroup_s=counts.threadgroup_passes * pass_bytes / spec.threadgroup_memory_bandwidth,
        footprint_fits_cache=profile.device_traffic <= spec.last_level_cache,
        flops=counts.total_flops,
    )
