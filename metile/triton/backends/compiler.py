"""`triton.backends.compiler`: the names programs import from Triton's backend interface: `GPUTarget` (what a
kernel is compiled for; metile's driver answers with backend "metal"), `Language` and `BaseBackend`, the abstract
class of Triton's compiler plug-ins (metile has none: `triton.backends.backends` is empty)."""

from __future__ import annotations

import abc
import dataclasses
import enum


@dataclasses.dataclass(frozen=True)
class GPUTarget:
    """What kernels are compiled for (Triton's `GPUTarget`): on metile `backend` is "metal" and `arch` the Apple GPU
    family."""

    backend: str
    arch: int | str
    warp_size: int


class Language(enum.Enum):
    """The front end a backend compiles from (Triton's `Language`)."""

    TRITON = 0
    GLUON = 1


class BaseBackend(abc.ABC):
    """Triton's interface of a compiler plug-in, for programs that subclass or check against it."""

    supports_native_tensor_specialization = True

    def __init__(self, target: GPUTarget) -> None:
        if not self.supports_target(target):
            raise ValueError(f"{type(self).__name__} does not compile for {target}")
        self.target = target

    @staticmethod
    @abc.abstractmethod
    def supports_target(target: GPUTarget) -> bool: ...

    @abc.abstractmethod
    def hash(self) -> str: ...

    @abc.abstractmethod
    def parse_options(self, options: dict) -> object: ...

    @abc.abstractmethod
    def add_stages(self, stages: dict, options: object, language: Language) -> None: ...

    @abc.abstractmethod
    def load_dialects(self, context) -> None: ...

    @abc.abstractmethod
    def get_module_map(self) -> dict: ...


__all__ = ["BaseBackend", "GPUTarget", "Language"]
