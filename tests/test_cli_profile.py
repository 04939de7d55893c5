"""`python -m metile profile`: launches a kernel with `profile=` on the CPU device (whatever METILE_DEVICE says) and
prints the counts and the Apple GPU estimate, or them as JSON; every mistake is one message with exit status 2
(1 when the kernel does not compile or its launch faults), never a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from metile.__main__ import main
from metile.cli import ArgSpec
from metile.cli_profile import launch_value

KERNELS = '''\
import metile


@metile.kernel
def copy(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(Y + offs, metile.load(X + offs, mask=live), mask=live)


@metile.kernel
def strided(X, Y, n, STRIDE: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(Y + offs, metile.load(X + offs * STRIDE, mask=live), mask=live)
'''
COPY_LINE, STRIDED_LINE = 8, 15
N = 4096
COPY = ["--grid", "16", "--arg", f"X=f32*:{N}", "--arg", f"Y=f32*:{N}", "--arg", f"n=i32:{N}", "-D", "BLOCK=256"]
STRIDED = ["--grid", "16", "--arg", f"X=f32*:{4 * N}", "--arg", f"Y=f32*:{N}", "--arg", f"n=i32:{N}",
           "-D", "BLOCK=256", "-D", "STRIDE=4"]


@pytest.fixture
def kernels(tmp_path):
    path = tmp_path / "profiled_kernels.py"
    path.write_text(KERNELS)
    return path


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def coalescing(table: str) -> int:
    return int(re.search(r"segments, coalescing (\d+)%\)", table)[1])


def test_a_coalesced_copy_counts_every_byte_once(capsys, kernels):
    status, out, err = run_main(capsys, "profile", f"{kernels}:copy", *COPY)
    assert status == 0, err
    assert not err
    assert out.startswith("profile of mtile_copy: 16 threadgroups of ")
    assert "counted" not in out  # 16 threadgroups: all of them counted, nothing scaled
    assert "read 16.4kB, written 16.4kB" in out and coalescing(out) == 100
    # the bound is the bytes over the bandwidth; 16 KiB each way are too few for anything but the dispatch to bind
    assert re.search(r"^  on M1: at least .* \(bound by device memory\), estimate .* \(bound by dispatch\)$", out,
                     re.M)
    busiest = out.split("busiest lines:\n")[1]
    assert f"{kernels}:{COPY_LINE} " in busiest and "metile.store(Y + offs" in busiest


def test_a_strided_read_is_less_coalesced(capsys, kernels):
    status, out, err = run_main(capsys, "profile", f"{kernels}:strided", *STRIDED)
    assert status == 0, err
    assert "read 16.4kB, written 16.4kB" in out
    assert coalescing(out) < 100
    status, copy, _ = run_main(capsys, "profile", f"{kernels}:copy", *COPY, "--json")
    status2, strided, _ = run_main(capsys, "profile", f"{kernels}:strided", *STRIDED, "--json")
    copy, strided = json.loads(copy), json.loads(strided)
    assert status == status2 == 0
    assert strided["device_segments"] > copy["device_segments"]
    assert strided["coalescing_efficiency"] < copy["coalescing_efficiency"] == 1


def test_json_has_the_exact_counts_and_one_estimate_per_gpu(capsys, kernels):
    status, out, err = run_main(capsys, "profile", f"{kernels}:copy", *COPY, "--json", "--gpu", "m3max",
                                "--gpu", "M1", "--gpu", "M3 Max")
    assert status == 0, err
    d = json.loads(out)
    assert d["device_bytes_read"] == N * 4 and d["device_bytes_written"] == N * 4
    assert d["kernel"] == "mtile_copy" and d["threadgroups_total"] == 16 and d["sampled"] is False
    assert [e["gpu"] for e in d["estimates"]] == ["M3 Max", "M1"]  # a GPU named twice is estimated once
    fast, slow = d["estimates"]
    assert 0 < fast["seconds"] < slow["seconds"] and fast["bound_binding"] == "device memory"
    assert fast["bound_s"] == fast["seconds"] <= fast["estimate_s"] and fast["binding"] == "dispatch"


def test_one_estimate_line_per_gpu_in_the_table(capsys, kernels):
    status, out, err = run_main(capsys, "profile", f"{kernels}:copy", *COPY, "--gpu", "M1", "--gpu", "M4 Max")
    assert status == 0, err
    lines = out.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("  on ")]
    assert [lines[i].split(":")[0] for i in at] == ["  on M1", "  on M4 Max"] and at[1] == at[0] + 2
    assert lines[at[0] + 1].startswith("    terms (bound / estimate): ") and lines[at[1] + 1].startswith("    terms")
    assert out.count("device memory    read") == 1 and out.count("busiest lines:") == 1


def test_a_sample_scales_the_counts(capsys, kernels):
    status, out, err = run_main(capsys, "profile", f"{kernels}:copy", *COPY, "--sample", "4", "--only-sampled",
                                "--json")
    assert status == 0, err
    d = json.loads(out)
    assert d["threadgroups_profiled"] == 4 and d["threadgroups_total"] == 16 and d["scale"] == 4
    assert d["device_bytes_read"] == N * 4  # every threadgroup of the copy reads as much
    status, out, err = run_main(capsys, "profile", f"{kernels}:copy", *COPY, "--sample", "4", "--lines", "1")
    assert status == 0, err
    assert "counted 4 of 16 threadgroups, scaled by 4" in out


def test_the_profile_runs_on_the_cpu_device_whatever_metile_device_says(capsys, kernels, monkeypatch):
    monkeypatch.setenv("METILE_DEVICE", "no-such-device")
    status, out, err = run_main(capsys, "profile", f"{kernels}:copy", *COPY)
    assert status == 0, err
    assert os.environ["METILE_DEVICE"] == "no-such-device"


def test_in_a_subprocess(kernels):
    env = dict(os.environ, METILE_DEVICE="metal")  # not the device the profile runs on
    out = subprocess.run([sys.executable, "-m", "metile", "profile", f"{kernels}:strided", *STRIDED, "--gpu", "M2"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("profile of mtile_strided") and "  on M2: " in out.stdout


def test_arrays_are_seeded_and_in_range():
    a = launch_value(ArgSpec("X", "f32", True, 1000), 0)
    assert a.dtype == np.float32 and a.shape == (1000,)
    assert a.min() >= -1 and a.max() < 1 and a.std() > 0.3
    assert np.array_equal(a, launch_value(ArgSpec("X", "f32", True, 1000), 0))
    assert not np.array_equal(a, launch_value(ArgSpec("X", "f32", True, 1000), 1))
    assert not np.array_equal(a, launch_value(ArgSpec("Y", "f32", True, 1000), 0))
    i = launch_value(ArgSpec("I", "u8", True, 1000), 0)
    assert i.dtype == np.uint8 and set(np.unique(i)) == {0, 1}
    assert launch_value(ArgSpec("h", "f16", True, 8), 0).dtype == np.float16
    n = launch_value(ArgSpec("n", "i32", False, 7), 0)
    assert n == 7 and type(n) is int
    assert launch_value(ArgSpec("m", "u32", False, 7), 0).dtype == np.uint32


def test_help_describes_the_command():
    out = subprocess.run([sys.executable, "-m", "metile", "profile", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for word in ("--grid", "NAME=TYPE:VALUE", "X=f32*:1048576", "[-1, 1)", "--gpu", "--sample", "--only-sampled",
                 "--json", "exit status", "CPU device"):
        assert word in out.stdout, word
    top = subprocess.run([sys.executable, "-m", "metile", "--help"], capture_output=True, text=True)
    assert "profile" in top.stdout


def _copy_without(*names: str) -> list[str]:
    out, args = [], iter(COPY)
    for a in args:
        value = next(args)
        if not any(value.startswith(f"{n}=") or (a == n) for n in names):
            out += [a, value]
    return out


MISTAKES = [
    (_copy_without("--grid"), "the following arguments are required: --grid"),
    (["--grid", "16,0", *_copy_without("--grid")], "--grid '16,0': expected G or GX,GY[,GZ]"),
    (["--grid", "1,2,3,4", *_copy_without("--grid")], "--grid '1,2,3,4'"),
    (["--grid", "4096x4", *_copy_without("--grid")], "--grid '4096x4'"),
    ([*_copy_without("X"), "--arg", "X=f32*"], "--arg X: give the array's element count after a colon"),
    ([*_copy_without("X"), "--arg", "X=f32*:-4"], "--arg X: the element count must be a whole number >= 1"),
    ([*_copy_without("n"), "--arg", "n=i32"], "--arg n: give the scalar's value after a colon"),
    ([*_copy_without("n"), "--arg", "n=u32:-1"], "--arg n: a value of type u32 is a whole number in 0..4294967295"),
    ([*_copy_without("n"), "--arg", "n=i32:1.5"], "--arg n: a value of type i32 is a whole number"),
    ([*_copy_without("n"), "--arg", "n=f64:1"], "Metal has no 64-bit floats"),
    ([*COPY, "--gpu", "M9 Turbo"], "--gpu: unknown Apple GPU 'M9 Turbo'; known GPUs: M1, "),
    ([*COPY, "--sample", "0"], "argument --sample: expected a whole number >= 1"),
    ([*_copy_without("n")], "missing --arg for n"),
    (["--grid", "100000000000", *_copy_without("--grid")], "grid (100000000000,) is empty or too large"),
]


@pytest.mark.parametrize(("argv", "message"), MISTAKES, ids=[m for _, m in MISTAKES])
def test_command_line_mistakes(capsys, kernels, argv, message):
    status, out, err = run_main(capsys, "profile", f"{kernels}:copy", *argv)
    assert status == 2 and not out
    assert err.startswith("python -m metile profile: error: ") and err.count("\n") == 1, err
    assert message in err


def test_an_unknown_gpu_in_a_subprocess_is_one_line(kernels):
    out = subprocess.run([sys.executable, "-m", "metile", "profile", f"{kernels}:copy", *COPY, "--gpu", "RTX 4090"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and not out.stdout
    assert out.stderr.count("\n") == 1 and "unknown Apple GPU 'RTX 4090'" in out.stderr


def test_a_parameter_named_profile_is_refused(capsys, tmp_path):
    path = tmp_path / "named.py"
    path.write_text(KERNELS.replace("STRIDE", "profile"))
    status, out, err = run_main(capsys, "profile", f"{path}:strided", *STRIDED[:-2], "-D", "profile=4")
    assert status == 2 and not out and err.count("\n") == 1
    assert "strided has a parameter named 'profile'" in err


def test_a_fault_is_reported_at_the_kernels_line(capsys, kernels):
    argv = [a if a != f"X=f32*:{4 * N}" else f"X=f32*:{N}" for a in STRIDED]  # strided reads 4x past this X
    status, out, err = run_main(capsys, "profile", f"{kernels}:strided", *argv)
    assert status == 1 and not out
    head, line, caret = err.splitlines()
    assert head.startswith(f"{kernels}:{STRIDED_LINE}:") and "invalid memory access" in head and "`X`" in head
    assert line.strip() == "metile.store(Y + offs, metile.load(X + offs * STRIDE, mask=live), mask=live)"
    assert caret.strip() == "^" and "Traceback" not in err


def test_a_kernel_that_does_not_compile(capsys, kernels):
    status, out, err = run_main(capsys, "profile", f"{kernels}:copy", *COPY[:-2], "-D", "BLOCK=wide")
    assert status == 1 and not out
    assert re.match(rf"{re.escape(str(kernels))}:\d+:\d+: error: ", err) and "Traceback" not in err
