/* stand-in for Darwin's <sys/mman.h>, as older SDKs have it: MAP_ANON without MAP_ANONYMOUS */
#pragma once
#define PROT_NONE 0x00
#define PROT_READ 0x01
#define PROT_WRITE 0x02
#define MAP_PRIVATE 0x0002
#define MAP_NORESERVE 0x0040
#define MAP_ANON 0x1000
