# The README's promise: `make run` starts the main job on the embedded default, `make check`
# passes the tests, on a fresh Debian 12 machine as root. CMake does the building.
BUILD ?= build
SAN_BUILD ?= build-san
TSAN_BUILD ?= build-tsan
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

# for the qemu guest job (guest-check), on top of DEPS
GUEST_DEPS = qemu-system-x86 busybox-static kmod file e2fsprogs

DEPS = cmake make gcc clang-14 libclang-rt-14-dev pkg-config clang-format \
       libjansson-dev libyaml-dev libseccomp-dev libmicrohttpd-dev libcurl4-openssl-dev \
       libcmocka-dev libunistring-dev python3 python3-pytest valgrind libtsan2 e2fsprogs \
       libarchive-dev libssl-dev busybox-static zstd debootstrap docker-registry skopeo openssl tmux \
       python3-httpx python3-pydantic uidmap \
       passt nftables libnftables-dev iperf3 curl jq

.PHONY: all build deps run tour check test unit integration san tsan tsan-build install format \
        format-check clean bench fuzz load memcheck guest-deps guest-check guest-check-full

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# Idempotent: installs only what is missing (needs root).
deps guest-deps:
	@missing=$$(for p in $(if $(filter guest-deps,$@),$(GUEST_DEPS),$(DEPS)); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

san:
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSBX_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	cmake --build $(SAN_BUILD) -j $(JOBS)

# ThreadSanitizer (gcc): sbxd, sbx and sbx-init built with -fsanitize=thread in $(TSAN_BUILD),
# then the sbxd, exec and SDK suites over it; any TSan report fails (tests/tsan/run.sh).
tsan-build:
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSBX_TSAN=ON -DSBX_TESTS=OFF \
	  $(CMAKE_FLAGS) >/dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS)

tsan: tsan-build
	SBX_BUILD=$(TSAN_BUILD) tests/tsan/run.sh

# sbx and sbxd in PREFIX/bin, sbx-init in PREFIX/libexec/sbx, libsbx.so/.a, include/sbx and
# sbx.pc (GNUInstallDirs; DESTDIR is honoured).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# The main job: sbxd (OpenSandbox's HTTP APIs over sbx) in the foreground on the embedded default,
# 127.0.0.1:8080 with the state in sbx's default folder (/var/lib/sbx as root, $SBX_HOME if set;
# SBXD_ARGS adds options, e.g. --api-key KEY or --home DIR). It says which folder it uses.
run: deps build
	@case " $(SBXD_ARGS) " in *" --home"*) echo "make run: state directory as given in SBXD_ARGS ($(SBXD_ARGS))";; \
	  *) echo "make run: state directory $${SBX_HOME:-$$(if [ $$(id -u) = 0 ]; then echo /var/lib/sbx; else echo $${XDG_STATE_HOME:-$$HOME/.local/state}/sbx; fi)} (the CLI's default too; --home DIR in SBXD_ARGS or SBX_HOME to change)";; esac
	exec ./$(BUILD)/sbxd $(SBXD_ARGS)

# A short tour through the sbx CLI.
tour: deps build
	./scripts/tour.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

unit: san
	cd $(SAN_BUILD) && ctest --output-on-failure -L unit

integration: build san
	cd $(SAN_BUILD) && ctest --output-on-failure -L integration

# Everything: format, the release build, the layering check (scripts/deps.py: no dependency
# cycle between the files of src/), the Release build with the bench programs (bench/build.sh:
# -O2 shows warnings the other builds do not), the sanitizer build, unit, integration, SDK and security
# tests (ctest, on the sanitizer build), valgrind memcheck of the release build, a short pass of
# every fuzz target, then the ThreadSanitizer build and its suites. Each phase's time is printed
# as it ends and all of them in a table at the end (or at the first failure).
CHECK_TIMES = $(BUILD)/check-times.txt
PHASE = scripts/phase.sh $(CHECK_TIMES)
check:
	@rm -f $(CHECK_TIMES)
	@$(PHASE) deps $(MAKE) --no-print-directory deps
	@$(PHASE) format $(MAKE) --no-print-directory format-check
	@$(PHASE) build $(MAKE) --no-print-directory build
	@$(PHASE) layers python3 scripts/deps.py $(BUILD)
	@$(PHASE) build-release env JOBS=$(JOBS) bench/build.sh
	@$(PHASE) build-san $(MAKE) --no-print-directory san
	@$(PHASE) ctest sh -c 'cd $(SAN_BUILD) && ctest --output-on-failure'
	@$(PHASE) memcheck env SBX_BUILD=$(BUILD) tests/memcheck/run.sh
	@$(PHASE) fuzz fuzz/run.sh 5
	@$(PHASE) build-tsan $(MAKE) --no-print-directory tsan-build
	@$(PHASE) tsan env SBX_BUILD=$(TSAN_BUILD) tests/tsan/run.sh
	@$(PHASE) --summary

# valgrind memcheck: unit tests, the CLI's verbs and an sbxd session, on the release build.
memcheck: build
	SBX_BUILD=$(BUILD) tests/memcheck/run.sh

# Each fuzz target for FUZZ_SECONDS (clang, libFuzzer; see fuzz/run.sh).
FUZZ_SECONDS ?= 60
fuzz:
	fuzz/run.sh $(FUZZ_SECONDS)

# The bounded load test (loopback only; figures in docs/load.md).
load: build
	SBX_BUILD=$(CURDIR)/$(BUILD) tests/load/run.sh

# Benchmarks against bubblewrap, unshare, crun... (not part of check; BENCH_QUICK=1 for ~1 min).
bench:
	./bench/run.sh

# cgroup v2 for real (docs/hosts.md#testing-on-other-hosts): Debian's stock kernel
# (linux-image-amd64, fetched into GUEST_DIR) under qemu with TCG, this host's root read-only
# under a tmpfs overlay, systemd as PID 1; tests/guest/checks.sh and the integration subset
# (contract, limits, lifecycle, hosts) on the release build, as root (and doctor as an ordinary
# user). About 10 minutes on two cores (the tests ~5, the checks ~2.5, systemd's boot ~1.5);
# not part of `check`. guest-check-full: the whole integration suite, bash as PID 1, /tmp on a
# scratch ext4 disk of GUEST_DISK GiB (sparse; GUEST_DISK= for a tmpfs /tmp, as guest-check has);
# about 40 minutes on two shared cores. GUEST_TESTS="tests/integration/test_x.py::test_y ...": only those tests
# (no checks.sh), in either target.
GUEST_DIR ?= build-guest
GUEST_TESTS ?=
guest-check: GUEST_DISK ?=
guest-check-full: GUEST_DISK ?= 32
guest-check: guest-deps build
	tests/guest/prepare.sh $(GUEST_DIR)
	tests/guest/boot.sh -t 1200 -i init-systemd.sh $(if $(GUEST_DISK),-d $(GUEST_DISK)) \
	  $(GUEST_DIR)/vmlinuz $(GUEST_DIR)/initrd.gz $(GUEST_DIR)/out \
	  -- $(CURDIR)/tests/guest/suite.sh $(CURDIR) $(CURDIR)/$(BUILD) quick $(GUEST_TESTS)

guest-check-full: guest-deps build
	tests/guest/prepare.sh $(GUEST_DIR)
	tests/guest/boot.sh -t 4800 $(if $(GUEST_DISK),-d $(GUEST_DISK)) \
	  $(GUEST_DIR)/vmlinuz $(GUEST_DIR)/initrd.gz $(GUEST_DIR)/out-full \
	  -- $(CURDIR)/tests/guest/suite.sh $(CURDIR) $(CURDIR)/$(BUILD) full $(GUEST_TESTS)

test: check

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(TSAN_BUILD)
