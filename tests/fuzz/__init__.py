"""A differential fuzzer for metile: random tile programs, run on the CPU device, checked against a numpy model.

- `dtypes`: the element types and the promotion rules of docs/language.md 3.3; rounding to each float format.
- `prog`: the program syntax (expressions, statements, kernels), rendered as `@metile.kernel` source.
- `model`, `model_math`, `model_reduce`, `model_shapes`: the numpy model of each operation, written from
  docs/language.md (values, activity, and how far a correct result may lie from the model's: 0 where the language
  promises exact results); `combine_fns`: the combine functions programs give `reduce` and `associative_scan`.
- `interp`, `interp_memory`, `interp_flow`, `interp_more`: run a program on the model (loops, branches, atomics and
  early exits included), giving each output array and its error bounds.
- `gen`, `gen_ops`, `gen_loads`, `gen_themes`, `gen_shapes`, `gen_flow`: random, valid programs (sections of
  several themes batched into one kernel, so that one C++ compile runs several programs; a section that may
  `return` goes last).
- `runner`: writes a kernel to a module, launches it with each pipeline, compares with the model.
- `shrink`, `repro`: reduce a failing program to a small standalone script.

`tests/test_differential_fuzz.py` runs a fixed set of seeds; `benchmarks/fuzz.py` runs many and shrinks failures.
"""
