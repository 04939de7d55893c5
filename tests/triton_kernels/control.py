"""Control flow in Triton kernels: `return`, `break`, `continue`, `while` (and `and`/`or`/`not` in conditions).
`run()` launches each kernel on its inputs and returns the outputs by case name, on whichever `triton` is imported.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def early_return(X, Y, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid * BLOCK >= n:
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    if pid == 1:
        tl.store(Y + offs, -x, mask=offs < n)
        return
    tl.store(Y + offs, tl.sum(x, axis=0) + x, mask=offs < n)


@triton.jit
def loop_exits(X, Out, n):
    acc = 0.0
    count = 0
    for i in range(0, n):
        v = tl.load(X + i)
        if v < 0.0:
            break
        if v == 0.0:
            continue
        acc += v
        count += 1
    inner = 0
    for r in tl.range(0, 4):
        for c in range(0, n):
            if c > r:
                break
            inner += 1
    first = -1
    for i in tl.static_range(6):
        if first < 0 and tl.load(X + i) > 2.5:
            first = i
    tl.store(Out, acc)
    tl.store(Out + 1, count.to(tl.float32))
    tl.store(Out + 2, inner.to(tl.float32))
    tl.store(Out + 3, first.to(tl.float32))


@triton.jit
def while_loops(X, Out, n):
    i = 0
    s = 0.0
    while i < n and tl.load(X + i) >= 0.0:   # X holds a negative value: no load past n
        s += tl.load(X + i)
        i += 1
    j = 0
    while j < n:
        j += 1
        if j % 2 == 0:
            continue
        s += 100.0
    k = n
    while not (k <= 0) or False:
        k -= 3
    tl.store(Out, s)
    tl.store(Out + 1, i.to(tl.float32))
    tl.store(Out + 2, k.to(tl.float32))


def run(device: str = "cpu") -> dict:
    import torch

    out = {}
    x = torch.arange(10, dtype=torch.float32, device=device)
    y = torch.zeros(16, device=device)
    early_return[(4,)](x, y, 10, BLOCK=4)
    out["early_return"] = y
    for name, values in (("a", [1, 2, 0, 3, -1, 7]), ("b", [1, 2, 3, 4, 6, 0]), ("c", [0, 0, 0, 0, 0, 0]),
                         ("d", [-1, 2, 3, 4, 5, 6])):
        x = torch.tensor(values, dtype=torch.float32, device=device)
        o = torch.zeros(4, device=device)
        loop_exits[(1,)](x, o, 6)
        out[f"loop_exits_{name}"] = o
        if min(values) < 0:
            o = torch.zeros(3, device=device)
            while_loops[(1,)](x, o, 6)
            out[f"while_loops_{name}"] = o
    return {k: v.cpu().numpy() for k, v in out.items()}


if __name__ == "__main__":
    import pickle
    import sys

    sys.stdout.buffer.write(pickle.dumps(run()))
