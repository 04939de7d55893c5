"""The cffi declarations of the CPU runtime match mt_runtime.h as the C compiler lays it out."""

from __future__ import annotations

import re
import subprocess

import pytest

from metile.metal.cpu.runtime_api import CDEF, ffi
from metile.metal.cpu.toolchain import HERE, find_compiler


def struct_fields(name: str) -> list[str]:
    pattern = "typedef struct " + name + r" \{(.*?)\} " + name + ";"
    body = re.search(pattern, CDEF, re.S).group(1)
    return [re.findall(r"(\w+)(?:\[\d+\])?;", line)[0] for line in body.splitlines() if ";" in line]


@pytest.mark.parametrize("struct", ["mt_fault", "mt_launch_desc"])
def test_struct_layout_matches_the_header(tmp_path, struct):
    fields = struct_fields(struct)
    assert len(fields) >= 10
    lines = [f'printf("%zu\\n", sizeof({struct}));']
    lines += [f'printf("%zu\\n", offsetof({struct}, {f}));' for f in fields]
    src = tmp_path / "layout.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include \"mt_runtime.h\"\nint main(void) {\n"
                   + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    cc = find_compiler()
    subprocess.run([cc.path, "-x", "c++", f"-I{HERE}", str(src), "-o", str(exe)], check=True)
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    want = [ffi.sizeof(struct)] + [ffi.offsetof(struct, f) for f in fields]
    assert got == want
