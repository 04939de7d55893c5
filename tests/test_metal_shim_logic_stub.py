"""The decisions of the Metal shim (metile/metal/gpu/shim_logic.h, which shim.m and the C stand-in both call), against
the stand-in's model of what Metal then does: encoders that share memory Metal does not track (MLX's buffers) run in
any order unless a fence orders them, an encoder's argument table keeps the previous dispatch's entries, a buffer's
offset must be aligned and its bytes inside it, and a command buffer whose commit threw never completes."""

from __future__ import annotations

import numpy as np
import pytest
from metal_stub import KERNELS
from test_metal_hardening import MetalTensor

from metile.metal.errors import DeviceError, LaunchError
from metile.metal.gpu.binding import ERR_ARGUMENT, ERR_EXCEPTION

N = 1024


def test_an_encoder_reading_what_the_one_before_wrote_in_untracked_memory_waits_for_its_fence(stub, dev, add):
    """MLX allocates its buffers untracked: Metal orders nothing between encoders that use them, so the second kernel
    could read the first one's output before it is written. Each encoder waits for the fence the one before it
    updated; the stand-in runs an encoder that does not before the one it depends on."""
    block_sum = dev.compile(KERNELS, name="kernels.metal").function("block_sum")
    mems = [dev.allocate(4 * N) for _ in range(4)]
    views = [np.frombuffer(stub.ffi.buffer(m.ptr, 4 * N), np.float32) for m in mems]
    views[0][:], views[1][:] = 1.0, 2.0
    for m in mems:
        stub.lib.mts_stub_set_untracked(m.handle, 1)
    a, b, out, sums = (MetalTensor(m, N, 0) for m in mems)
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [a, b, out, N])
    dev.dispatch_threadgroups(block_sum, (4, 1, 1), (256, 1, 1), [out, sums], threadgroup_memory=[1024])
    dev.synchronize()
    np.testing.assert_array_equal(views[3][:4], 3.0 * 256)      # block_sum read add's results
    waits = [line.split("fence_wait=")[1].split()[0] for line in stub.calls("commands_encode")]
    assert waits == ["0", "1"]


def test_an_index_a_dispatch_leaves_unbound_does_not_keep_the_previous_dispatch_s_buffer(stub, dev, add):
    """Metal keeps an encoder's argument table between dispatches: an index the next dispatch of the same kernel
    leaves unbound would still hold the previous one's buffer, and the kernel would read it. It is cleared."""
    seen = []
    stub.execute_with(lambda r: seen.append(r.args))
    a, b = np.ones(N, np.float32), np.full(N, 2.0, np.float32)
    dev.dispatch_threads(add, N, 256, [a, b, np.zeros(N, np.float32), N])
    dev.dispatch_threads(add, N, 256, [a, None, np.zeros(N, np.float32), 0])   # the same encoder
    dev.synchronize()
    assert [x is None for x in seen[1]] == [False, True, False, False]
    assert stub.calls("commands_encode")[1].endswith("encoder=1 label=add")


def _encode_raw(stub, dev, add, *, offset: int, length: int, align: int, buffer_bytes: int = 64):
    ffi, lib = stub.ffi, stub.lib
    err = ffi.new("char**")
    mem = dev.allocate(buffer_bytes)
    table = ffi.new("mts_binding[1]")
    table[0].buffer, table[0].offset, table[0].length, table[0].align = mem.handle, offset, length, align
    cmds = ffi.new("mts_commands**")
    assert lib.mts_commands_begin(dev.handle, 0, cmds, err) == 0
    code = lib.mts_commands_encode(cmds[0], add.handle, b"add", 0, 1, 1, 1, 16, 1, 1, table, 1, ffi.NULL, 0, err)
    message = ""
    if code:
        message = ffi.string(err[0]).decode()
        lib.mts_string_free(err[0])
    lib.mts_commands_release(cmds[0])
    return code, message


@pytest.mark.parametrize(("offset", "length", "align", "message"), [
    (2, 0, 4, "offset is not a multiple of the alignment of its type"),
    (8, 60, 4, "uses bytes past the end of its buffer (offset + length)"),
    (0, 65, 0, "uses bytes past the end of its buffer"),
    (0, 0, 3, "alignment is not a power of two"),
    (16, 48, 16, None),
])
def test_the_shim_checks_a_binding_s_alignment_and_the_bytes_it_uses(stub, dev, add, offset, length, align, message):
    code, text = _encode_raw(stub, dev, add, offset=offset, length=length, align=align)
    if message is None:
        assert code == 0
    else:
        assert code == ERR_ARGUMENT and message in text


class Misaligned(MetalTensor):
    """A tensor in Metal memory 2 bytes into its buffer (a view of another library's bytes as float32, say)."""

    def __dlpack__(self, stream=None):
        from metile.metal import dlpack

        capsule = super().__dlpack__()
        raw = dlpack._api.PyCapsule_GetPointer(dlpack.ffi.cast("void*", id(capsule)), b"dltensor")
        dlpack.ffi.cast("DLManagedTensor*", raw).dl_tensor.byte_offset = 2
        return capsule


def test_a_tensor_of_another_library_at_a_misaligned_offset_is_refused_at_its_parameter(stub, dev, add):
    t = Misaligned(dev.allocate(4 * (N + 1)), N, 0)
    ok = MetalTensor(dev.allocate(4 * N), N, 0)
    with pytest.raises(LaunchError, match=r"argument 0 \(`a`\) starts 2 bytes into its Metal buffer, not at a "
                                          r"multiple of 4 bytes, the alignment of `float`"):
        dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [t, ok, ok, N])
    assert stub.calls("commands_encode") == []


def test_a_tensor_whose_span_passes_its_buffer_s_end_is_refused_by_the_shim(stub, dev, add):
    small = MetalTensor(dev.allocate(4 * 100), N, 0)     # N elements claimed in a buffer of 100
    ok = MetalTensor(dev.allocate(4 * N), N, 0)
    with pytest.raises(DeviceError, match="uses bytes past the end of its buffer"):
        dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [small, ok, ok, N])


def test_a_command_buffer_whose_commit_threw_is_never_waited_for(stub, dev, add):
    """A commit that throws leaves the command buffer uncommitted, and waiting for it would never return: it is not
    committed until commit returns, so neither the stream nor its release waits for it."""
    a, out = np.ones(N, np.float32), np.zeros(N, np.float32)
    dev.dispatch_threads(add, N, 256, [a, a, out, N])
    stub.fail("commands_commit", ERR_EXCEPTION, "mts_commands_commit: Objective-C exception MTLDebug: bad commit")
    with pytest.raises(DeviceError, match="committing a command buffer of 1 launch.*bad commit"):
        dev.synchronize()
    assert stub.lib.mts_stub_hangs() == 0
    release = stub.calls("commands_release")[-1]
    assert "waited_at_release" not in release and "committed_at_release" not in release
    dev.dispatch_threads(add, N, 256, [a, a, out, N])   # the next command buffer waits for no fence of the failed one
    dev.synchronize()
    np.testing.assert_array_equal(out, 2.0)
    assert stub.calls("commands_encode")[-1].split("fence_wait=")[1].startswith("0")


def test_with_neither_a_default_device_nor_any_device_the_gpu_is_unavailable(stub, make_device):
    from metile.metal.errors import DeviceUnavailableError

    stub.set_system(15, default_device=False)
    stub.lib.mts_stub_set_devices(0)
    with pytest.raises(DeviceUnavailableError, match="neither MTLCreateSystemDefaultDevice nor MTLCopyAllDevices"):
        make_device()


@pytest.mark.parametrize(("os_major", "metal4", "math"), [(14, False, "fastMathEnabled"), (15, False, "mathMode"),
                                                           (16, True, "mathMode"), (26, True, "mathMode")])
def test_the_shim_reads_macos_16_as_26(stub, make_device, os_major, metal4, math):
    """A process told macOS 16 is on macOS 26 (a Python built with an older SDK): the shim asks for Metal 4 there."""
    stub.set_system(os_major, metal4_family=True)
    dev = make_device(os_version=f"{os_major}.0")
    assert dev.supports_metal4 is metal4
    dev.compile(KERNELS, name="kernels.metal")
    assert f"math={math} " in stub.calls("library_from_source")[-1]
