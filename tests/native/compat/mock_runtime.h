/* mock_runtime.h - a stand-in for the CPU runtime's kernel services, for unit tests of the compatibility header.
 *
 * One simdgroup (one threadgroup) of up to 32 lanes runs as std::threads. mt_simd_exchange, the barriers,
 * mt_current_pos and mt_yield behave as mt_runtime.h specifies; a lane that returns stops taking part, as an exited
 * GPU thread does. A site/line mismatch between lanes at an exchange, or a kernel fault, fails the test run.
 */
#ifndef METILE_COMPAT_MOCK_RUNTIME_H
#define METILE_COMPAT_MOCK_RUNTIME_H

#include <cstdint>
#include <functional>

/* Run fn(lane) on `lanes` lanes (1..32) of one simdgroup, each on its own OS thread, and wait for all. */
void mock_run_simdgroup(uint32_t lanes, const std::function<void(uint32_t lane)>& fn);

/* Exchanges performed since the start of the process (all lanes count as one exchange). */
uint64_t mock_exchange_count();

#endif
