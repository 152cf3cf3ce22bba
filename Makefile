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

# The trained tiny model (models/glm53-tiny, docs/tiny-model.md) answers three held-out items of its task families,
# streamed, with the gold answers, the speed and the MTP acceptance (scripts/demo.lua; DEMO_ARGS="--items ..." picks
# other items). bin/glm53 runs it with the LuaJIT it uses itself ($GLM53_LUAJIT, else luajit).
DEMO_ARGS ?=
demo: build
	@bin/glm53 lua scripts/demo.lua $(DEMO_ARGS)

test: build
	@scripts/run_tests.sh $(BUILD)

# The libFuzzer targets (ASan + UBSan, tests/fuzz/run.sh, docs/testing.md); FUZZ_SECONDS=600 for the ten-minute run.
fuzz: deps
	@tests/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) build-fuzz build-asan
