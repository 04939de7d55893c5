"""Triton kernels that run both on metile (with `metile.triton.install()`) and on Triton's own interpreter
(`TRITON_INTERPRET=1`, in a process without metile), so that tests compare the two."""
