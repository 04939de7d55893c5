"""`compile_to_msl` and `MslArtifact`: one value holding a kernel's MSL, its signature, its launch plan and the Python
line of each `.metal` line, which the devices, the launch and fault reports take as it is, without reading the MSL
again (hand-written MSL keeps being read for its signature)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import metile
from metile.emit import EmitError, MslArtifact, compile_to_msl, emit_artifact, emit_msl
from metile.emit.signature import KernelSignature, Param, ParamKind
from metile.ir import Stage, parse, pretty
from metile.metal.errors import MSLCompileError
from metile.metal.msl_signature import kernel_signatures
from metile.rewrite import DEFAULT_PIPELINE, PipelineError, run

sys.path.insert(0, str(Path(__file__).parent))
from acceptance_kernels import docs_examples as docs  # noqa: E402

kernel_module = importlib.import_module("metile.kernel")

CASES = {
    "vec_add": (docs.vec_add, (np.zeros(1000, np.float32),) * 3 + (1000,), {"BLOCK": 256}),
    "softmax": (docs.softmax_rows, (np.zeros(64 * 300, np.float32), np.zeros(64 * 300, np.float32), 300),
                {"BLOCK": 256}),
    "gemm": (docs.matmul, (np.zeros(64 * 64, np.float32),) * 3 + (64, 64, 64),
             {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}),
    "layernorm": (docs.layernorm, (np.zeros(32 * 300, np.float32), np.zeros(300, np.float32),
                                   np.zeros(300, np.float32), np.zeros(32 * 300, np.float32), 300, 1e-5),
                  {"BLOCK": 256}),
}


@metile.kernel
def faulty_load(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs + n)   # the load: the n elements past the end, in the guard page after X
    metile.store(Y + offs, x)


def binding(sig: KernelSignature) -> list[tuple]:
    return [(p.name, p.kind, p.index, p.attribute, p.is_reference, p.is_const, p.type_text.replace(" ", ""), p.line)
            for p in sig.params]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_artifact_holds_the_text_signature_plan_and_lines_of_the_kernel(case):
    kern, args, constexprs = CASES[case]
    tile_ir = kern.trace(*args, **constexprs)
    artifact = compile_to_msl(tile_ir)
    metal_ir = run(DEFAULT_PIPELINE, tile_ir)
    assert artifact == emit_artifact(metal_ir)
    assert artifact.msl == emit_msl(metal_ir) and artifact.metal_name == f"{metal_ir.name}.metal"
    assert artifact.plan == metal_ir.plan and artifact.threads == metal_ir.plan.threads
    assert artifact.threadgroup_memory == metal_ir.plan.threadgroup_memory
    # the signature the emitter wrote is the one the text declares, parameter by parameter, line by line
    [read] = kernel_signatures(artifact.msl, artifact.metal_name)
    assert (artifact.entry, artifact.signature.line) == (read.name, read.line)
    assert binding(artifact.signature) == binding(read)
    buffers = [p for p in artifact.signature.params if p.kind is ParamKind.BUFFER]
    assert [p.index for p in buffers] == list(range(len(buffers)))
    assert any(p.kind is ParamKind.POSITION for p in artifact.signature.params)
    # every `.metal` line that leads back somewhere leads to the kernel's own function
    file, first = kern.fn.__code__.co_filename, kern.fn.__code__.co_firstlineno
    assert artifact.locations and all(loc.file == file and loc.line >= first for loc in artifact.locations.values())
    assert artifact.location(1) is None   # the `#include`
    assert hash(artifact) == hash(compile_to_msl(tile_ir))


def test_the_line_locations_are_an_immutable_mapping_equal_to_the_emitters_dict():
    import pickle

    from metile.emit.msl import emit_located

    kern, args, constexprs = CASES["vec_add"]
    metal_ir = run(DEFAULT_PIPELINE, kern.trace(*args, **constexprs))
    _, _, by_line = emit_located(metal_ir)
    locations = emit_artifact(metal_ir).locations
    assert locations == by_line and dict(locations) == by_line and list(locations) == sorted(by_line)
    assert hash(locations) == hash(emit_artifact(metal_ir).locations)
    assert pickle.loads(pickle.dumps(locations)) == by_line
    with pytest.raises(TypeError):
        locations[1] = None
    by_line.clear()   # the artifact keeps its own copy
    assert len(locations) > 0 and locations != by_line


def test_the_written_buffers_are_the_parameters_declared_without_const():
    kern, args, constexprs = CASES["vec_add"]
    artifact = compile_to_msl(kern.trace(*args, **constexprs))
    assert artifact.written_buffers == {2}
    assert [p.is_const for p in artifact.signature.buffers] == [True, True, False, True]


def test_compile_to_msl_takes_a_textual_pipeline_and_ir_read_from_text():
    kern, args, constexprs = CASES["softmax"]
    text = pretty(kern.trace(*args, **constexprs))
    spec = ",".join(p.name for p in DEFAULT_PIPELINE)
    assert compile_to_msl(parse(text), spec) == compile_to_msl(parse(text))
    assert compile_to_msl(parse(text), list(DEFAULT_PIPELINE)) == compile_to_msl(parse(text))


def test_a_pipeline_that_stops_before_metal_ir_is_refused():
    kern, args, constexprs = CASES["vec_add"]
    tile_ir = kern.trace(*args, **constexprs)
    with pytest.raises(PipelineError, match="ends in tile IR after fold_constants; its passes must lower"):
        compile_to_msl(tile_ir, "fold_constants")
    with pytest.raises(EmitError):
        emit_artifact(tile_ir)
    assert run(DEFAULT_PIPELINE, tile_ir).stage is Stage.METAL


def test_compile_to_msl_is_a_public_name_of_metile():
    assert metile.compile_to_msl is compile_to_msl and metile.MslArtifact is MslArtifact


def test_a_compiled_kernel_keeps_its_artifact_and_its_function_binds_by_its_signature():
    kern, args, constexprs = CASES["gemm"]
    compiled = kern.compile(*args, **constexprs)
    # the device binds by the artifact's signature (a kernel compiled before from the same text keeps its own, equal)
    assert compiled.function.signature == compiled.artifact.signature
    assert (compiled.msl, compiled.entry) == (compiled.artifact.msl, compiled.artifact.entry)
    assert compiled.threadgroup_size == compiled.artifact.threads == compiled.metal_ir.plan.threads


def test_the_cpu_device_refuses_a_signature_its_declaration_does_not_bind_as():
    kern, args, constexprs = CASES["vec_add"]
    artifact = compile_to_msl(kern.trace(*args, **constexprs))
    params = list(artifact.signature.params)
    params[0], params[1] = params[1], params[0]   # two buffers swapped: bound at each other's index
    wrong = MslArtifact(artifact.msl, "swapped.metal", KernelSignature(artifact.entry, tuple(params), 1),
                        artifact.plan, artifact.locations)
    with pytest.raises(MSLCompileError, match=r"the signature given for kernel `mtile_vec_add` binds parameter 0 "
                                              r"as `B` at \[\[buffer\(1\)\]\], const, its declaration as `A` at"):
        metile.device("cpu").compile(wrong)
    absent = MslArtifact(artifact.msl, "absent.metal", KernelSignature("other", (), 1), artifact.plan, {})
    with pytest.raises(MSLCompileError, match="no kernel function `other`, whose signature is given"):
        metile.device("cpu").compile(absent)


def test_the_metal_device_binds_an_artifact_by_its_signature_without_reading_the_text(dev, monkeypatch):
    gpu_device = importlib.import_module("metile.metal.gpu.device")

    def refuse(*args, **kwargs):
        raise AssertionError("the MSL of an artifact was read for its signature")

    monkeypatch.setattr(gpu_device, "kernel_signatures", refuse)
    kern, args, constexprs = CASES["vec_add"]
    artifact = compile_to_msl(kern.trace(*args, **constexprs))
    fn = dev.compile(artifact).function(artifact.entry)
    assert fn.signature is artifact.signature and fn.library.metal_name == artifact.metal_name
    with pytest.raises(AssertionError, match="read for its signature"):
        dev.compile(artifact.msl, name="hand-written.metal")   # hand-written MSL is read for it


def test_faults_are_located_by_the_artifact_without_emitting_again(monkeypatch):
    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    faulty_load.compile(x, y, 64, BLOCK=64)
    msl_module = importlib.import_module("metile.emit.msl")

    def refuse(*args, **kwargs):
        raise AssertionError("the kernel was emitted again")

    monkeypatch.setattr(msl_module._Emitter, "run", refuse)
    with pytest.raises(metile.DeviceFault) as e:
        faulty_load[(1,)](x, y, 64, BLOCK=64, sanitize=True)
    assert (e.value.loc.file, e.value.loc.line) == (__file__, faulty_load.fn.__code__.co_firstlineno + 3)


def test_foreign_arrays_are_bound_by_the_signature_without_reading_the_text(monkeypatch):
    torch = pytest.importorskip("torch")
    signature_module = importlib.import_module("metile.metal.msl_signature")

    def refuse(*args, **kwargs):
        raise AssertionError("the MSL was read for its signature")

    kern, _, constexprs = CASES["vec_add"]
    a, b, c = torch.ones(1000), torch.full((1000,), 2.0), torch.zeros(1000)
    kern.compile(a, b, c, 1000, **constexprs)   # compiled first: the CPU device translates the text then
    monkeypatch.setattr(signature_module, "kernel_signatures", refuse)
    monkeypatch.setattr(signature_module, "lex", refuse)
    kern[(4,)](a, b, c, 1000, **constexprs)
    assert torch.equal(c, torch.full((1000,), 3.0))


def test_an_artifact_without_a_launch_plan_is_refused():
    kern, args, constexprs = CASES["vec_add"]
    metal_ir = run(DEFAULT_PIPELINE, kern.trace(*args, **constexprs))
    import attrs

    with pytest.raises(EmitError, match="has no launch plan"):
        emit_artifact(attrs.evolve(metal_ir, plan=None))


def test_a_parameter_declares_itself_as_the_kernel_declares_it():
    assert Param("x", ParamKind.BUFFER, "device const float*", 0).declaration == "device const float* x [[buffer(0)]]"
    assert Param("n", ParamKind.BUFFER, "constant uint&", 3, is_reference=True).declaration == \
        "constant uint& n [[buffer(3)]]"
    assert Param("lid", ParamKind.POSITION, "uint", attribute="thread_index_in_threadgroup").declaration == \
        "uint lid [[thread_index_in_threadgroup]]"
    assert Param("s", ParamKind.BUFFER, "constant int*", 1, array="[2]").declaration == \
        "constant int s[2] [[buffer(1)]]"
