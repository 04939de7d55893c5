/* compat_main.cpp - runs the registered tests of the compatibility header; prints "N passed, N failed". */
#include "compat_harness.h"

std::vector<CompatTest>& compat_tests() {
    static std::vector<CompatTest> tests;
    return tests;
}
int compat_check_failures = 0;

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "--list") == 0) {
        for (const CompatTest& t : compat_tests()) std::printf("%s\n", t.name);
        return 0;
    }
    int passed = 0, failed = 0;
    for (const CompatTest& t : compat_tests()) {
        if (argc > 1 && std::strcmp(t.name, argv[1]) != 0) continue;
        const int before = compat_check_failures;
        t.fn();
        const bool ok = compat_check_failures == before;
        std::printf("%s %s\n", ok ? "PASS" : "FAIL", t.name);
        (ok ? passed : failed) += 1;
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
