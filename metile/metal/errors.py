"""Errors raised by devices: MSL that does not compile, faults inside kernels, bad launches."""

from __future__ import annotations

from metile.ir.errors import Loc, MetileError


class DeviceError(MetileError):
    """A device cannot be created or used (no Apple GPU, no C++ compiler, ...)."""


class DeviceUnavailableError(DeviceError):
    """The requested device does not exist on this machine."""


class CompilerNotFoundError(DeviceError):
    """The CPU device needs a C++ compiler (g++ >= 12 or clang++ >= 15; on macOS Apple clang >= 15 too) and none
    was found."""


class MSLCompileError(MetileError):
    """MSL source that does not compile; the message quotes the compiler against the .metal line."""

    def __init__(self, message: str, loc: Loc | None = None, *, source_line: str | None = None,
                 compiler_output: str = ""):
        self.compiler_output = compiler_output
        super().__init__(message, loc, source_line=source_line)


class MSLCompileWarning(UserWarning):
    """What Metal's compiler warned about in MSL that compiled (a `warnings` category, not an error)."""


class MSLUnsupportedError(MSLCompileError):
    """Valid MSL that uses a feature the CPU device does not support yet."""


class BufferError(MetileError):
    """A `metile.Buffer` that cannot be made as asked (a bad shape or dtype, data that disagrees with them)."""


class LaunchError(MetileError):
    """A dispatch that does not fit the kernel's signature or the device's limits."""


class ProfileError(LaunchError):
    """A `profile=` request that cannot be met: a bad sample size, or a device that cannot count."""


class FunctionConstantError(LaunchError):
    """Function constant values that cannot specialise a kernel: an unknown index or name, a value of the wrong
    type, or no value for a constant the kernel requires (`lib.function(name, constants=...)`)."""


class MetalExportError(LaunchError):
    """An array of another library in Metal memory that its library does not hand over as its Metal buffer: a
    version of the library whose DLPack export of Metal memory is missing or wrong (MLX before 0.32, torch before
    2.9), or a DLPack capsule that describes memory other than the Metal memory the array reports. ``index`` is the
    launch argument and ``reason`` the message without its name, for callers that name it their own way."""

    def __init__(self, message: str, loc: Loc | None = None, *, index: int = -1, reason: str = ""):
        self.index = index
        self.reason = reason or message
        super().__init__(message, loc)


class ArrayLayoutError(LaunchError):
    """A numpy argument whose memory a kernel cannot take as it is (negative strides, overlapping elements, strides
    that are not a whole number of elements): ``index`` is its ``[[buffer(i)]]`` and ``reason`` the message without
    the argument's name, for callers that name it their own way."""

    def __init__(self, message: str, *, index: int, reason: str):
        self.index = index
        self.reason = reason
        super().__init__(message)


class DeviceFault(MetileError):
    """A fault inside a running kernel (bad access, divergence, hang, sanitizer report, ...).

    Attributes give what is known: ``kind`` (a short name such as ``"bad-access"``), ``kernel``,
    ``threadgroup`` and ``thread`` (3-tuples), ``buffer`` (index) and ``offset`` (bytes), ``loc`` (the
    kernel's Python line for a `@metile.kernel` launch that leads back to one, else the ``.metal`` line),
    ``metal_loc`` (the ``.metal`` line) and ``other_loc`` (the ``.metal`` line of the other thread of a
    race or a divergence).
    """

    def __init__(self, message: str, loc: Loc | None = None, *, kind: str = "fault", kernel: str = "",
                 threadgroup: tuple[int, int, int] | None = None, thread: tuple[int, int, int] | None = None,
                 buffer: int | None = None, offset: int | None = None, source_line: str | None = None,
                 metal_loc: Loc | None = None, other_loc: Loc | None = None):
        self.kind = kind
        self.kernel = kernel
        self.threadgroup = threadgroup
        self.thread = thread
        self.buffer = buffer
        self.offset = offset
        self.metal_loc = metal_loc if metal_loc is not None else loc
        self.other_loc = other_loc
        super().__init__(message, loc, source_line=source_line)

    def moved(self, message: str, loc: Loc) -> DeviceFault:
        """This fault reported at `loc` (a line of the kernel's source) with `message`, the rest kept."""
        return DeviceFault(message, loc, kind=self.kind, kernel=self.kernel, threadgroup=self.threadgroup,
                           thread=self.thread, buffer=self.buffer, offset=self.offset, metal_loc=self.metal_loc,
                           other_loc=self.other_loc)
