"""`python -m metile doctor`: what it prints on this machine (the CPU device works, Metal is not here), what it
prints when the C++ compiler is missing, and its Metal section and checks run against the C stand-in for the shim.
It never raises: every failure is a line of its output, and the exit status says whether every available device
passed."""

from __future__ import annotations

import os

import pytest

import metile
from metile import devices, doctor
from metile.__main__ import main
from metile.metal.gpu.binding import ERR_EXCEPTION

HEADINGS = ("system", "default device", "cache", "cpu device", "metal device", "checks")
CPU_OK = ("  cpu @metile.kernel vector add (1000 floats): OK (",
          "  cpu hand-written MSL (compile, dispatch_threadgroups): OK (")
METAL_OK = tuple(line.replace("  cpu ", "  metal ") for line in CPU_OK)


def run_doctor(capsys) -> tuple[int, str, str]:
    status = main(["doctor"])
    out, err = capsys.readouterr()
    return status, out, err


def lines_of(out: str) -> list[str]:
    return out.splitlines()


def has_line(out: str, start: str) -> bool:
    return any(line.startswith(start) for line in lines_of(out))


@pytest.fixture
def no_default(monkeypatch):
    monkeypatch.delenv("METILE_DEVICE", raising=False)


@pytest.mark.skipif(devices.metal_available(), reason="describes a machine without an Apple GPU")
def test_doctor_on_this_machine_reports_the_cpu_device_working_and_metal_absent(capsys, no_default):
    status, out, err = run_doctor(capsys)
    assert status == 0, out
    assert not err
    lines = lines_of(out)
    for heading in HEADINGS:
        assert heading in lines, f"no heading {heading!r} in:\n{out}"
    for key in ("  metile: 0.", "  python: ", "  os: ", "  numpy: ", "  cffi: ", "  default device: cpu",
                "  because: no Apple GPU here", "  directory: ", "  kernels/: ", "  compiler: ", "  device: ok"):
        assert has_line(out, key), f"no line {key!r} in:\n{out}"
    cpu_section = out.split("cpu device", 1)[1].split("metal device", 1)[0]
    assert "  tensor ops: yes\n" in cpu_section and "  tensor ops accelerated: no\n" in cpu_section
    assert "  available: no (the metal device needs macOS on Apple silicon; this machine runs " in out
    for check in CPU_OK:
        assert has_line(out, check), out
    assert "  metal: skipped (unavailable: the metal device needs macOS on Apple silicon; this machine runs " in out
    assert lines[-1] == "result: OK (every available device passed)"
    assert "METILE_DEVICE" not in os.environ   # the kernel check restores it


def test_a_missing_compiler_is_reported_with_exit_status_1(capsys, monkeypatch, tmp_path, no_default):
    """The CPU device is made once per process, so the process's devices are set aside: the doctor makes a new
    one, with CXX naming a compiler that does not exist."""
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setattr(devices, "_devices", {})
    status, out, err = run_doctor(capsys)
    assert status == 1, out
    assert "Traceback" not in out + err
    assert f"  CXX: {tmp_path / 'no-such-c++'}" in out
    assert has_line(out, "  compiler: not found: CompilerNotFoundError: the CPU device compiles MSL with a C++ "
                         "compiler and needs g++ >= 12 or clang++ >= 15")
    assert "  device: unavailable (no C++ compiler, see above)" in out
    assert has_line(out, "  cpu device: FAIL: CompilerNotFoundError: ")
    assert lines_of(out)[-1] == "result: FAIL (cpu device)"


@pytest.fixture
def stand_in(stub, make_device, monkeypatch, no_default):
    """A Metal device on the C stand-in, as the process's `metal` device on a machine that has one; its dispatches
    run their MSL on the CPU device."""
    from metal_stub import cpu_device_executor

    cpu = metile.device("cpu")
    stub.set_device_info(name=b"Apple M4 Pro (stand-in)", apple_family=9, max_threadgroup_memory=32768,
                         supports_metal4=1, tensor_probe=True)
    dev = make_device()
    stub.execute_with(cpu_device_executor(cpu))
    monkeypatch.setattr(devices, "metal_available", lambda: True)
    monkeypatch.setattr(devices, "_devices", {"cpu": cpu, "metal": dev})
    return dev


def test_the_metal_section_and_checks_on_the_stand_in(stand_in, stub, capsys):
    status, out, err = run_doctor(capsys)
    assert status == 0, out
    assert not stub.errors, stub.errors
    for line in ("  default device: metal", "  available: yes",
                 "  device: ok <metile device 'metal' (Apple M4 Pro (stand-in), Apple9)>",
                 "  gpu: Apple M4 Pro (stand-in)",
                 "  apple gpu family: Apple9", "  metal 4: yes", "  tensor ops: yes", "  tensor ops accelerated: no",
                 "  max threads per threadgroup: 1024", "  max threadgroup memory: 32768 bytes",
                 "  unified memory: yes", "  MetalOptions.aot: None (auto: AOT when `xcrun metal` runs, else JIT)",
                 f"  shim: {stand_in.shim.origin}"):
        assert line in lines_of(out), f"no line {line!r} in:\n{out}"
    assert has_line(out, "  compiles go: jit (no offline Metal toolchain")
    assert has_line(out, "  METILE_METAL_COMPILE: ")
    for check in (*CPU_OK, *METAL_OK):
        assert has_line(out, check), out
    assert lines_of(out)[-1] == "result: OK (every available device passed)"


def test_wrong_results_on_the_metal_device_fail_its_checks(stand_in, stub, capsys):
    stub.execute_with(lambda replay: None)      # the "GPU" runs nothing: the outputs stay zero
    status, out, err = run_doctor(capsys)
    assert status == 1
    assert has_line(out, "  metal @metile.kernel vector add (1000 floats): FAIL: max |metile - numpy| = ")
    assert has_line(out, "  metal hand-written MSL (compile, dispatch_threadgroups): FAIL: max |metile - numpy| = ")
    for check in CPU_OK:
        assert has_line(out, check), out
    assert lines_of(out)[-1] == ("result: FAIL (metal @metile.kernel vector add (1000 floats); "
                                 "metal hand-written MSL (compile, dispatch_threadgroups))")


@pytest.fixture
def created_on_the_stand_in(stub, monkeypatch, tmp_path, no_default):
    """The process's Metal device is made on the stand-in when the doctor asks for it (on a Mac on Apple silicon)."""
    from metal_stub import FakeXcrun

    from metile.metal.gpu.device import MetalDevice, MetalOptions

    def create(name):
        assert name == "metal"
        return MetalDevice(MetalOptions(cache_dir=tmp_path), shim=stub.shim, runner=FakeXcrun(present=False))

    stub.reset()
    monkeypatch.setattr(devices, "metal_available", lambda: True)
    monkeypatch.setattr(devices, "_devices", {"cpu": metile.device("cpu")})
    monkeypatch.setattr(devices, "_create", create)


def test_a_metal_device_that_says_it_is_unavailable_fails_only_as_the_default_device(
        stub, created_on_the_stand_in, monkeypatch, capsys):
    """A virtual machine's paravirtual GPU (no Apple GPU family) is not a device metile can use: reported as
    unavailable, with its reason; that fails the doctor while it is the default device, not with METILE_DEVICE=cpu."""
    stub.set_device_info(name=b"Apple Paravirtual device", apple_family=0)
    status, out, err = run_doctor(capsys)
    assert status == 1
    assert "Traceback" not in out + err
    assert has_line(out, "  available: no (DeviceUnavailableError: the Metal device 'Apple Paravirtual device' is "
                         "not an Apple7 (M1) or later GPU")
    assert has_line(out, "  metal: skipped (unavailable: DeviceUnavailableError: the Metal device 'Apple Paravirtual")
    assert has_line(out, "  default device: FAIL: it is metal, which is unavailable here")
    assert lines_of(out)[-1] == "result: FAIL (default device)"
    monkeypatch.setenv("METILE_DEVICE", "cpu")
    status, out, err = run_doctor(capsys)
    assert status == 0, out
    assert has_line(out, "  metal: skipped (unavailable: DeviceUnavailableError: ")
    assert lines_of(out)[-1] == "result: OK (every available device passed)"


def test_a_metal_device_that_fails_to_be_created_is_a_failure(stub, created_on_the_stand_in, capsys):
    stub.fail("device_query", ERR_EXCEPTION, "mts_device_query: Objective-C exception NSGenericException: boom")
    status, out, err = run_doctor(capsys)
    assert status == 1
    assert "Traceback" not in out + err
    message = ("DeviceError: querying the Metal device: mts_device_query: Objective-C exception NSGenericException: "
               "boom")
    assert f"  available: error: {message}" in lines_of(out)
    assert f"  metal device: FAIL: {message}" in lines_of(out)
    assert lines_of(out)[-1] == "result: FAIL (metal device)"


def test_the_doctor_never_raises(monkeypatch, capsys):
    def broken():
        raise RuntimeError("a probe nobody wrapped\nsecond line")

    monkeypatch.setattr(doctor, "system_facts", broken)
    status, out, err = run_doctor(capsys)
    assert status == 1
    assert lines_of(out)[-1] == "doctor: internal error: RuntimeError: a probe nobody wrapped"


def test_errors_are_shown_on_one_line():
    assert doctor.describe(ValueError("first\nsecond")) == "ValueError: first"
    assert doctor.describe(KeyError()) == "KeyError"
    long = doctor.describe(OSError("x" * 1000))
    assert len(long) == doctor.MAX_MESSAGE and long.endswith("...")
    assert doctor.probe(lambda: 1 / 0) == "error: ZeroDivisionError: division by zero"


def test_files_vanishing_while_the_cache_is_listed_are_not_counted(tmp_path, monkeypatch, capsys):
    """Other processes remove files from the cache while it is listed (a compile's temporary files, `cache clear`):
    a file that is gone by the time it is looked at again (here: the first look at each `.tmp` file removes it) is
    left out, and `metile doctor` still lists every part."""
    from metile import cache

    kernels = tmp_path / "kernels" / "ab"
    kernels.mkdir(parents=True)
    (kernels / "kept.so").write_bytes(b"x" * 10)
    for i in range(3):
        (kernels / f"k{i}.so.tmp").write_bytes(b"y" * 100)
    real_stat = os.stat

    def vanishing_stat(path, *args, **kwargs):
        found = real_stat(path, *args, **kwargs)
        if str(path).endswith(".tmp"):
            os.remove(path)   # gone right after this look
        return found

    monkeypatch.setattr(os, "stat", vanishing_stat)
    parts = {p.name: p for p in cache.cache_info(tmp_path)}
    assert 1 <= parts["kernels"].files <= 4 and 10 <= parts["kernels"].bytes <= 310
    assert sorted(p.name for p in kernels.iterdir()) == ["kept.so"]
    monkeypatch.setattr(os, "stat", real_stat)
    for i in range(3):
        (kernels / f"k{i}.so.tmp").write_bytes(b"y" * 100)
    monkeypatch.setattr(os, "stat", vanishing_stat)
    monkeypatch.setenv("METILE_CACHE_DIR", str(tmp_path))
    facts = dict(doctor.cache_facts())
    assert "kernels/" in facts and "error" not in facts.get("contents", ""), facts


def test_a_cache_folder_removed_while_it_is_listed_is_skipped(tmp_path, monkeypatch):
    from metile import cache

    (tmp_path / "kernels" / "gone").mkdir(parents=True)
    (tmp_path / "kernels" / "gone" / "a.so").write_bytes(b"z" * 7)
    (tmp_path / "kernels" / "b.so").write_bytes(b"z" * 5)
    real_scandir = os.scandir

    def scandir_then_remove(path="."):
        if str(path).endswith("gone"):
            for p in os.listdir(path):
                os.remove(os.path.join(path, p))
            os.rmdir(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir_then_remove)
    parts = {p.name: p for p in cache.cache_info(tmp_path)}
    assert (parts["kernels"].files, parts["kernels"].bytes) == (1, 5)
