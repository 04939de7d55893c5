"""The frontend: a `@metile.kernel` Python function -> Tile IR (`Stage.TILE`).

Modules: `errors` (the user-facing error classes), `specialize` (parameter kinds, argument types,
the cache key), `dialect` (the rules of a kernel's language the tracer consults: metile's own, `METILE`; Triton's is
`metile.triton.dialect`), `semantic` (typing of operators: promotion, broadcasting, pointer arithmetic),
`builtins` (one implementation per `metile.language` function), `library` (casts, more math, scans, random
numbers) and `helpers` (meTile's `scalar`, `fast_exp`, `simd_sum`, `simd_max` and Triton's `static_range`, built
from other functions), `exprs` (the walk over expressions: compile-time values are computed, traced ones build
IR), `trace` (the walk over a kernel's statements), `control` (runtime `if`/`while`/`tile_range` with
loop-carried values and branch results), `replay` (a loop body traced again after its carried types widened
replays what did not change), `containers` (lists, tuples and dicts of traced values: ownership and the write
barrier), `container_calls` (their methods and the builtins that take them), `displays` (container displays and
comprehensions) and `regions` (what a runtime `if`, loop or role block does with the container items it assigns).
"""

from __future__ import annotations
