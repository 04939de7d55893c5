/* stand-in for Darwin's <mach-o/getsect.h>: a segment of a loaded image, its address slid */
#pragma once
#include <stdint.h>
#include <mach-o/loader.h>
#ifdef __cplusplus
extern "C" {
#endif
uint8_t* getsegmentdata(const struct mach_header_64* mhp, const char* segname, unsigned long* size);
#ifdef __cplusplus
}
#endif
