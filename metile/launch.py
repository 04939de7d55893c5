"""From a compiled `@metile.kernel` to its dispatch: `CompiledKernel`, `Launch`, the grid and device-limit checks, and
faults and argument errors reported at the kernel's Python lines.

`Launch` is what the launch cache of `metile.kernel` holds per argument types, constexprs and launch options: each call
checks the grid, converts scalars to their parameter's type and dispatches one threadgroup per program; `Launch.prepare`
does the same checks once and returns the device's prepared dispatch, which a `PreparedLaunch` calls (binding its torch
tensors anew when their memory moved since). An array of another library is read through `metile.metal.interop`
(`host_view`, or `plain_array` for one in Metal memory on the Metal device), told whether the kernel writes it (its
parameter is not `const` in the kernel's signature, which the compiled kernel's `MslArtifact` holds). The CPU device
copies such arrays into guarded memory unless told to bind them in place (the launch option `in_place=True` or
"checked", or the device's `in_place_arrays` setting) or, left to itself, when one of them is large (its checked
build; see `metile.metal.cpu.dispatch`); a launch bound so whose arrays are all torch
tensors arms a `PlacedRuns` with its dispatch, and later calls whose tensors it can take as they are
(`metile.metal.interop.tensor_address`) only set their addresses, the scalars and the grid there (`Launch.rerun`). A
launch copied so (the default) whose arrays are all torch tensors arms a `CopiedRuns` likewise: later calls whose
tensors are C-contiguous, of the same sizes and share no byte (but one tensor given to the parameters it was given to
before) copy them into the guarded device memory of that dispatch and the written ones back (`Launch.recopy`), without
binding them again; when the device takes that memory back, a later call arms another (a launch whose dispatch cannot be
kept so stops trying after 3). Any other call takes the general way. A fault inside the kernel is moved to the kernel's
Python line (`at_python_line`, from the artifact's map of `.metal` lines to Python lines); a numpy view the device
cannot take as it is becomes a `KernelArgumentError` at its parameter, as is an array of another library in Metal memory
that a 16-bit atomic writes and that does not start 4-byte aligned in its buffer (`metile.emit.atomics` counts the
element's 32-bit word from the start of its array).

Limits, checked before anything is dispatched: threads per threadgroup and threadgroup memory (the launch plan of the
Metal IR) against the device raise `LaunchError` at compile time (`check_device_limits`, which lists what uses the
threadgroup memory and points at the line that needs the most); a grid dimension over `MAX_GRID` programs (program ids
are i32), or whose threads (`programs * threads_per_threadgroup`) exceed `MAX_GRID_THREADS` (Metal numbers the threads
of a grid dimension with a 32-bit uint), raises `GridError`. A kernel that makes pointers of integer addresses
(`IntToPtr`, a pointer table) compiles only for a device that runs them (the CPU device, in this process), else a
`LaunchError` at the line that makes one.
"""

from __future__ import annotations

import functools
import linecache

import attrs
import numpy as np

from metile.emit.artifact import MslArtifact
from metile.emit.atomics import word_aligned_params
from metile.emit.source_map import FaultLocator
from metile.frontend.errors import GridError, KernelArgumentError
from metile.ir.errors import Loc, MetileError
from metile.ir.node import walk
from metile.ir.stmts import Kernel, Let
from metile.ir.target import DEFAULT_TARGET, AppleTarget
from metile.ir.types import PtrType, host_dtype
from metile.ir.values import IntToPtr, SharedAlloc
from metile.metal.args import array_span
from metile.metal.errors import ArrayLayoutError, DeviceFault, LaunchError, MetalExportError, ProfileError
from metile.metal.interop import (
    DL_METAL,
    ForeignArrayError,
    device_of,
    foreign_span,
    host_view,
    is_foreign_array,
    moved,
    plain_array,
    tensor_address,
    tensor_nbytes,
    watch_tensors,
)
from metile.profile.counts import LineCounts, Profile, merge_lines

MAX_GRID = (1 << 31) - 1            # programs per grid dimension: program ids are i32
MAX_GRID_THREADS = (1 << 32) - 1    # threads per grid dimension: Metal numbers them with a 32-bit uint
_PAD = (None, (1, 1), (1,), ())   # what pads a grid of 1, 2 or 3 dimensions to 3


@attrs.frozen
class CompiledKernel:
    """One specialization of a kernel, compiled: its IR at both levels, its `MslArtifact` (the MSL, the kernel
    function's signature, the launch plan and the Python line of each `.metal` line) and the device function.

    `max_grid` is the largest grid (programs per dimension) a launch may use on this device.
    """

    tile_ir: Kernel
    metal_ir: Kernel
    artifact: MslArtifact = attrs.field(repr=False)
    max_grid: tuple[int, int, int]
    function: object = attrs.field(repr=False)
    device: object = attrs.field(repr=False)

    @property
    def entry(self) -> str:
        """The name of the kernel function."""
        return self.artifact.entry

    @property
    def msl(self) -> str:
        return self.artifact.msl

    @property
    def threadgroup_size(self) -> int:
        return self.artifact.threads

    @property
    def threadgroup_memory(self) -> int:
        return self.artifact.threadgroup_memory


class Launch:
    """A compiled kernel ready to dispatch with its launch options (`sanitize=`, `timeout=`, given to the device only
    when set): what a repeated launch needs, found by one dict lookup."""

    __slots__ = ("aligned", "compiled", "convert", "dispatch", "function", "lengths", "max_grid", "options", "specs",
                 "tpt", "runs", "tensors", "scalars", "tries", "copies", "copy_tries", "arrays", "large")

    def __init__(self, compiled: CompiledKernel, typed, options: dict):
        self.compiled = compiled
        self.specs = tuple(s for s, _, _ in typed)
        foreign = any(isinstance(t, PtrType) and is_foreign_array(v) for _, v, t in typed)
        written = compiled.artifact.written_buffers if foreign else frozenset()
        self.convert = tuple(_converter(v, t, compiled.device, i in written) for i, (_, v, t) in enumerate(typed))
        params = compiled.tile_ir.params   # the hidden ones: the lengths of arrays unbounded tile accesses clip to
        self.lengths = tuple((p.length_of, params[p.length_of].type.dtype.itemsize) for p in params
                             if p.length_of is not None)
        self.aligned = word_aligned_params(compiled.metal_ir) if foreign and _on_metal(compiled.device) else ()
        placed = ()
        device = compiled.device
        auto = False   # the device chooses per dispatch between copies and its checked build (`CHECKED_BYTES`)
        if getattr(device, "binds_in_place", False):   # `in_place=` of the launch, else the device's setting
            asked = options.get("in_place", True if device.options.in_place_arrays else None)
            auto = asked is None
            if auto or asked:   # the host views of other libraries' arrays (a repeated launch of tensors takes `runs`)
                placed = tuple(i for i, c in enumerate(self.convert) if c is host_view or c is _input_view)
            options = {**options, "in_place": asked if auto or asked.__class__ is str else bool(asked)}
        # left to the device, a call arms `runs` only when it has an array the device binds in place (its checked build)
        self.large = device.checked_in_place_bytes if auto else 0
        # a launch whose arrays are all torch tensors bound in place runs again through `PlacedRuns`, once one has
        # been made (`tries` times at most): their addresses, the scalars and the grid are all it sets
        arrays = [i for i, (_, _, t) in enumerate(typed) if isinstance(t, PtrType)]
        plain = not self.lengths and not options.get("sanitize") and "profile" not in options
        self.tries = 3 if placed and len(placed) == len(arrays) and plain else 0
        self.runs = None
        # one whose arrays are all copied torch tensors (the default) runs again through `CopiedRuns`, made the same way
        self.copy_tries = 3 if ((auto or not placed) and arrays and plain and getattr(device, "binds_in_place", False)
                                and all(self.convert[i] is host_view or self.convert[i] is _input_view
                                        for i in arrays)) else 0
        self.copies = None
        self.arrays = tuple(arrays)
        self.tensors = tuple((i, i in written) for i in placed)
        self.scalars = tuple((i, c) for i, c in enumerate(self.convert) if i not in arrays)
        self.options = options
        dispatch = compiled.device.dispatch_threadgroups
        self.dispatch = functools.partial(dispatch, **options) if options else dispatch
        self.function = compiled.function
        self.max_grid = compiled.max_grid
        self.tpt = (compiled.threadgroup_size, 1, 1)

    def checked(self, grid, args) -> tuple[tuple[int, int, int], list]:
        """`grid` (as the user wrote it) as three dimensions within the kernel's limits, and the runtime arguments
        first in `args` converted to their parameters' types."""
        dims = grid3(grid)
        m = self.max_grid
        if dims[0] > m[0] or dims[1] > m[1] or dims[2] > m[2]:
            raise_grid_too_large(self.compiled, grid, dims)
        try:
            bound = [a if c is None else c(a) for c, a in zip(self.convert, args)]
            if self.lengths:
                bound += [np.int32(self.length(args[i], i, size)) for i, size in self.lengths]
            for i in self.aligned:
                self.check_word_aligned(args[i], i)
            return dims, bound
        except ForeignArrayError:   # an array of another library that cannot be read (a sparse torch tensor, say)
            for s, c, a in zip(self.specs, self.convert, args):
                if c in _FOREIGN:
                    try:
                        c(a)
                    except ForeignArrayError as e:
                        raise KernelArgumentError(f"argument '{s.name}' {e}", s.loc) from None
            raise

    def length(self, value, index: int, itemsize: int) -> int:
        """The elements of the array argument `value` (runtime argument `index`), for the hidden length parameter a
        tile access without `bounds=` clips to; a `KernelArgumentError` at the parameter beyond `2**31 - 1`."""
        try:
            return array_elements(value, itemsize)
        except ArrayTooLongError as e:
            spec = self.specs[index]
            raise KernelArgumentError(f"argument '{spec.name}' {e}", spec.loc) from None

    def check_word_aligned(self, value, index: int) -> None:
        """A `KernelArgumentError` at the parameter when the array argument `value` (runtime argument `index`), which a
        16-bit atomic writes, does not start 4-byte aligned (`metile.emit.atomics`). Only an array of another library
        in Metal memory can: it is bound at its offset in its buffer, and every other array is bound at the start of
        one (the CPU device copies arrays of other libraries to the start of a buffer of its own, or, when asked to bind
        them in place, binds only those that start 16-byte aligned)."""
        if not is_foreign_array(value) or device_of(value)[0] != DL_METAL:
            return
        from metile.metal.gpu.launch import metal_views

        try:
            offset = metal_views((value,), index)[0].byte_offset
        except MetalExportError as e:
            raise self.argument_error(e) from None
        if offset % 4:
            spec = self.specs[index]
            raise KernelArgumentError(
                f"argument '{spec.name}' starts {offset} bytes into its Metal buffer, not at a multiple of 4 bytes: an "
                "atomic on its 16-bit elements works on the 32-bit words of the array, which must start 4-byte "
                "aligned. Pass an array that does (a copy: `t.clone()`, or a view starting at an even element)",
                spec.loc)

    def __call__(self, grid, args):
        """Dispatch over `grid` with the runtime arguments first in `args` (the `metile.Profile`, at the kernel's
        Python lines, when the launch asked for `profile=`)."""
        runs = self.runs
        if runs is not None and self.rerun(runs, grid, args):
            return None
        copies = self.copies
        if copies is not None and self.recopy(copies, grid, args):
            return None
        dims, bound = self.checked(grid, args)
        try:
            large = self.large
            if self.tries and runs is None and (not large or any(getattr(b, "nbytes", 0) >= large for b in bound)):
                self.arm(dims, bound)
                return None
            if self.copy_tries and (copies is None or copies.dispatch is None):
                self.arm_copies(dims, bound)
                return None
            counted = self.dispatch(self.function, dims, self.tpt, bound)
        except DeviceFault as e:
            raise at_python_line(self.compiled, e) from None
        except (ArrayLayoutError, MetalExportError) as e:
            raise self.argument_error(e) from None
        return None if counted is None else at_python_lines(self.compiled, counted)

    def rerun(self, runs, grid, args) -> bool:
        """Launch through `runs` (`metile.metal.cpu.dispatch.PlacedRuns`) when every array argument is a torch tensor
        it can take as it is (`metile.metal.interop.tensor_address`) and the grid is within the kernel's limits;
        False, having run nothing, when not."""
        dims = grid3(grid)
        m = self.max_grid
        if dims[0] > m[0] or dims[1] > m[1] or dims[2] > m[2]:
            return False
        addresses = []
        for i, written in self.tensors:
            a = tensor_address(args[i], written)
            if not a:
                return False
            addresses.append(a)
        try:
            return runs(dims, addresses, [c(args[i]) for i, c in self.scalars],
                        lambda: [tensor_nbytes(args[i]) for i, _ in self.tensors])
        except DeviceFault as e:
            raise at_python_line(self.compiled, e) from None

    def arm(self, dims, bound) -> None:
        """Dispatch `bound` over `dims` through a prepared dispatch, which becomes `runs` when it bound every array in
        place and each scalar's bytes are those of its converted value."""
        self.tries -= 1
        try:
            d = self.compiled.device.prepare_threadgroups(self.function, dims, self.tpt, bound, **self.options)
        except (ArrayLayoutError, MetalExportError) as e:
            raise self.argument_error(e) from None
        try:
            d.run()
        finally:
            d.release()
        scalars = tuple((i, np.dtype(c).itemsize) for i, c in self.scalars)
        if sorted(d.placed) == [i for i, _ in self.tensors] and not d.arrays and d.scalar_sizes() == scalars:
            self.runs, self.tries = d.placed_runs(), 0
        elif not d.placed and self.copy_tries:   # the device copied them (no checked build): copies are armed next
            self.tries = 0

    def recopy(self, copies, grid, args) -> bool:
        """Launch through `copies` (`metile.metal.cpu.dispatch.CopiedRuns`) when every array argument is a C-contiguous
        torch tensor (`metile.metal.interop.tensor_address`) of the size `copies` was made for and the grid is within
        the kernel's limits; False, having run nothing, when not."""
        dims = grid3(grid)
        m = self.max_grid
        if dims[0] > m[0] or dims[1] > m[1] or dims[2] > m[2]:
            return False
        addresses, sizes = [], []
        for i in self.arrays:
            t = args[i]
            a = tensor_address(t, True)   # contiguous, as a written one must be for the fast way
            if not a:
                return False
            addresses.append(a)
            sizes.append(t.nbytes)
        if not copies.fits(sizes):
            return False
        try:
            return copies(dims, addresses, [c(args[i]) for i, c in self.scalars])
        except DeviceFault as e:
            raise at_python_line(self.compiled, e) from None

    def arm_copies(self, dims, bound) -> None:
        """Dispatch `bound` over `dims` through a prepared dispatch, which the device keeps as `copies` when it copied
        every array (`metile.metal.cpu.device.CpuDevice.keep_copied`); a dispatch that could not be kept counts
        against `copy_tries`."""
        self.copy_tries -= 1
        device = self.compiled.device
        try:
            d = device.prepare_threadgroups(self.function, dims, self.tpt, bound, **self.options)
        except (ArrayLayoutError, MetalExportError) as e:
            raise self.argument_error(e) from None
        try:
            d.run()
        except BaseException:
            d.release()
            raise
        scalars = tuple((i, np.dtype(c).itemsize) for i, c in self.scalars)
        copies = device.keep_copied(d, list(self.arrays), scalars)
        if copies is not None:   # when the device retires it, a later call arms another
            self.copies = copies
            self.copy_tries += 1

    def prepare(self, grid, args):
        """The device's dispatch over `grid` with these runtime arguments, checked and bound once: calling it
        dispatches again (see `metile.kernel.PreparedLaunch`, which reports its faults)."""
        if "profile" in self.options:
            raise ProfileError("profile= is an option of a launch, not of prepare(): profile with "
                               "kernel[grid](..., profile=True)", self.compiled.tile_ir.loc)
        dims, bound = self.checked(grid, args)
        try:
            return self.compiled.device.prepare_threadgroups(self.function, dims, self.tpt, bound, **self.options)
        except (ArrayLayoutError, MetalExportError) as e:
            raise self.argument_error(e) from None

    def watch(self, args) -> tuple:
        """What a prepared launch of `args` compares before each call (`metile.metal.interop.TensorWatch`): its torch
        tensors."""
        return watch_tensors([a for c, a in zip(self.convert, args) if c in _FOREIGN])

    def argument_error(self, e: ArrayLayoutError | MetalExportError) -> MetileError:
        """`e`, about the array bound at `[[buffer(e.index)]]`, as an error at that parameter (runtime arguments bind
        the buffers in parameter order): a `KernelArgumentError`, or a `MetalExportError` for an array whose library
        does not hand over its Metal buffer."""
        spec = self.specs[e.index]
        if isinstance(e, MetalExportError):
            return MetalExportError(f"argument '{spec.name}' {e.reason}", spec.loc, index=e.index, reason=e.reason)
        return KernelArgumentError(f"argument '{spec.name}' {e.reason}", spec.loc)


def _on_metal(device) -> bool:
    return getattr(device, "name", "") == "metal"


def _converter(value, t, device, written: bool):
    """What a launch applies to a runtime argument: a scalar's conversion to its parameter's type, a numpy view of
    an array of another library (`metile.metal.interop.host_view`; one in Metal memory goes to the Metal device,
    which binds its buffer, as `plain_array` gives it), or nothing. `written`: whether the kernel may write it."""
    if isinstance(t, PtrType):
        if not is_foreign_array(value):
            return None
        if _on_metal(device) and device_of(value)[0] == DL_METAL:
            return _metal_output if written else _metal_input
        return host_view if written else _input_view
    return host_dtype(t.dtype).type


class ArrayTooLongError(ValueError):
    """An array too long for the i32 length a tile access without `bounds=` clips to (a phrase after its name)."""


def array_elements(value, itemsize: int) -> int:
    """The elements of `itemsize` bytes a kernel sees in the array argument `value`, from its first element to its
    last (a strided view's span; `Param.length_of`). The length is an i32, so an array of more than `2**31 - 1`
    elements raises `ArrayTooLongError`: clipped there, a tile at 64-bit offsets past it would be dropped."""
    if isinstance(value, np.ndarray):
        span = array_span(value, written=False) if not value.flags.c_contiguous else value.nbytes
    elif is_foreign_array(value):
        try:
            view = host_view(value, written=False)
            span = view.nbytes if view.flags.c_contiguous else array_span(view, written=False)
        except ForeignArrayError:   # in Metal memory (bound as its buffer): its span from its shape and strides
            span = foreign_span(value) * itemsize
    else:
        span = getattr(value, "nbytes", 0)   # a metile.Buffer
    n = span // itemsize if isinstance(span, int) else 0
    if n > (1 << 31) - 1:
        raise ArrayTooLongError(f"has {n} elements, more than the 2**31 - 1 a tile_load or tile_store without "
                                "bounds= can clip its tile to: give it bounds=")
    return n


def _input_view(value):
    """The numpy view of an array of another library that the kernel only reads."""
    return host_view(value, written=False)


def _metal_input(value):
    """An array of another library in Metal memory that the kernel only reads, as the Metal device binds it."""
    return plain_array(value, False)


def _metal_output(value):
    """An array of another library in Metal memory that the kernel may write, as the Metal device binds it."""
    return plain_array(value, True)


_FOREIGN = frozenset({host_view, _input_view, _metal_input, _metal_output})   # the converters of foreign arrays


class PreparedLaunch:
    """`kernel[grid].prepare(*args, **constexprs)`: a launch compiled, checked and bound once (every check of a
    launch: arguments, types, grid, device limits). Calling it dispatches the same arguments again without any
    of them: numpy arrays still have their contents at the call copied in and the results copied back (as a
    launch does on its device), `metile.Buffer`s are bound as they are, and a fault inside the kernel is reported
    at its Python line. The object holds its arguments. A torch tensor whose memory moved since it was bound
    (`resize_`, `set_`, a storage resized: `metile.metal.interop.TensorWatch`) is bound anew, with every check of a
    launch, before the call dispatches: the dispatch never reaches memory the tensor no longer has.

    `report(error, name)` gives what a call raises (`from None`) for a `MetileError` (`metile.kernel` passes the
    one its entry points use, which shortens tracebacks).
    """

    __slots__ = ("compiled", "grid", "name", "_dispatch", "_report", "_launch", "_args", "_watch")

    def __init__(self, launch: Launch, grid, args: list, name: str, report):
        self.compiled = launch.compiled   # the specialization it runs
        self.grid = grid              # as given
        self.name = name              # the kernel's
        self._report = report
        self._launch = launch
        self._args = args             # the runtime arguments
        self._dispatch = launch.prepare(grid, args)   # the device's prepared dispatch
        self._watch = launch.watch(args)

    def __call__(self) -> None:
        try:
            if self._watch and moved(self._watch):
                dispatch = self._launch.prepare(self.grid, self._args)   # raises until it binds: nothing stale runs
                self._watch = self._launch.watch(self._args)
                self._dispatch = dispatch
            self._dispatch()
        except MetileError as e:
            error = at_python_line(self.compiled, e) if isinstance(e, DeviceFault) else e
            raise self._report(error, self.name) from None

    def __repr__(self) -> str:
        return f"<metile prepared launch of {self.compiled.tile_ir.name} over {self.grid!r}>"


def at_python_line(compiled: CompiledKernel, fault: DeviceFault) -> DeviceFault:
    """`fault`, reported at the line of the kernel's Python source that the faulting `.metal` line comes from
    (`metile.emit.source_map.FaultLocator`), the `.metal` line named in the message; `fault` itself when its
    line leads back to none (a statement the lowering added before the kernel's own, or a custom pipeline's)."""
    at, metal = fault.loc, compiled.artifact.metal_name
    if at is None or at.file != metal:
        return fault
    locator = FaultLocator(compiled.artifact)
    loc = locator.location(at.line, fault.buffer if fault.kind in ("bad-access", "misaligned") else None)
    if loc is None:
        return fault
    message = f"{fault.message} (generated MSL: {metal}:{at.line})"
    other = fault.other_loc
    there = None if other is None else locator.location(other.line)
    if there is not None:
        message = message.replace(f"at {metal}:{other.line}", f"at line {there.line} ({metal}:{other.line})")
    return fault.moved(message, loc)


def at_python_lines(compiled: CompiledKernel, profile: Profile) -> Profile:
    """`profile` with its `.metal` lines moved to the kernel's Python lines they come from (as for faults,
    `metile.emit.source_map.FaultLocator`); counts of lines that lead to none (code the lowering adds around the
    kernel's own) stay at their `.metal` line."""
    metal = compiled.artifact.metal_name
    locator = FaultLocator(compiled.artifact)
    moved = []
    for lc in profile.lines:
        loc = locator.location(lc.line) if lc.file == metal else None
        if loc is None:
            moved.append(lc)
            continue
        moved.append(LineCounts(loc.file, loc.line, python_line_text(loc), lc.counts))
    return attrs.evolve(profile, lines=merge_lines(moved))


def python_line_text(loc: Loc) -> str:
    """The text of a Python source line (empty when the file cannot be read)."""
    return linecache.getline(loc.file, loc.line).rstrip("\n")


def compile_target_on(name: str, given: AppleTarget | None, dev, loc: Loc | None) -> AppleTarget:
    """The target kernel `name` compiles for on `dev`: the launch's `target=` (`given`), else the device's (an M1's
    without a device, `dev` None); a `LaunchError` when it has Metal 4 tensor operations and the device cannot run
    them."""
    target = given or getattr(dev, "target", DEFAULT_TARGET)
    if dev is not None and target.tensor_ops and not getattr(dev, "supports_tensor_ops", False):
        raise LaunchError(f"kernel {name} is compiled for a GPU with Metal 4 tensor operations ({target.family}); "
                          f"device {dev.name!r} has none: give a target without them (target='M4')", loc)
    return target


def check_device_limits(name: str, tpt: int, tg_memory: int, dev, loc: Loc | None,
                        metal_ir: Kernel | None = None, tile_ir: Kernel | None = None) -> None:
    """`LaunchError` if a kernel's threads per threadgroup or threadgroup memory exceed what `dev` allows. Over the
    memory limit, the message lists the threadgroup arrays of `metal_ir` that use it, largest first (see
    `threadgroup_arrays`), and the error points at the line that needs the largest (at `loc` when none has one)."""
    if tpt > dev.max_threads_per_threadgroup:
        raise LaunchError(f"kernel {name} runs {tpt} threads per threadgroup; device {dev.name!r} allows at most "
                          f"{dev.max_threads_per_threadgroup}", loc)
    if tg_memory > dev.max_threadgroup_memory:
        message = (f"kernel {name} uses {tg_memory} bytes of threadgroup memory; device {dev.name!r} allows at most "
                   f"{dev.max_threadgroup_memory} bytes")
        uses = sorted(threadgroup_arrays(metal_ir, tile_ir), key=_bytes, reverse=True) if metal_ir is not None else []
        if uses:
            message += ":" + "".join(f"\n  {n} bytes{'' if at is None else f' at line {at.line}'}: {what}"
                                     for n, what, at in uses)
            loc = next((at for _, _, at in uses if at is not None), loc)
        raise LaunchError(message, loc)
    if tile_ir is not None and not getattr(dev, "supports_addresses", False):
        made = next((n for n in walk(tile_ir) if n.__class__ is IntToPtr), None)
        if made is not None:
            raise LaunchError(f"kernel {name} makes pointers of integer addresses (a pointer table), which run on the "
                              f"CPU device only: on device {dev.name!r} an array's data_ptr() is not a GPU address "
                              "and the buffers such pointers reach are not resident during the dispatch",
                              made.loc or loc)


def _bytes(use: tuple) -> int:
    return use[0]


def threadgroup_arrays(k: Kernel, tile_ir: Kernel | None = None) -> list[tuple[int, str, Loc | None]]:
    """`(bytes, what, location)` of each threadgroup array of the Metal IR kernel `k` (the `Let`s of `SharedAlloc`s at
    its top level): the `metile.shared` arrays at their call (the allocation keeps the user's location; the user's
    name for it comes from `tile_ir`, the Tile IR `k` was lowered from, when given), the lowering's per-dtype scratch
    at the statement that needs the most of it, a `simdgroup_role` block's channels at the block (the `Let` has the
    location of those two)."""
    names = {}
    for s in tile_ir.body if tile_ir is not None else ():
        match s:
            case Let(var, SharedAlloc() as alloc) if alloc.loc is not None:
                names[alloc.loc] = var.name
    out = []
    for s in k.body:
        match s:
            case Let(var, SharedAlloc() as alloc):
                size = f"{'x'.join(str(d) for d in alloc.shape)} {alloc.dtype.value}"
                if alloc.loc is not None:
                    what = f"metile.shared array `{names.get(alloc.loc, var.name)}` ({size})"
                elif var.name.endswith("_channel"):
                    what = f"a channel ({size}) through which a simdgroup_role block hands a tile to other threads"
                elif var.name.startswith("ring_"):
                    what = (f"the buffers ({size}) a pipelined loop's dot operand rotates through (its num_stages; "
                            "fewer stages or smaller tiles need less)")
                elif var.name.startswith("staged_"):
                    what = f"a dot operand staged once before its loop ({size})"
                else:
                    what = (f"the compiler's {alloc.dtype.value} scratch ({size}), through which threads exchange "
                            "the values of tiles they reduce along an axis, broadcast or give to dot (smaller tiles "
                            "need less)")
                out.append((alloc.size * alloc.dtype.itemsize, what, alloc.loc or s.loc))
    return out


def raise_grid_too_large(compiled: CompiledKernel, grid, dims: tuple[int, int, int]) -> None:
    axis = next(a for a in range(3) if dims[a] > compiled.max_grid[a])
    limit = compiled.max_grid[axis]
    why = (f"{compiled.threadgroup_size} threads per program, and Metal numbers the threads of a grid dimension "
           f"with a 32-bit uint: at most {MAX_GRID_THREADS}" if limit < MAX_GRID else "program ids are i32")
    raise GridError(f"grid {grid!r} is too large for {compiled.tile_ir.name}: axis {axis} allows at most {limit} "
                    f"programs ({why})")


def normalize_grid(grid) -> tuple[int, ...]:
    """`grid` as a tuple of 1 to 3 positive ints, or a `GridError`."""
    if callable(grid):
        raise GridError("a callable grid is called with the launch's arguments (kernel[grid](...)); here it needs "
                        "a tuple of ints")
    dims = grid if isinstance(grid, (tuple, list)) else (grid,)
    if not 1 <= len(dims) <= 3:
        raise GridError(f"a grid has 1, 2 or 3 dimensions, not {len(dims)}")
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise GridError(f"grid dimensions must be ints, not {type(d).__name__}")
        if not 0 < int(d) <= MAX_GRID:
            raise GridError(f"grid {tuple(dims)} is empty or too large: each dimension must be in 1..{MAX_GRID}")
        out.append(int(d))
    return tuple(out)


def grid3(grid) -> tuple[int, int, int]:
    """`normalize_grid(grid)` padded to 3 dimensions; a tuple of Python ints in range skips the general checks."""
    dims = grid if grid.__class__ is tuple else (grid,) if grid.__class__ is int else None
    if dims is not None and 0 < len(dims) <= 3:
        for d in dims:
            if d.__class__ is not int or not 0 < d <= MAX_GRID:
                break
        else:
            return dims + _PAD[len(dims)]
    dims = normalize_grid(grid)
    return dims + _PAD[len(dims)]


__all__ = ["MAX_GRID", "MAX_GRID_THREADS", "CompiledKernel", "Launch", "PreparedLaunch", "at_python_line",
           "check_device_limits", "compile_target_on", "grid3", "normalize_grid", "raise_grid_too_large",
           "threadgroup_arrays"]
