"""Devices that run Metal Shading Language: the Apple GPU (cffi + Objective-C shim) and the CPU device."""

from __future__ import annotations
