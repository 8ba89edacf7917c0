# blurd: one flat Makefile.
#   make                           build build/blurd and the tests (CUDA too when nvcc is found)
#   make test                      unit tests, then integration tests against the real binary, then
#                                  one summary line (tests/run.sh): N passed, N failed
#   make SAN=address,undefined test  the same under ASan/UBSan, built in build/san
#   make fuzz / make load          the fuzz targets (FUZZ_SECONDS each) / the load test (wrk)
#   make fmt / make fmt-check      clang-format the sources / check that they are formatted
#   make test-web                  the demo page in headless Chromium (scripts/install-deps.sh --web)
#   make check-deploy              lint the Dockerfile, check it and deploy/ against build/blurd
#   make image-test                build the CPU image with podman, run it, compare with build/blurd
#   make check-metrics             promtool against a live /metrics (install-deps.sh --ci)
#   make check-openapi             @redocly/cli lint against a live /openapi.json
#   make check-readme              run the README's examples against build/blurd on a free port
CC ?= cc
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# Real code for Turing to Hopper, plus PTX for later GPUs.
CUDA_ARCH ?= -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
             -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 \
             -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90

ifeq ($(SAN),)
BUILD ?= build
else
BUILD ?= build/san
SANFLAGS := -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

PKGS := jansson libpng libturbojpeg libjpeg libwebp libwebpmux libdeflate spng lcms2 libheif \
        libde265 dav1d libavif libjxl libjxl_threads libtiff-4
OPT ?= -O3 -g
CFLAGS += -std=c11 $(OPT) -Wall -Wextra -Werror -Wstrict-prototypes -Wshadow -D_GNU_SOURCE \
          -pthread -MMD -MP $(SANFLAGS) $(shell pkg-config --cflags $(PKGS))
LDFLAGS += -pthread $(SANFLAGS)
LDLIBS := $(shell pkg-config --libs $(PKGS)) -lgif -lz -lm
TEST_LDLIBS := $(shell pkg-config --libs libcurl)

LIB_SRC := $(wildcard base/*.c cpu/*.c codecs/*.c formats/*.c engine/*.c http/*.c api/*.c api/ops/*.c)
SERVER_SRC := $(wildcard server/*.c)
CU_SRC := $(filter-out gpu/nvjpeg_check.cu,$(wildcard gpu/*.cu))
TOOL_SRC := $(filter-out tools/bench.c,$(wildcard tools/*.c))
UNIT_SRC := $(wildcard tests/unit_*.c)
INTEG_SRC := $(wildcard tests/integ_*.c)

ifneq ($(NVCC),)
CFLAGS += -DBLURD_CUDA=1
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror -MMD -MP
# nvcc output does not depend on SAN: the sanitizer build reuses build/'s CUDA objects.
CU_BUILD := $(if $(SAN),build,$(BUILD))
CU_OBJ := $(CU_SRC:%.cu=$(CU_BUILD)/%.o)
LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
BACKENDS := cpu+cuda
else
CU_OBJ :=
BACKENDS := cpu only (nvcc not found: the CUDA backend is not built)
endif

# The demo page's files (web/), embedded into the binary as a generated C file.
WEB_SRC := $(sort $(wildcard web/*))
WEB_OBJ := $(BUILD)/gen/web_assets.o

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(WEB_OBJ) $(CU_OBJ)
# gpu/nvjpeg_api.h against the toolkit's nvjpeg.h, where there is one (a compile-time check only).
NVJPEG_H ?= $(wildcard $(CUDA_HOME)/include/nvjpeg.h)
NVJPEG_CHECK := $(if $(and $(NVCC),$(NVJPEG_H)),$(CU_BUILD)/gpu/nvjpeg_check.o)
$(CU_BUILD)/gpu/nvjpeg_check.o: NVCCFLAGS += -I$(dir $(NVJPEG_H))
ifneq ($(NVCC),)
# GPU-only programs: the GPU test suite and the benchmark (built everywhere, run on a GPU), and
# where Debian's ffnvcodec headers are (libffmpeg-nvenc-dev), the HEVC check on the video decoders.
GPU_BIN := $(BUILD)/tests/gpu_check $(BUILD)/tests/gpu_codecs $(BUILD)/bench
FFNVCODEC := $(wildcard /usr/include/ffnvcodec/dynlink_loader.h)
GPU_BIN += $(if $(FFNVCODEC),$(BUILD)/tests/gpu_nvdec)
# HEIC on the video decoders (gpu/nvdec.cu) where the headers are; without them, the CPU's
$(CU_BUILD)/gpu/nvdec.o: NVCCFLAGS += $(if $(FFNVCODEC),-DBLURD_NVDEC=1)
$(BUILD)/tests/gpu_check.o $(BUILD)/tools/bench.o: CFLAGS += -I$(CUDA_HOME)/include
endif
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/%.o)
UNIT_BIN := $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%)
INTEG_BIN := $(INTEG_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_BIN := $(TOOL_SRC:tools/%.c=$(BUILD)/%)

.PHONY: all test unit integ fmt fmt-check clean report test-gpu stress-gpu bench fuzz load soak test-web check-deploy report-variance
.SECONDARY:
all: $(BUILD)/blurd $(UNIT_BIN) $(INTEG_BIN) $(TOOL_BIN) $(GPU_BIN) $(NVJPEG_CHECK)
	@echo "blurd built in $(BUILD)/: backends $(BACKENDS)"

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/gen/web_assets.c: $(WEB_SRC) scripts/embed-web.sh
	@mkdir -p $(@D)
	sh scripts/embed-web.sh $@ $(WEB_SRC)

$(WEB_OBJ): $(BUILD)/gen/web_assets.c
	$(CC) $(CFLAGS) -Iapi -c $< -o $@

$(CU_BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/blurd: $(SERVER_OBJ) $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/%: $(BUILD)/tools/%.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/gpu_%: $(BUILD)/tests/gpu_%.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/unit_%: $(BUILD)/tests/unit_%.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
# the accepting gate's test takes it from server/
$(BUILD)/tests/unit_gate: $(BUILD)/server/gate.o

$(BUILD)/tests/integ_%: $(BUILD)/tests/integ_%.o $(BUILD)/tests/harness.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) $(TEST_LDLIBS) -o $@

# Debian's python3, where the tests' packages (python3-h11) are installed
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
# tests/run.sh runs the programs: a line for each (their output in $(BUILD)/test-logs/, printed
# when one fails; TEST_VERBOSE=1 prints it all), then one summary line, "N passed, N failed"
RUN_TESTS = $(if $(SAN),BLURD_SAN=1) BLURD_BIN=$(BUILD)/blurd PYTHON=$(PYTHON) \
  TEST_LOGS=$(BUILD)/test-logs sh tests/run.sh
PY_TESTS := tests/http_strict.py

test: all
	@$(RUN_TESTS) $(UNIT_BIN) $(INTEG_BIN) $(PY_TESTS)

unit: all
	@$(RUN_TESTS) $(UNIT_BIN)

integ: all
	@$(RUN_TESTS) $(INTEG_BIN) $(PY_TESTS)

# On a machine with an NVIDIA GPU and nvJPEG: the GPU test suite (a sticky fault in a process of
# its own, then every method against its CPU twin), the GPU codecs against libjpeg-turbo (quality,
# and lossy WebP's first pass against the CPU's; then the fuzz corpus's JPEGs and damaged copies),
# then every integration test against the GPU backend with the GPU codecs (and, where the build has
# them, HEIC on the video decoders); where it was built, the video decoders' HEVC pictures of
# tests/data's HEIC files against libde265's.
test-gpu: all
	$(BUILD)/tests/gpu_check --fault
	$(BUILD)/tests/gpu_check
	$(BUILD)/tests/gpu_codecs
	$(BUILD)/tests/gpu_codecs --replay fuzz/corpus/jpeg/*
	$(if $(filter %/gpu_nvdec,$(GPU_BIN)),$(BUILD)/tests/gpu_nvdec tests/data/heic*.heic)
	@BLURD_EXPECT_BACKEND=cuda: BLURD_EXPECT_GPU_CODECS=1 BLURD_WAIT_READY=1 \
	  $(if $(FFNVCODEC),BLURD_EXPECT_VIDEO_DECODERS=1) $(RUN_TESTS) $(INTEG_BIN)

# The demo page in headless Chromium (tests/web/demo.test.mjs), and Server-Timing read by a page
# on another origin (tests/web/timing.test.mjs): needs node, npm and Debian's chromium
# (scripts/install-deps.sh --web); installs playwright-core from the lock file (1.61, the last
# release that runs on Debian 12's Node.js 18).
test-web: $(BUILD)/blurd
	npm ci --prefix tests/web --no-audit --no-fund
	BLURD_BIN=$(BUILD)/blurd node tests/web/demo.test.mjs
	BLURD_BIN=$(BUILD)/blurd node tests/web/timing.test.mjs

# The GPU stress test (tests/stress/stress.py, issue 34): STRESS_SECONDS of every image endpoint
# over JPEG, PNG and WebP with clients that disconnect mid-upload, after the request or mid-response
# and time out, and bursts of connections closed with their requests in flight, against build/blurd
# on the GPU backend; it fails when the server dies, a waiting client gets a reset or an empty
# reply, the stop is not clean or a sanitizer reports. STRESS_WRAP runs the server under a tool
# (e.g. STRESS_WRAP="compute-sanitizer --tool memcheck").
STRESS_SECONDS ?= 120
stress-gpu: $(BUILD)/blurd
	python3 tests/stress/stress.py --bin $(BUILD)/blurd --seconds $(STRESS_SECONDS) \
	  $(if $(STRESS_WRAP),--wrap "$(STRESS_WRAP)") -- --backend gpu

# The libFuzzer targets, built with clang under ASan/UBSan, FUZZ_SECONDS each (fuzz/README.md).
FUZZ_SECONDS ?= 60
fuzz:
	bash fuzz/run.sh $(FUZZ_SECONDS)

# The load test: wrk against build/blurd, LOAD_SECONDS below capacity, then half that over it.
LOAD_SECONDS ?= 60
load: all
	bash tests/load/run.sh $(LOAD_SECONDS) $(BUILD)/blurd

# The soak: mixed endpoints and image sizes at 80% of measured capacity for SOAK_SECONDS
# (tests/load/soak.py: errors, p50/p99 per endpoint, VmRSS flat after the first minute).
SOAK_SECONDS ?= 180
soak: $(BUILD)/blurd
	python3 tests/load/soak.py $(SOAK_SECONDS) $(BUILD)/blurd

# The benchmark tool; bench/run.sh runs it on the GPU machine beside the peers.
bench: $(BUILD)/bench

# The accuracy report and seed 000's Table 2 (CPU; a few minutes): docs/*.md, *.csv, *.png.
report: $(BUILD)/report
	$(BUILD)/report docs
	gnuplot tools/accuracy.gp

# docs/api.md, the HTTP API reference, from the tables /openapi.json is built from.
.PHONY: docs check-docs
docs: $(BUILD)/apidoc
	$(BUILD)/apidoc > docs/api.md.tmp
	mv docs/api.md.tmp docs/api.md

# The fuzz dictionaries' words of the table of operations (tools/fuzzdict.c): paths, parameter
# names and choices; the hand-written words above the marker stay.
.PHONY: fuzz-dict
fuzz-dict: $(BUILD)/fuzzdict
	for d in params handler; do $(BUILD)/fuzzdict fuzz/dict/$$d.dict > fuzz/dict/$$d.dict.tmp && \
	  mv fuzz/dict/$$d.dict.tmp fuzz/dict/$$d.dict; done

# The docs' checks: docs/api.md is what `make docs` writes (tests/unit_docs.c), and every
# relative link and #anchor in README.md and docs/*.md resolves (tests/check_links.py).
check-docs: $(BUILD)/tests/unit_docs
	$(BUILD)/tests/unit_docs
	python3 tests/check_links.py

# The Dockerfile (linted with dockerfile-utils) and deploy/'s compose file and Kubernetes
# manifests, checked against each other and against build/blurd's defaults and routes.
check-deploy: $(BUILD)/blurd
	npm ci --prefix tests/deploy --no-audit --no-fund
	PATH="$$PWD/tests/deploy/node_modules/.bin:$$PATH" python3 tests/deploy_check.py --blurd $(BUILD)/blurd

# The image's CPU flavour built with podman on a debootstrapped Debian 12 and run read-only as
# uid 10001: health check, a blur equal to build/blurd's bytes, stop (scripts/image-test.sh).
.PHONY: image-test
image-test: $(BUILD)/blurd
	BLURD_BIN=$(BUILD)/blurd bash scripts/image-test.sh

# The live /openapi.json linted with @redocly/cli's recommended rules: no error allowed. The
# version is pinned in tests/openapi/ (the last whose engines take Debian 12's Node.js 18, npm 9).
.PHONY: check-openapi
check-openapi: $(BUILD)/blurd
	npm ci --prefix tests/openapi --no-audit --no-fund
	BLURD_BIN=$(BUILD)/blurd sh scripts/with-server.sh \
	  sh -c 'curl -sf "$$BLURD_URL/openapi.json" -o $(BUILD)/openapi.json'
	tests/openapi/node_modules/.bin/redocly lint --extends recommended --format stylish \
	  $(BUILD)/openapi.json

# Every README example as written, from the repository's root, against build/blurd on a free port,
# and docs/operations.md's command-line example (scripts/check-readme.py).
.PHONY: check-readme
check-readme: $(BUILD)/blurd
	BLURD_BIN=$(BUILD)/blurd sh scripts/with-server.sh python3 scripts/check-readme.py

# promtool (Debian's prometheus package) lints a live /metrics, after requests that create series
# of each kind, and the standard names are there (scripts/check-metrics.sh).
.PHONY: check-metrics
check-metrics: $(BUILD)/blurd
	BLURD_BIN=$(BUILD)/blurd sh scripts/with-server.sh sh scripts/check-metrics.sh

# The local-variance accuracy table: every float32 method against exact on photographs and a
# flat 200 +- 2 region (CPU; a few minutes): docs/variance_accuracy.md, .csv.
report-variance: $(BUILD)/var_accuracy
	$(BUILD)/var_accuracy docs

FMT_SRC = $(wildcard */*.c */*.h */*.cu api/ops/*.c)
fmt:
	clang-format -i $(FMT_SRC)

fmt-check:
	clang-format --dry-run --Werror $(FMT_SRC)

clean:
	rm -rf build

-include $(shell find $(BUILD) $(CU_BUILD)/gpu -name '*.d' 2>/dev/null | sort -u)
