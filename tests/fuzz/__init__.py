"""A differential fuzzer for metile: random tile programs, run on the CPU device, checked against a numpy model.

- `dtypes`: the element types and the promotion rules of docs/language.md 3.3; rounding to each float format.
- `prog`: the program syntax (expressions, statements, kernels), rendered as `@metile.kernel` source.
- `model`: the numpy model of each operation, written from docs/language.md (values, activity, error bounds).
- `interp`: runs a program on the model, giving each output array and how strictly to compare it.
- `gen`: random, valid programs (sections of several themes batched into one kernel).
- `runner`: writes a kernel to a module, launches it with each pipeline, compares with the model.
- `shrink`: reduces a failing program to a small repro.
"""
