// The Catch2 main of every test binary. Tests that draw random numbers use
// sb::test_seed(): it prints the seed, and SB_TEST_SEED overrides it.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
