/* mt_diverge.h - where a GPU thread is in the control flow around simd collectives.
 *
 * Part of metal_compat.h; include that instead.
 *
 * The MSL front end (metile/metal/cpu/arms.py) puts these guards into the code it translates: a `stmt` around an
 * `if` or `switch` statement whose arms contain a collective, an `arm` at the start of each such arm, a `loop`
 * around a loop with one whose lanes may part ways inside (with `next()` at the start of each iteration), and an
 * `fn` at the start of the body of a function or lambda that contains one. Each keeps the thread's frames
 * (mt_runtime.h) in step with the structured control flow it runs through, so that the runtime groups at one
 * collective only the lanes that reach it in the same arm, loop iteration and call, and runs the collectives of
 * diverged lanes in program order. Positions are the front end's token numbers and lines those of the .metal text,
 * passed as constants. Leaving a guard's scope in any way (`break`, `continue`, `return`) pops its frame. The
 * frames' key (mt_runtime.h) is refreshed on every change, so the runtime reads one word per lane.
 */
#ifndef METILE_MT_DIVERGE_H
#define METILE_MT_DIVERGE_H

/* The same pointer for the whole life of a GPU thread (see mt_current_pos in mt_base.h). */
extern "C" mt_frames* mt_current_frames(void) __attribute__((const));

namespace metal {
namespace _mt {

/* A frame's instance: its hash and its iteration. */
inline uint64_t instance(const mt_frame& f) { return f.hash ^ (uint64_t(f.count) * 0x94D049BB133111EBull); }
inline void refresh_key(mt_frames* s) {
    const mt_frame& top = s->f[s->depth];
    s->key = instance(top) + ((uint64_t(top.cursor) << 32 | s->depth) * 0xD6E8FEB86659FD93ull);
}
inline void set_cursor(mt_frames* s, uint32_t level, uint32_t pos) {
    mt_frame& f = s->f[level];
    f.cursor = pos;
    f.calls = 0;
    refresh_key(s);
}
inline void pop_frame(mt_frames* s) {
    --s->depth;
    refresh_key(s);
}
/* Of the frames above (their instances) and this one's (order, sub, id); its count is mixed in by instance(). */
inline uint64_t frame_hash(uint64_t parent, const mt_frame& f) {
    uint64_t h = parent ^ ((uint64_t(f.order) << 32 | f.sub) * 0x9E3779B97F4A7C15ull);
    h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull;
    h ^= uint64_t(f.id) * 0x94D049BB133111EBull;
    h = (h ^ (h >> 31)) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}
inline mt_frame& push_frame(mt_frames* s, uint32_t order, uint32_t sub, uint32_t id, uint32_t line) {
    if (__builtin_expect(s->depth + 1u >= MT_MAX_FRAMES, 0))
        mt_kernel_fault(MT_FAULT_KERNEL, "control flow around simd collectives nested too deeply (arms, loops and "
                        "calls of functions with collectives, 31 levels at most)", line);
    mt_frame& f = s->f[++s->depth];
    f.order = order;
    f.sub = sub;
    f.id = id;
    f.count = 0;
    f.cursor = 0;
    f.calls = 0;
    f.hash = frame_hash(instance(s->f[s->depth - 1]), f);
    refresh_key(s);
    return f;
}
constexpr uint32_t kNoCall = 0xffffffffu; /* `sub` of arms and loops: after the calls made from the same line */

/* An `if`/`switch` statement with guarded arms: the statement running at this level, from `start` to `end`
 * (positions in the source: the front end numbers its tokens from 1, so that no two points tie). */
struct stmt {
    mt_frames* s;
    uint32_t end;
    stmt(uint32_t start, uint32_t end_pos) : s(mt_current_frames()), end(end_pos) { set_cursor(s, s->depth, start); }
    ~stmt() { set_cursor(s, s->depth, end); }
    stmt(const stmt&) = delete;
    stmt& operator=(const stmt&) = delete;
};

/* One arm (`if`, `else`, `case`/`default` group) starting at source position `start`, on `line`. */
struct arm {
    mt_frames* s;
    arm(uint32_t id, uint32_t start, uint32_t line) : s(mt_current_frames()) {
        push_frame(s, start, kNoCall, id, line);
    }
    ~arm() { pop_frame(s); }
    arm(const arm&) = delete;
    arm& operator=(const arm&) = delete;
};

/* A loop from source position `start` to `end`, on `line`; next() counts an iteration, at() marks the position of
 * a do-while condition or a for increment (both run after the body). */
struct loop {
    mt_frames* s;
    uint32_t d, end;
    loop(uint32_t id, uint32_t start, uint32_t end_pos, uint32_t line) : s(mt_current_frames()), end(end_pos) {
        set_cursor(s, s->depth, start);
        push_frame(s, start, kNoCall, id, line);
        d = s->depth;
    }
    ~loop() {
        --s->depth;
        set_cursor(s, s->depth, end);
    }
    bool next() {
        ++s->f[d].count;
        set_cursor(s, d, 0);
        return true;
    }
    bool at(uint32_t pos) {
        set_cursor(s, d, pos);
        return true;
    }
    loop(const loop&) = delete;
    loop& operator=(const loop&) = delete;
};

/* The body of a function with collectives: ordered by its caller's statement and call number. */
struct fn {
    mt_frames* s;
    fn(uint32_t id, uint32_t line) : s(mt_current_frames()) {
        mt_frame& caller = s->f[s->depth];
        const uint32_t cursor = caller.cursor, call = ++caller.calls;
        push_frame(s, cursor, call, id, line);
    }
    ~fn() { pop_frame(s); }
    fn(const fn&) = delete;
    fn& operator=(const fn&) = delete;
};

}  // namespace _mt
}  // namespace metal

#endif
