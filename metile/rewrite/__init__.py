"""Rewrite rules, drivers, passes and pipelines over the IR.

What a user of the compiler needs is exported here:
- pipelines: `DEFAULT_PIPELINE` (Tile IR -> Metal IR), `OPTIONAL_PASSES` (those that only make kernels faster),
  `run(passes, kernel)`, `parse_pipeline("fold_constants,skip_inactive,...")` (a textual pipeline, its passes
  taken by name from the default pipeline's or from a list given, its order checked), `check_pipeline`;
- passes as values: `Pass`, `define_pass`, `Fact`, `PassContext` (the target and the run's `Analyses`),
  `check_order`, `pass_name`, `pass_key`, and each pass of the default pipeline by its name;
- drivers of rules (`Node -> Node | None`): `bottom_up`, `first_of`, `by_class`, `substitute`, `Rule`;
- errors: `PipelineError`, `RewriteError`, `UnsupportedConstructError`.

Modules: `driver` (the drivers), `passes` (`Pass`, contracts, textual pipelines), `context` (`PassContext`),
`pipeline` (`DEFAULT_PIPELINE`, `run`, `parse_pipeline`; its `pipeline(spec, extra)` is not exported here, where
that name is the module's), `fold`, `inactive`, `optimize`, `tensor_ops`, `plan`, `layouts`, `staging_plan`, `lower` and
`threadgroup_memory` (the passes and their rules), `errors`.
"""

from __future__ import annotations

from metile.rewrite.context import Analyses, PassContext
from metile.rewrite.conversions import insert_conversions
from metile.rewrite.driver import RewriteError, Rule, bottom_up, by_class, first_of, substitute
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.fold import fold_constants
from metile.rewrite.inactive import skip_inactive
from metile.rewrite.layouts import assign_layouts
from metile.rewrite.lower import lower_tiles
from metile.rewrite.optimize import (
    direct_operands,
    group_programs,
    hoist_staging,
    multi_buffer,
    pad_staging,
    preload_fragments,
    serpentine_mma,
    split_k,
)
from metile.rewrite.passes import (
    Fact,
    Pass,
    PipelineError,
    check_order,
    define_pass,
    pass_key,
    pass_name,
)
from metile.rewrite.pipeline import DEFAULT_PIPELINE, OPTIONAL_PASSES, check_pipeline, parse_pipeline, run
from metile.rewrite.plan import plan_launch, vectorize_memory
from metile.rewrite.staging_plan import plan_staging
from metile.rewrite.tensor_ops import use_tensor_ops
from metile.rewrite.threadgroup_memory import allocate_threadgroup_memory

__all__ = [
    "DEFAULT_PIPELINE", "OPTIONAL_PASSES", "Analyses", "Fact", "Pass", "PassContext", "PipelineError", "RewriteError",
    "Rule", "UnsupportedConstructError", "allocate_threadgroup_memory", "assign_layouts", "bottom_up", "by_class",
    "check_order", "check_pipeline", "define_pass", "direct_operands", "first_of", "fold_constants", "group_programs",
    "hoist_staging", "insert_conversions", "lower_tiles", "multi_buffer", "pad_staging", "parse_pipeline", "pass_key",
    "pass_name", "plan_launch", "plan_staging", "preload_fragments", "run", "serpentine_mma", "skip_inactive",
    "split_k", "substitute", "use_tensor_ops", "vectorize_memory",
]
