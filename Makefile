# The README's promise: `make run` starts the main job on the embedded default, `make check`
# passes the tests, on a fresh Debian 12 machine as root. CMake does the building.
BUILD ?= build
SAN_BUILD ?= build-san
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

DEPS = cmake make gcc clang-14 libclang-rt-14-dev pkg-config clang-format \
       libjansson-dev libyaml-dev libseccomp-dev libmicrohttpd-dev libcurl4-openssl-dev \
       libcmocka-dev libunistring-dev python3 python3-pytest valgrind

.PHONY: all build deps run check test unit integration san format format-check clean bench fuzz

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# Idempotent: installs only what is missing (needs root).
deps:
	@missing=$$(for p in $(DEPS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

san:
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSBX_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	cmake --build $(SAN_BUILD) -j $(JOBS)

run: deps build
	./scripts/tour.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

unit: san
	cd $(SAN_BUILD) && ctest --output-on-failure -L unit

integration: build san
	cd $(SAN_BUILD) && ctest --output-on-failure -L integration

# Everything: format, the release build, the sanitizer build, unit and integration tests.
check: deps format-check build san
	cd $(SAN_BUILD) && ctest --output-on-failure

test: check

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
