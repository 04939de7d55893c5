"""Differential fuzzing of metile on the CPU device: random tile programs checked against a numpy model.

Each seed makes one kernel of 1 to 4 random programs (tests/fuzz), launched with the default pipeline and with
each optional pass removed where that changes the code (every --sanitize-every-th kernel also under the
sanitizer), each launch compared with the model of docs/language.md. A failing kernel is reduced to a small
repro (unless --no-shrink), written to --out as a standalone script, and summarised at the end: the number of
programs and launches, and each failure with its repro.

--off turns off constructs and strict checks with open bugs (the names of `tests.fuzz.gen.Features`), so that a
run looks for new ones; --known turns off every one the differential test (tests/test_differential_fuzz.py)
turns off. --jobs runs several worker processes.

Run: python benchmarks/fuzz.py [--n 200] [--seed 0] [--jobs 2] [--known] [--off a,b] [--no-shrink] [--out DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parents[1]   # not resolved: a checkout may link this folder
sys.path.insert(0, str(ROOT))
os.environ.setdefault("METILE_DEVICE", "cpu")


def features(off: list[str], known: bool):
    import attrs

    from tests.fuzz.gen import Features
    from tests.test_differential_fuzz import KNOWN_BUGS
    names = set(off) | (set(KNOWN_BUGS) if known else set())
    bad = names - {f.name for f in attrs.fields(Features)}
    if bad:
        raise SystemExit(f"unknown feature names: {sorted(bad)}")
    return Features(**{n: False for n in names})


def signature(k, failure) -> str:
    """What a failure is about: its kind, launch, and the operations left in its shrunk program."""
    from tests.fuzz.prog import kernel_src
    src = kernel_src(k)
    words = sorted({w for w in ("dot", "tile_load", "tile_store", "cumsum", "cumprod", "argmax", "argmin", "sum(",
                                "max(", "min(", "where", "maximum", "minimum", "for ", "if ", " // ", " % ", ".to(",
                                "bitcast", "fma", "exp", "log", "sqrt", "sigmoid", "erf", "tanh", "pow", " - ",
                                "atomic_", "reshape", "ravel", "permute", "trans(", "expand_dims", "broadcast_to",
                                "join", "split", "interleave", "flip", "gather", "sort", "topk", "histogram",
                                "reduce(", "associative_scan", "break", "continue", "return", "while ", " and ",
                                " or ", "not ", "int64", "i64", "u64")
                    if w in src})
    kind = failure.kind if failure.kind == "mismatch" else failure.detail.split(":")[0]
    return f"{kind} [{failure.launch}] {' '.join(words)}"


def work(job):
    seed, off, known, shrink, sanitize_every, drop_skip, out = job
    from tests.fuzz.gen_themes import gen_kernel
    from tests.fuzz.repro import repro_src
    from tests.fuzz.runner import STATS, check_kernel, still_fails
    from tests.fuzz.shrink import shrink as shrink_kernel
    feats = features(off, known)
    relax = feats.relax()
    folder = Path(tempfile.gettempdir()) / f"metile-fuzz-{os.getpid()}"
    before = dict(STATS)
    try:
        k = gen_kernel(seed, feats)
        fails, launches = check_kernel(k, folder, sanitize=sanitize_every > 0 and seed % sanitize_every == 0,
                                       drop_skip_inactive=drop_skip and feats.drop_skip_inactive, relax=relax)
    except Exception as e:  # noqa: BLE001 - a fault of the fuzzer itself: reported, the run goes on
        return seed, 0, 0, [("harness", f"{type(e).__name__}: {e}", "")], {}
    stats = {key: STATS[key] - before[key] for key in STATS}
    found = []
    for f in fails[:1]:
        small = k
        if shrink and f.kind != "invalid":
            small = shrink_kernel(k, still_fails(f, folder, relax=relax), tag=f.section or None)
        try:
            text = repro_src(small, f.launch, folder) if f.kind != "invalid" else str(f)
        except Exception as e:  # noqa: BLE001
            text = f"(no repro: {e})"
        name = Path(out) / f"seed{seed}.py"
        name.write_text(text)
        found.append((signature(small, f) if f.kind != "invalid" else "invalid program", str(f)[:300], str(name)))
    return seed, len(k.sections), launches, found, stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="kernels to generate (each holds 1 to 4 programs)")
    ap.add_argument("--seed", type=int, default=0, help="the first seed")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--off", default="", help="comma-separated Features to turn off")
    ap.add_argument("--known", action="store_true", help="turn off every construct with a known open bug")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--sanitize-every", type=int, default=8)
    ap.add_argument("--drop-skip-inactive", action="store_true", help="also launch without skip_inactive")
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "metile-fuzz-repros"))
    a = ap.parse_args()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    off = [x for x in a.off.split(",") if x]
    features(off, a.known)
    jobs = [(s, off, a.known, not a.no_shrink, a.sanitize_every, a.drop_skip_inactive, a.out)
            for s in range(a.seed, a.seed + a.n)]
    t0 = time.perf_counter()
    programs = launches = 0
    stats: dict[str, int] = {}
    by_sig: dict[str, list] = {}
    if a.jobs > 1:
        pool = multiprocessing.get_context("spawn").Pool(a.jobs)
        results = pool.imap_unordered(work, jobs)
    else:
        results = map(work, jobs)
    for done, (seed, nprog, nl, found, st) in enumerate(results, 1):
        if done % 25 == 0:
            print(f"... {done} kernels, {programs} programs, {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
        for key, v in st.items():
            stats[key] = stats.get(key, 0) + v
        programs += nprog
        launches += nl
        for sig, text, path in found:
            by_sig.setdefault(sig, []).append((seed, text, path))
            print(f"seed {seed}: {text}\n    repro: {path}", flush=True)
    dt = time.perf_counter() - t0
    print(f"\n{a.n} kernels, {programs} programs, {launches} launches in {dt:.0f} s; "
          f"{sum(len(v) for v in by_sig.values())} failing kernels, {len(by_sig)} kinds.\n"
          f"Output elements checked bit for bit: {stats.get('exact', 0)}, within a rounding bound: "
          f"{stats.get('tolerance', 0)}, unchecked (nothing promised): {stats.get('unchecked', 0)}; "
          f"kernels refused with LoweringUnavailableError: {stats.get('refused', 0)}")
    for sig, items in sorted(by_sig.items()):
        seeds = ", ".join(str(s) for s, _, _ in items[:8])
        print(f"  {len(items):4d}  {sig}\n        seeds {seeds}; e.g. {items[0][2]}")
    return 1 if by_sig else 0


if __name__ == "__main__":
    sys.exit(main())
