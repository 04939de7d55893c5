/* mt_diverge.h - where a GPU thread is in the control flow around simd collectives.
 *
 * Part of metal_compat.h; include that instead.
 *
 * The MSL front end (metile/metal/cpu/arms.py) puts these guards into the code it translates: a `stmt` around an
 * `if` or `switch` statement whose arms contain a collective, an `arm` at the start of each such arm, a `loop`
 * around a loop whose text contains one (with `next()` at the start of each iteration), and an `fn` at the start of
 * the body of a function that contains one. Each keeps the thread's frames (mt_runtime.h) in step with the
 * structured control flow it runs through, so that the runtime groups at one collective only the lanes that reach
 * it in the same arm, loop iteration and call, and runs the collectives of diverged lanes in program order. Line
 * numbers are those of the translated text (the front end passes them as constants). Leaving a guard's scope in
 * any way (`break`, `continue`, `return`) pops its frame.
 */
#ifndef METILE_MT_DIVERGE_H
#define METILE_MT_DIVERGE_H

/* The same pointer for the whole life of a GPU thread (see mt_current_pos in mt_base.h). */
extern "C" mt_frames* mt_current_frames(void) __attribute__((const));

namespace metal {
namespace _mt {

inline void set_cursor(mt_frame& f, uint32_t line) {
    f.cursor = line;
    f.calls = 0;
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
    return f;
}
constexpr uint32_t kNoCall = 0xffffffffu; /* `sub` of arms and loops: after the calls made from the same line */

/* An `if`/`switch` statement with guarded arms: the statement running at this level, from `start` to `end`
 * (positions in the source: the front end numbers its tokens from 1, so that no two points tie). */
struct stmt {
    mt_frames* s;
    uint32_t end;
    stmt(uint32_t start, uint32_t end_line) : s(mt_current_frames()), end(end_line) {
        set_cursor(s->f[s->depth], start);
    }
    ~stmt() { set_cursor(s->f[s->depth], end); }
    stmt(const stmt&) = delete;
    stmt& operator=(const stmt&) = delete;
};

/* One arm (`if`, `else`, `case`/`default` group) starting at source position `start`, on `line`. */
struct arm {
    mt_frames* s;
    arm(uint32_t id, uint32_t start, uint32_t line) : s(mt_current_frames()) {
        push_frame(s, start, kNoCall, id, line);
    }
    ~arm() { --s->depth; }
    arm(const arm&) = delete;
    arm& operator=(const arm&) = delete;
};

/* A loop from source position `start` to `end`, on `line`; next() counts an iteration, at() marks the position of
 * a do-while condition or a for increment (both run after the body). */
struct loop {
    mt_frames* s;
    uint32_t d, end;
    loop(uint32_t id, uint32_t start, uint32_t end_pos, uint32_t line) : s(mt_current_frames()), end(end_pos) {
        set_cursor(s->f[s->depth], start);
        push_frame(s, start, kNoCall, id, line);
        d = s->depth;
    }
    ~loop() {
        --s->depth;
        set_cursor(s->f[s->depth], end);
    }
    bool next() {
        mt_frame& f = s->f[d];
        ++f.count;
        set_cursor(f, 0);
        return true;
    }
    bool at(uint32_t pos) {
        set_cursor(s->f[d], pos);
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
    ~fn() { --s->depth; }
    fn(const fn&) = delete;
    fn& operator=(const fn&) = delete;
};

}  // namespace _mt
}  // namespace metal

#endif
