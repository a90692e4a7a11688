# Thin wrapper over tools/install-deps.sh and CMake. The two set-up commands of README.md:
#   make demo   install dependencies, build, run the main job on the bundled demo model
#               (quietly: the build's output goes to $(BUILD)/build.log)
#   make test   install dependencies, build, run the whole test suite (ctest)
#   make deb    install dependencies, build, write $(BUILD)/package/deltafin_<version>_<arch>.deb
#               (tools/packaging/package.cmake)
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all deps build demo test deb clean

all: build

deps:
	@tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo:
	@tools/install-deps.sh --quiet
	@tools/build-quiet.sh $(BUILD) $(JOBS)
	@tools/demo.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

deb: build
	@cd $(BUILD) && cpack -G DEB

clean:
	rm -rf $(BUILD)
