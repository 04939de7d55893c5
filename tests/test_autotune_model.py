"""`metile.autotune(..., by="model", gpu=...)`: configurations ranked by the Apple GPU model's estimate instead of
timed. The choice is the one the model ranks first (checked against each configuration's own profile), nothing is
timed, the launch after tuning computes the right result, and bad `by`/`gpu` arguments are refused."""

from __future__ import annotations

import numpy as np
import pytest

import metile
import metile.autotune_run
from metile.autotune import AutotuneError
from metile.profile.model import estimate

pytestmark = pytest.mark.usefixtures("on_cpu", "tuning_dir")

CONFIGS = [metile.Config(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_simdgroups=1),
           metile.Config(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, num_simdgroups=4),
           metile.Config(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_simdgroups=4)]


@pytest.fixture
def tuning_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("METILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("METILE_AUTOTUNE", raising=False)
    return tmp_path / "cache"


def body(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    pid_m, pid_n = metile.program_id(0), metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


def grid(meta):
    return (metile.cdiv(meta["M"], meta["BLOCK_M"]), metile.cdiv(meta["N"], meta["BLOCK_N"]))


@pytest.mark.parametrize("chip", ["M3 Max"])
def test_the_model_picks_the_configuration_it_ranks_first_without_timing(chip, monkeypatch):
    def no_timing(*a, **k):
        raise AssertionError("by='model' must not time anything")

    monkeypatch.setattr(metile.autotune_run, "bench_calls", no_timing)
    tuned = metile.autotune(configs=CONFIGS, key=["M", "N", "K"], by="model", gpu=chip)(metile.kernel(body))
    rng = np.random.default_rng(0)
    M, N, K = 128, 128, 64
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    tuned[grid](a, b, c, M, N, K)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    chosen = next(iter(tuned.cache.values()))
    # each configuration's estimate, from its own profiled launch
    kernel = metile.kernel(body)
    est = {}
    for config in CONFIGS:
        p = kernel[grid](a, b, np.zeros_like(c), M, N, K, **config.all_kwargs(), profile=8, profile_only=True)
        est[config] = estimate(p, chip).estimate_s
    assert chosen == min(CONFIGS, key=lambda cfg: est[cfg])
    assert len(set(est.values())) == len(CONFIGS)      # the ranking is not a tie broken by order


@pytest.mark.parametrize(("settings", "message"), [
    (dict(by="speed"), "by='speed' must be 'time'"),
    (dict(by="model"), "by='model' needs gpu="),
    (dict(by="model", gpu="M9"), "unknown Apple GPU 'M9'"),
    (dict(gpu="M1"), "gpu= names the Apple GPU of by='model'"),
])
def test_bad_ranking_arguments_are_refused(settings, message):
    with pytest.raises(AutotuneError, match=message):
        metile.autotune(configs=CONFIGS, key=["M"], **settings)(metile.kernel(body))
