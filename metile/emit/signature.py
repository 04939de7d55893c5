"""Kernel signatures: the parameters of a `kernel` function as a device binds them (`[[buffer(i)]]` and
`[[threadgroup(i)]]` arguments, thread-position attributes), and the kernel's name.

The emitter writes the signature of each kernel it emits (`metile.emit.artifact.MslArtifact.signature`), so devices
bind a metile kernel's arguments without reading its MSL again; `metile.metal.msl_signature` reads the same values
from hand-written MSL.
"""

from __future__ import annotations

import enum

import attrs


class ParamKind(enum.Enum):
    BUFFER = "buffer"
    THREADGROUP = "threadgroup"
    POSITION = "position"


@attrs.frozen
class Param:
    name: str
    kind: ParamKind
    type_text: str          # declared type with address-space words, e.g. "device const float*" (arrays as pointers)
    index: int = -1         # [[buffer(i)]] / [[threadgroup(i)]], or the index Metal assigns
    attribute: str = ""     # position attribute name
    is_reference: bool = False
    line: int = 0
    function_constant: str = ""   # [[buffer(i), function_constant(b)]]: present only when the bool b is true
    array: str = ""               # the declared array bounds of an array parameter, e.g. "[2]"

    @property
    def address_space(self) -> str:
        for word in ("device", "constant", "threadgroup"):
            if word in self.type_text.split():
                return word
        return ""

    @property
    def element_type(self) -> str:
        """The pointee/referee type without address-space or cv words, e.g. "float"."""
        words = [w for w in self.type_text.replace("*", " ").replace("&", " ").split()
                 if w not in ("device", "constant", "threadgroup", "const", "volatile", "restrict")]
        return " ".join(words)

    @property
    def is_const(self) -> bool:
        return self.address_space == "constant" or "const" in self.type_text.split()

    @property
    def declaration(self) -> str:
        """The parameter as a kernel declares it: `device const float* x [[buffer(0)]]`, `uint3 x [[x]]`."""
        kind = self.kind
        bound = (f"buffer({self.index})" if kind is ParamKind.BUFFER else
                 f"threadgroup({self.index})" if kind is ParamKind.THREADGROUP else self.attribute)
        if self.array:   # read as a pointer: `constant int* s` declared `constant int s[2]`
            return f"{self.type_text.removesuffix('*').rstrip()} {self.name}{self.array} [[{bound}]]"
        return f"{self.type_text} {self.name} [[{bound}]]"


@attrs.frozen
class KernelSignature:
    name: str
    params: tuple[Param, ...]   # in the order the function declares them
    line: int
    max_total_threads: int = 0  # [[max_total_threads_per_threadgroup(n)]], 0 if absent
    callee: str = ""            # the C++ function to call when it is not `name` (e.g. "f<float>" for a host_name)
    function: str = ""          # the name its definition has in the source (a kernel template's name), if not `name`

    @property
    def defined_as(self) -> str:
        """The name of the function (or function template) whose body is this kernel's."""
        return self.function or self.name

    @property
    def call_name(self) -> str:
        return self.callee or self.name

    @property
    def buffers(self) -> tuple[Param, ...]:
        return tuple(sorted((p for p in self.params if p.kind is ParamKind.BUFFER), key=_index))

    @property
    def threadgroup_params(self) -> tuple[Param, ...]:
        return tuple(sorted((p for p in self.params if p.kind is ParamKind.THREADGROUP), key=_index))

    @property
    def written_buffers(self) -> frozenset[int]:
        """The `[[buffer(i)]]` indices of the pointers the kernel may write (declared without `const`)."""
        return frozenset(p.index for p in self.buffers if not p.is_reference and not p.is_const)


def _index(p: Param) -> int:
    return p.index


__all__ = ["KernelSignature", "Param", "ParamKind"]
