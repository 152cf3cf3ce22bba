# Thin entry points; the build is CMake (CMakeLists.txt), the tests are ctest + busted (scripts/run_tests.sh).
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all deps build demo test clean fuzz

all: build

deps:
	@scripts/bootstrap.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The bundled model (README.md) shows that every piece runs end to end; while its weights are random, so is its text.
DEMO_PROMPT ?= Write a haiku about linear attention.
demo: build
	@echo "glm53 demo: bin/glm53 generate with the bundled model (README.md says what its text means)"
	@bin/glm53 generate --max-tokens 48 "$(DEMO_PROMPT)"

test: build
	@scripts/run_tests.sh $(BUILD)

# The libFuzzer targets (ASan + UBSan, tests/fuzz/run.sh, docs/testing.md); FUZZ_SECONDS=600 for the ten-minute run.
fuzz: deps
	@tests/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) build-fuzz build-asan
