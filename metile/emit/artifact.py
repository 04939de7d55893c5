"""A kernel compiled to MSL as one value, `MslArtifact`: what a device needs to run it, so that no device reads the
text again to find out how to bind or launch it.

- `emit_artifact(metal_ir)` emits a Metal IR kernel (`metile.emit.msl.emit_located`) and gathers the artifact;
- `compile_to_msl(kernel, passes)` runs a pipeline on a kernel (Tile IR, usually; `DEFAULT_PIPELINE` unless
  `passes` says otherwise) and emits the result.

The artifact holds the MSL text, the kernel function's signature (each parameter's name, `[[buffer(i)]]` index,
declared type and so whether it is `const`, and the thread-position attributes it reads), the launch plan (threads
per threadgroup, threadgroup memory), and the Python location each line of the text comes from, which fault and
profile reports use. `metile.device(...).compile(artifact)` compiles it on a device, binding its arguments by its
signature.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

import attrs

from metile.emit.msl import emit_located
from metile.emit.signature import KernelSignature
from metile.emit.spell import EmitError
from metile.ir.errors import Loc
from metile.ir.ops import Stage
from metile.ir.stmts import Kernel, LaunchPlan
from metile.ir.target import DEFAULT_TARGET, AppleTarget
from metile.rewrite.passes import PipelineError, pass_name
from metile.rewrite.pipeline import DEFAULT_PIPELINE, check_pipeline, parse_pipeline, run


class LineLocations(Mapping):
    """The Python location of each line of a `.metal` text (numbered from 1) that leads back to one: an immutable
    mapping, equal to any mapping with the same items and hashed by them. It holds its own copy of the dict it is
    made from (one C-level copy; a persistent map would be built entry by entry on every compile)."""

    __slots__ = ("_by_line", "_hash")

    def __init__(self, by_line: Mapping[int, Loc] = ()):
        self._by_line: dict[int, Loc] = dict(by_line)
        self._hash: int | None = None

    def __getitem__(self, line: int) -> Loc:
        return self._by_line[line]

    def get(self, line: int, default=None):
        return self._by_line.get(line, default)

    def __contains__(self, line: object) -> bool:
        return line in self._by_line

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_line)

    def __len__(self) -> int:
        return len(self._by_line)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LineLocations):
            return self._by_line == other._by_line
        return self._by_line == other if isinstance(other, Mapping) else NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._by_line.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"LineLocations({self._by_line!r})"

    def __reduce__(self):
        return LineLocations, (self._by_line,)


def _line_locations(locations: Mapping[int, Loc]) -> LineLocations:
    return locations if locations.__class__ is LineLocations else LineLocations(locations)


@attrs.frozen
class MslArtifact:
    """One kernel as MSL, with what a device needs to run it (see the module docstring).

    `msl` is the complete `.metal` source, `metal_name` the file name messages and faults give it,
    `signature` its kernel function's, `plan` the launch plan of the Metal IR it was emitted from, and
    `locations` the Python location of each line of `msl` (numbered from 1) that leads back to one."""

    msl: str
    metal_name: str
    signature: KernelSignature
    plan: LaunchPlan
    locations: LineLocations = attrs.field(converter=_line_locations, repr=False)

    @property
    def entry(self) -> str:
        """The name of the kernel function."""
        return self.signature.name

    @property
    def threads(self) -> int:
        """Threads per threadgroup (one program)."""
        return self.plan.threads

    @property
    def threadgroup_memory(self) -> int:
        """Bytes of threadgroup memory the kernel declares."""
        return self.plan.threadgroup_memory

    @property
    def written_buffers(self) -> frozenset[int]:
        """The `[[buffer(i)]]` indices of the pointers the kernel may write."""
        return self.signature.written_buffers

    def location(self, line: int) -> Loc | None:
        """The Python location `.metal` line `line` comes from, None when it leads to none."""
        return self.locations.get(line)


def emit_artifact(kernel: Kernel) -> MslArtifact:
    """The artifact of the Metal IR `kernel` (an `EmitError` for another stage, or for a kernel without a launch
    plan)."""
    msl, signature, locations = emit_located(kernel)
    if kernel.plan is None:
        raise EmitError(f"kernel {kernel.name} has no launch plan (plan_launch sets one)", kernel.loc)
    return MslArtifact(msl, f"{kernel.name}.metal", signature, kernel.plan, locations)


def compile_to_msl(kernel: Kernel, passes: Iterable | None = None, *, target: AppleTarget = DEFAULT_TARGET,
                   verify_each: bool = False, on_pass: Callable[[str, Kernel], None] | None = None) -> MslArtifact:
    """`kernel` lowered by `passes` (`DEFAULT_PIPELINE` when not given; a list of passes, or a textual pipeline
    such as `"fold_constants,skip_inactive,..."`, see `metile.rewrite.pipeline.parse_pipeline`) for `target`,
    and emitted: its `MslArtifact`. `verify_each` and `on_pass` are those of `metile.rewrite.pipeline.run`. A
    pipeline that does not end in Metal IR is a `PipelineError`."""
    if passes is None:
        pipeline = tuple(DEFAULT_PIPELINE)
    elif isinstance(passes, str):
        pipeline = tuple(parse_pipeline(passes))
    else:
        pipeline = check_pipeline(passes)
    metal_ir = run(pipeline, kernel, verify_each=verify_each, on_pass=on_pass, target=target)
    if metal_ir.stage is not Stage.METAL:
        last = pass_name(pipeline[-1]) if pipeline else "an empty pipeline"
        raise PipelineError(f"the pipeline ends in {metal_ir.stage.value} IR after {last}; its passes must lower "
                            f"kernel {kernel.name} to Metal IR", kernel.loc)
    return emit_artifact(metal_ir)


__all__ = ["LineLocations", "MslArtifact", "compile_to_msl", "emit_artifact"]
