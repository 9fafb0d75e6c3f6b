# The two commands of the README, plus the longer targets.
#
#   make demo   install what is missing, build, run the demo
#   make test   install what is missing, build (RelWithDebInfo, asserts on),
#               run every CTest test, the hash test vectors in a native
#               build, then the ThreadSanitizer tree's `tsan` tests
#
# Other targets: build, release, e2e (long testbed run: churn, node kill),
# eval (QUICK=1, DETACH=1), fuzz (FUZZ_SECONDS=60 per fuzzer), clean.
SHELL := /bin/bash
BUILD ?= build
BUILD_TSAN ?= build-tsan
BUILD_RELEASE ?= build-release
BUILD_NATIVE ?= build-native
BUILD_FUZZ ?= build-fuzz
JOBS ?= $(shell nproc)


.PHONY: deps build release test test-native test-tsan demo e2e eval fuzz clean

deps:
	@tools/install-deps

build: deps
	@GEN="$$(command -v ninja >/dev/null && echo -G Ninja)"; \
	cmake -S . -B $(BUILD) $$GEN -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

release: deps
	@GEN="$$(command -v ninja >/dev/null && echo -G Ninja)"; \
	cmake -S . -B $(BUILD_RELEASE) $$GEN -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD_RELEASE) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)
	$(MAKE) --no-print-directory test-native
	$(MAKE) --no-print-directory test-tsan

# The hash must give the same output in portable and native (-march=native)
# builds: the committed test vectors run in a native build of core too.
test-native: deps
	@GEN="$$(command -v ninja >/dev/null && echo -G Ninja)"; \
	cmake -S . -B $(BUILD_NATIVE) $$GEN -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSB_NATIVE=ON >/dev/null
	cmake --build $(BUILD_NATIVE) -j$(JOBS) --target sb_core_tests
	$(BUILD_NATIVE)/bin/sb_core_tests "[hash],[key],[bits]"

# ThreadSanitizer tree of the plain-C++ folders (core, gpt, fib): runs the
# concurrency tests (CTest label tsan).
test-tsan: deps
	@GEN="$$(command -v ninja >/dev/null && echo -G Ninja)"; \
	cmake -S . -B $(BUILD_TSAN) $$GEN -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSB_SANITIZE=thread >/dev/null
	cmake --build $(BUILD_TSAN) -j$(JOBS)
	cd $(BUILD_TSAN) && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -L tsan -j$(JOBS)

demo: release
	tools/demo $(BUILD_RELEASE)

# The long end-to-end run on the testbed: traffic during session churn and a
# node kill/restart (tools/e2e).
e2e: release
	tools/e2e $(BUILD_RELEASE)

# The evaluation report (docs/EVALUATION.md): QUICK=1 for the reduced grid,
# DETACH=1 to run in the background (log in eval/results/eval.out);
# rerunning resumes where a run stopped.
EVAL_ARGS := $(if $(QUICK),--quick,)
eval: release
ifdef DETACH
	@mkdir -p eval/results
	@setsid nohup sh -c '/usr/bin/python3 tools/eval/eval.py run $(EVAL_ARGS) --bench $(BUILD_RELEASE)/bin/sb-bench; \
	  /usr/bin/python3 tools/eval/eval.py report' >eval/results/eval.out 2>&1 & \
	  echo "eval: running in the background (pid $$!), log eval/results/eval.out"
else
	/usr/bin/python3 tools/eval/eval.py run $(EVAL_ARGS) --bench $(BUILD_RELEASE)/bin/sb-bench
	/usr/bin/python3 tools/eval/eval.py report
endif

# libFuzzer (clang from Debian), FUZZ_SECONDS each: the packet parsers
# (sb-packet-fuzz) and what peers and clients send a node's control agent
# (sb-control-fuzz). New inputs go to $(BUILD_FUZZ)/corpus and
# $(BUILD_FUZZ)/control-corpus; copy the interesting ones to
# node/fuzz_corpus/ and control/fuzz_corpus/, which ctest replays under ASan.
FUZZ_SECONDS ?= 60
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(BUILD_FUZZ) $$(command -v ninja >/dev/null && echo -G Ninja) \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSB_FUZZ=ON -DSB_BUILD_TESTS=OFF >/dev/null
	cmake --build $(BUILD_FUZZ) --target sb-packet-fuzz sb-control-fuzz
	mkdir -p $(BUILD_FUZZ)/corpus $(BUILD_FUZZ)/control-corpus
	$(BUILD_FUZZ)/bin/sb-packet-fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=2048 \
	  -artifact_prefix=$(BUILD_FUZZ)/ $(BUILD_FUZZ)/corpus node/fuzz_corpus
	$(BUILD_FUZZ)/bin/sb-control-fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=16384 \
	  -artifact_prefix=$(BUILD_FUZZ)/control- $(BUILD_FUZZ)/control-corpus control/fuzz_corpus

clean:
	rm -rf $(BUILD) $(BUILD_TSAN) $(BUILD_RELEASE) $(BUILD_NATIVE) $(BUILD_FUZZ)
