"""`python -m metile demo` runs a kernel end to end and checks it against numpy."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_and_matches_numpy():
    out = subprocess.run([sys.executable, "-m", "metile", "demo"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "-> OK" in out.stdout and "device: " in out.stdout


def test_unknown_command_is_rejected():
    out = subprocess.run([sys.executable, "-m", "metile", "frobnicate"], capture_output=True, text=True)
    assert out.returncode == 2 and "invalid choice" in out.stderr
