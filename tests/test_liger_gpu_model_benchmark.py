"""`benchmarks/liger_gpu_model.py` end to end at small sizes, in a subprocess as a user runs it: Liger-Kernel's RMSNorm
and cross-entropy run through metile.triton with their kernels profiled from Liger's own host code, right against
torch, and each GPU's table gives them a bound (memory, or at these small sizes the ALUs'); MLX's rows ran or say
why they could not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("liger_kernel")


@pytest.mark.slow
def test_liger_kernels_are_profiled_beside_mlx():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "liger_gpu_model.py"), "--rows", "64",
                           "--cols", "1000", "--vocab", "3000", "--gpu", "M1"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    for kernel in ("_rms_norm_forward_kernel", "liger_cross_entropy_kernel"):
        counters = re.search(rf"liger +{kernel} +(\d+)x(\d+)", text)
        assert counters, kernel
        bound = re.search(rf"liger +{kernel} +(\S+) +(device|tg mem|ALU) +(\S+) +", text)
        assert bound and float(bound.group(3)) >= float(bound.group(1)) > 0, kernel   # the estimate is above the bound
    errors = [float(e) for e in re.findall(r"error (\S+) against torch", text)]
    assert len(errors) == 2 and max(errors) < 1e-4, text
    for kernel in ("rmsfloat32", "block_logsumexp_float32"):
        note = re.search(rf"mlx +{kernel}: (.*) \[", text)
        assert note and (note.group(1).startswith("max error") or note.group(1).startswith("unavailable")), kernel
