/* stand-in for Darwin's <mach-o/loader.h>: the 64-bit Mach-O header */
#pragma once
#include <stdint.h>
struct mach_header_64 {
    uint32_t magic;
    int32_t cputype, cpusubtype;
    uint32_t filetype, ncmds, sizeofcmds, flags, reserved;
};
