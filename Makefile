# flashgrad — build, test, train.
#
#   make            build/libflashgrad.a and build/flashgrad (CPU)
#   make test       build and run every test (Criterion)
#   make sanitize   the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make train      train the default small GPT on the synthetic addition task
#   make cuda       the CUDA build (nvcc, -arch=sm_$(CUDA_ARCH)) when nvcc is present
#
# Every .c file under tensor/ autograd/ ops/ (and ops/cpu/) datasets/ train/ goes into the library; the
# flashgrad program is cli/*.c (its commands) and bench/*.c (the CPU benchmarks) over the library; every
# tests/*.c goes into one Criterion test runner. Adding a file needs no edit here.

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2 -march=x86-64-v2 -mtune=native
# -fPIC: the static library's objects are also the shared library's (make shared)
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -g $(OPT) -I. -pthread -fPIC
DEPS_PKGS := libcriterion-dev libopenblas-dev libxxhash-dev libpcre2-dev xxhash pkg-config

# ---- dependencies: install what is missing (root), else stop with one line naming it ----
HAVE_PKGCONFIG := $(shell command -v pkg-config >/dev/null 2>&1 && echo yes)
# OpenBLAS is present when its library is: a cblas.h alone may be the reference BLAS's (libblas-dev).
OPENBLAS_LIB := $(firstword $(wildcard /usr/lib/*/libopenblas.so /usr/lib/libopenblas.so /usr/lib/*/openblas-pthread/libopenblas.so \
                  /usr/lib64/libopenblas.so /usr/local/lib/libopenblas.so))
deps_missing = $(strip $(if $(HAVE_PKGCONFIG),,pkg-config) \
    $(if $(OPENBLAS_LIB),,libopenblas-dev) \
    $(if $(XXH_HDR)$(XXH_ASKED),,libxxhash-dev) \
    $(if $(wildcard /usr/include/pcre2.h /usr/local/include/pcre2.h),,libpcre2-dev) \
    $(if $(wildcard /usr/include/criterion/criterion.h),,$(if $(NEED_CRITERION),libcriterion-dev)) \
    $(if $(NEED_CRITERION),$(if $(shell command -v xxhsum 2>/dev/null),,xxhash)))

# oneDNN (libdnnl-dev), the GEMM of large products (ops/cpu/dnnl_gemm.h): installed like the others
# when root; where it cannot be, the build goes on without it (saying so once) and those products
# use OpenBLAS. FG_DNNL=0 builds without it.
DNNL_HDR  := $(firstword $(wildcard /usr/include/dnnl.h /usr/local/include/dnnl.h))
DNNL_LIB  := $(firstword $(wildcard /usr/lib/*/libdnnl.so /usr/lib/libdnnl.so /usr/lib64/libdnnl.so /usr/local/lib/libdnnl.so))
DNNL_GOMP := $(firstword $(wildcard /usr/lib/*/libgomp.so.1 /usr/lib/libgomp.so.1 /usr/lib64/libgomp.so.1))
DNNL_OFF  := $(filter 0,$(FG_DNNL))$(filter fallback,$(FG_CBLAS))
FG_WITH_DNNL := $(if $(DNNL_OFF),,$(and $(DNNL_HDR),$(DNNL_LIB),$(DNNL_GOMP),yes))
ifeq ($(FG_WITH_DNNL),yes)
  DNNL_CFLAGS := -DFG_HAVE_DNNL
  # libgomp: ops/cpu/dnnl_gemm.c sets OpenMP's team size itself (Debian's oneDNN runs on GNU OpenMP);
  # -lgomp (gcc's own library folder has it) so that nvcc links it too
  DNNL_LIBS   := -ldnnl -lgomp
endif
# what `make deps` does about oneDNN: nothing (present, or turned off), install it (root), or say
# once that this build goes without it
DNNL_DEPS := $(if $(FG_WITH_DNNL)$(DNNL_OFF),,$(if $(filter 0,$(shell id -u)),install,without))

# XXH64, the checksum of every file flashgrad writes (tensor/fileio.c): libxxhash's, compiled in from
# its header (libxxhash-dev, XXH_INLINE_ALL), so nothing is linked and nothing is needed at run time.
# Where the header is missing, `make` installs the package (root) or stops naming it, while a build
# that installs nothing (`make cuda`, on machines that cannot) uses tensor/compat/xxhash.h, a
# stand-in with the same digests (make test compares them). FG_XXHASH=compat asks for the stand-in.
XXH_HDR := $(firstword $(wildcard /usr/include/xxhash.h /usr/local/include/xxhash.h) \
             $(if $(HAVE_PKGCONFIG),$(shell pkg-config --exists libxxhash 2>/dev/null && echo libxxhash.pc)))
XXH_ASKED := $(if $(filter undefined,$(origin FG_XXHASH)),,$(filter compat,$(FG_XXHASH)))
FG_XXHASH ?= $(if $(XXH_HDR),lib,compat)
ifeq ($(FG_XXHASH),compat)
  XXH_CFLAGS := -Itensor/compat -DFG_XXH64_COMPAT
else
  XXH_CFLAGS := $(if $(HAVE_PKGCONFIG),$(shell pkg-config --cflags libxxhash 2>/dev/null))
endif
CFLAGS    += $(XXH_CFLAGS)
# fileio.o is rebuilt when the choice changes
XXH_STAMP := $(BUILD)/.xxhash-$(if $(filter compat,$(FG_XXHASH)),compat,lib)

# PCRE2 (libpcre2-dev), the regex engine of the BPE tokenizers' pre-tokenizer (datasets/bpe.c):
# installed like the others when root; a build without it (`make cuda` on machines that cannot
# install) still works, and a BPE tokenizer is then refused with one line saying so.
PCRE2_HDR    := $(firstword $(wildcard /usr/include/pcre2.h /usr/local/include/pcre2.h))
PCRE2_CFLAGS := $(if $(PCRE2_HDR),-DFG_HAVE_PCRE2)
PCRE2_LIBS   := $(if $(PCRE2_HDR),-lpcre2-8)
PCRE2_STAMP  := $(BUILD)/.pcre2-$(if $(PCRE2_HDR),yes,no)

# FG_CBLAS=fallback builds without OpenBLAS, on ops/cpu/compat's plain C GEMM (for machines that
# cannot install it, such as the GPU machines; `make cuda` sets it there by itself).
ifeq ($(FG_CBLAS),fallback)
  BLAS_CFLAGS := -Iops/cpu/compat
  BLAS_LIBS   :=
  BLAS_SRC    := ops/cpu/compat/cblas_fallback.c
else
  BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
  BLAS_LIBS   := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas) $(DNNL_LIBS)
  BLAS_SRC    :=
endif
LDLIBS      += $(BLAS_LIBS) $(PCRE2_LIBS) -lm -pthread
CFLAGS      += $(BLAS_CFLAGS)
# objects that see FG_HAVE_DNNL are rebuilt when it changes (oneDNN installed or removed)
DNNL_STAMP  := $(BUILD)/.dnnl-$(if $(FG_WITH_DNNL),yes,no)

# ---- MPI (optional): data-parallel `mpirun -np P build/flashgrad train` (train/dist.h) ----
# Found through `mpicc --showme` (Open MPI) or pkg-config's ompi; FG_MPI=0 builds without it. Only
# the flashgrad program links it (train/mpi/comm_mpi.c, reached through a weak symbol): the library,
# the tests and the Python package do not depend on MPI.
FG_MPI ?= 1
ifneq ($(FG_MPI),0)
  MPI_CFLAGS := $(or $(shell mpicc --showme:compile 2>/dev/null),$(shell pkg-config --cflags ompi 2>/dev/null))
  MPI_LIBS   := $(or $(shell mpicc --showme:link 2>/dev/null),$(shell pkg-config --libs ompi 2>/dev/null))
endif
MPI_SRC := $(if $(MPI_LIBS),train/mpi/comm_mpi.c)
MPI_OBJ := $(MPI_SRC:%.c=$(BUILD)/%.o)

LIB_DIRS := tensor autograd ops ops/cpu datasets train
LIB_SRC  := $(wildcard $(addsuffix /*.c,$(LIB_DIRS))) $(BLAS_SRC)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
PROG_SRC := $(wildcard cli/*.c bench/*.c)
PROG_OBJ := $(PROG_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
# Tests run the program through FG_BIN; the CLI code a test calls directly is linked in by name
# (tests/test_cli_io.c: the atomic CSV writer of cli/cli_util.c).
TEST_CLI_OBJ := $(BUILD)/cli/cli_util.o $(BUILD)/cli/nanogpt.o $(BUILD)/cli/flags.o

.PHONY: all deps deps-test lint test sanitize kill-test train train-shakespeare clean cuda cuda-cpu gpu-check bench plots fuzz valgrind
all: deps
	@$(MAKE) --no-print-directory $(BUILD)/libflashgrad.a $(BUILD)/flashgrad

# The build's required packages are installed (root) or named; the optional ones, Open MPI
# (data-parallel runs) and gnuplot (flashgrad plot), only for the tests, which exercise them
# (deps-test), or with FG_OPTIONAL_DEPS=1: `make` and `make train` name what they would enable.
OPTIONAL_DEPS := $(if $(NEED_CRITERION),1,$(FG_OPTIONAL_DEPS))
deps:
	@missing="$(deps_missing)"; sh tests/deps.sh $$missing
	@if [ "$(FG_MPI)" != 0 ] && [ -z "$(MPI_LIBS)" ]; then \
	    { [ "$(OPTIONAL_DEPS)" = 1 ] && sh tests/deps.sh libopenmpi-dev openmpi-bin 2>/dev/null; } || \
	    echo "flashgrad: building without MPI (no data-parallel runs; install libopenmpi-dev openmpi-bin for them, or make FG_OPTIONAL_DEPS=1 as root)"; fi
	@command -v gnuplot >/dev/null 2>&1 || { [ "$(OPTIONAL_DEPS)" = 1 ] && sh tests/deps.sh gnuplot-nox 2>/dev/null; } || \
	    echo "flashgrad: no gnuplot: flashgrad plot and make plots say so (install gnuplot-nox for them, or make FG_OPTIONAL_DEPS=1 as root)"
ifeq ($(DNNL_DEPS),install)
	@sh tests/deps.sh libdnnl-dev || echo "flashgrad: building without oneDNN: float32 products use the tile kernel and OpenBLAS"
else ifeq ($(DNNL_DEPS),without)
	@echo "flashgrad: building without oneDNN (libdnnl-dev not installed): float32 products use the tile kernel and OpenBLAS"
endif
deps-test:
	@$(MAKE) --no-print-directory deps NEED_CRITERION=1

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# Test builds treat a warning as an error: the tests' own objects always; the library's and the
# program's when FG_WERROR=1, which `make test` and `make sanitize` pass (a plain `make` does not, so
# a newer compiler's new warning cannot stop a user's build). The stamp rebuilds, once, the objects a
# plain `make` compiled without -Werror.
ifeq ($(FG_WERROR),1)
CFLAGS += -Werror
$(LIB_OBJ) $(PROG_OBJ) $(MPI_OBJ) $(TEST_OBJ): $(BUILD)/.werror
$(BUILD)/.werror:
	@mkdir -p $(dir $@)
	@touch $@
else
$(BUILD)/tests/%.o: CFLAGS += -Werror
endif

$(BUILD)/ops/cpu/dnnl_gemm.o: CFLAGS += $(DNNL_CFLAGS)
$(BUILD)/ops/cpu/dnnl_gemm.o: $(DNNL_STAMP)
$(DNNL_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/.dnnl-*
	@touch $@
$(BUILD)/datasets/bpe.o: CFLAGS += $(PCRE2_CFLAGS)
$(BUILD)/datasets/bpe.o: $(PCRE2_STAMP)
$(PCRE2_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/.pcre2-*
	@touch $@
$(BUILD)/tensor/fileio.o: $(XXH_STAMP)
$(XXH_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/.xxhash-*
	@touch $@

# (rebuilt when the Makefile changes too, so that an object no longer in the library leaves it)
$(BUILD)/libflashgrad.a: $(LIB_OBJ) Makefile
	@rm -f $@
	ar rcs $@ $(filter %.o,$^)

$(BUILD)/train/mpi/%.o: train/mpi/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/flashgrad: $(PROG_OBJ) $(MPI_OBJ) $(BUILD)/libflashgrad.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/test_runner: $(TEST_OBJ) $(TEST_CLI_OBJ) $(BUILD)/libflashgrad.a
	$(CC) $(CFLAGS) -o $@ $^ -lcriterion $(LDLIBS)

# The layers: no file includes a header from a higher layer (tests/lint_layers.sh says which).
lint:
	@sh tests/lint_layers.sh

# The README's test command. Tests find the CLI at build/flashgrad and shared data at ../shared;
# the runs they start keep their FMA peak cache (cli/peak_cache.h) in the build folder, not the user's.
# Every skipped test goes to a log (tests/skip_log.c, tests/python/run_pytest.sh), and the run ends
# with the groups that did not run and what enables each (tests/skip_summary.sh), after Criterion's
# synthesis line; the runner's status is make's.
SKIP_LOG    := $(abspath $(BUILD))/test-skips.txt
SKIP_LOG_PY := $(abspath $(BUILD))/test-skips-python.txt
test: deps-test lint
	@$(MAKE) --no-print-directory FG_WERROR=1 $(BUILD)/test_runner $(BUILD)/flashgrad
	@rm -f $(SKIP_LOG)
	OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-2} XDG_CACHE_HOME=$(abspath $(BUILD))/test-cache FG_SKIP_LOG=$(SKIP_LOG) \
	    FG_BIN=$(abspath $(BUILD))/flashgrad $(BUILD)/test_runner $(TEST_ARGS); \
	    st=$$?; sh tests/skip_summary.sh $(SKIP_LOG) $(if $(TEST_ARGS),,$(SKIP_LOG_PY)); exit $$st

sanitize: deps-test
	@$(MAKE) --no-print-directory FG_WERROR=1 BUILD=build-san OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined" build-san/test_runner build-san/flashgrad
	@# a leak report comes after a test's result, which it does not change: the log is searched for one
	@rm -f build-san/test-skips.txt
	@{ ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    XDG_CACHE_HOME=$(abspath build-san)/test-cache FG_SANITIZE=1 FG_BIN=$(abspath build-san)/flashgrad \
	    FG_SKIP_LOG=$(abspath build-san)/test-skips.txt \
	    build-san/test_runner --jobs 1 $(TEST_ARGS); echo $$? > build-san/sanitize.status; } 2>&1 | tee build-san/sanitize.log
	@sh tests/skip_summary.sh build-san/test-skips.txt
	@st=$$(cat build-san/sanitize.status); [ "$$st" = 0 ] || exit $$st; \
	if grep -q "ERROR: LeakSanitizer" build-san/sanitize.log; then \
	    echo "make sanitize: LeakSanitizer reported leaks (build-san/sanitize.log)"; exit 1; fi

# valgrind memcheck, suite by suite (sizes shrunk as under the sanitizers); any memory error or
# definite leak fails it. The attention suites are left out by default: under memcheck their
# float32/float64 sweeps take hours (ASan + LSan cover them in make sanitize). Child processes are
# traced except the Python cross-checks (valgrind reports false positives inside CPython's loader).
VALGRIND_SUITES ?= philox view alloc autograd gradcheck npy safetensors fileio tokenizer text addition \
    matmul elementwise reduce shape embedding layernorm gelu softmax cross_entropy dropout ops ops_llama fuzz_corpus \
    checkpoint recompute gpt train cli cli_io devices simd attn_tiles philox_shared fastpath
valgrind: deps-test
	@command -v valgrind >/dev/null 2>&1 || sh tests/deps.sh valgrind
	@$(MAKE) --no-print-directory BUILD=build-vg OPT="-O1 -g" build-vg/test_runner build-vg/flashgrad
	@for s in $(VALGRIND_SUITES); do \
	    echo "== valgrind: $$s"; \
	    FG_SANITIZE=1 FG_BIN=$(abspath build-vg)/flashgrad valgrind -q --trace-children=yes \
	        --trace-children-skip='*python*,*/sh,*/bash' --leak-check=full --show-leak-kinds=definite \
	        --errors-for-leak-kinds=definite --error-exitcode=1 \
	        build-vg/test_runner --jobs 1 --timeout 3000 --filter "$$s/*" || exit 1; \
	done

# Interrupted runs: SIGKILL a training run with a checkpoint every step at 20 random moments, then
# SIGTERM one that checkpoints only when asked at 10; the last checkpoint must always load and the
# resumed losses equal an uninterrupted run's.
kill-test: all
	XDG_CACHE_HOME=$(abspath $(BUILD))/test-cache FG_BIN=$(abspath $(BUILD))/flashgrad bash tests/kill_test.sh 20 KILL
	XDG_CACHE_HOME=$(abspath $(BUILD))/test-cache FG_BIN=$(abspath $(BUILD))/flashgrad bash tests/kill_test.sh 10 TERM

# The make targets train into their own folders and replace what an earlier `make train` left
# there (--overwrite); `flashgrad train` itself never replaces a run unless told to.
train: all
	$(BUILD)/flashgrad train --task addition --out runs/addition --overwrite

train-shakespeare: all
	sh datasets/get_tinyshakespeare.sh datasets/tinyshakespeare.txt
	$(BUILD)/flashgrad train --data datasets/tinyshakespeare.txt --out runs/shakespeare --overwrite \
	    --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --steps 2000 \
	    --lr 1e-3 --min-lr 1e-4 --warmup 100 --dropout 0 --weight-decay 0.1 --beta2 0.99 --grad-clip 1.0

clean:
	rm -rf build build-san build-cuda build-vg build-fuzz

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(PROG_OBJ:.o=.d) $(MPI_OBJ:.o=.d)

# ---- fuzzing (libFuzzer, clang): make fuzz FUZZ_SECONDS=600 ----
# Each target starts from its committed seed corpus (tests/fuzz/corpus/<name>/); new inputs go to
# build-fuzz/corpus-<name>/, crashes to build-fuzz/crash-*. Turn a crash into a file under
# tests/fuzz/regressions/ (make test replays them).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := npy safetensors dataset meta_pkl bpe
FUZZ_CC      ?= clang
FUZZ_FLAGS   := -std=c11 -D_GNU_SOURCE -g -O1 -I. $(XXH_CFLAGS) $(PCRE2_CFLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB_SRC := $(wildcard tensor/*.c) $(wildcard datasets/*.c)

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB_SRC)
	@mkdir -p build-fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(FUZZ_LIB_SRC) $(PCRE2_LIBS) -lm -pthread

fuzz: $(FUZZ_TARGETS:%=build-fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p build-fuzz/corpus-$$t; \
	    echo "== fuzz $$t for $(FUZZ_SECONDS) s"; \
	    dict=; [ -f tests/fuzz/dict/$$t.dict ] && dict=-dict=tests/fuzz/dict/$$t.dict; \
	    build-fuzz/fuzz_$$t $$dict -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	        -artifact_prefix=build-fuzz/$$t- build-fuzz/corpus-$$t tests/fuzz/corpus/$$t 2>&1 \
	        | grep -E 'stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY|Done' || exit 1; \
	    [ -z "$$(ls build-fuzz/$$t-crash-* build-fuzz/$$t-leak-* build-fuzz/$$t-oom-* 2>/dev/null)" ] || { echo "fuzz $$t: crash saved in build-fuzz/"; exit 1; }; \
	done

# =================================================================================================
# CUDA — make cuda, make gpu-check            (this section only; the CPU rules above are untouched)
# =================================================================================================
# `make cuda` builds, with nvcc, into $(CUDA_BUILD)/, ON TOP of the CPU library — the same objects
# as `make` (build/libflashgrad.a: ops/ is never recompiled for CUDA):
#   cuda/*.o         the kernels, their launchers, the FG_CUDA kernel table and the runtime, linked
#                    as objects (libflashgrad_cuda.a holds them too, for programs that link it with
#                    --whole-archive): the CPU library reaches fg_cuda_init through a weak symbol
#   flashgrad        the program (cli/*.c + bench/*.c) over both: --device cuda works
#   fg_cuda_tests    the GPU test runner (tests/cuda/): every op's GPU result against the CPU's
#   fg_cuda_bench    the GPU attention benchmark (bench/fg_cuda_bench.cu), CSV on stdout
#   then tests/cuda/check_bf16_sass.sh reads cuda/attention_bf16.o's SASS (cuobjdump) and fails
#   when a bf16 tensor-core kernel lacks HMMA, ldmatrix or cp.async, or anything spills
#   (BF16_SASS_CHECK=0 leaves it out: gpu-check runs it as a step of its own)
# `make gpu-check` runs bench/gpu_check.sh (build, tests, sanitizer, GPU-vs-CPU training, benchmark
# vs PyTorch; the report in $OUT or bench/results/gpu-check/). Plain `make` never needs nvcc, and
# `make cuda` never installs packages (it runs on machines that cannot).
#   NVCC=/path/to/nvcc    CUDA_ARCH=90 (sm_90, H100/H200)    CUDA_BUILD=build-cuda
#   Without libopenblas (or with FG_CBLAS=fallback) the CPU library under the CUDA build is made
#   with ops/cpu/compat's C GEMM in $(CUDA_BUILD)/cpu; otherwise it is build/ itself.
NVCC       ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_ARCH  ?= 90
CUDA_BUILD ?= build-cuda
NVCC_OPT   ?= -O3
NVCCFLAGS  ?= -std=c++17 -arch=sm_$(CUDA_ARCH) $(NVCC_OPT) -lineinfo -I. -Xcompiler -Wall,-Wextra,-pthread
# NVCC_HOST_FLAGS=-allow-unsupported-compiler when nvcc refuses the host gcc (gpu-check finds out);
# PTXAS_VERBOSE=1 prints registers, spills and shared memory of the attention kernels.
NVCC_HOST_FLAGS ?=
NVCCFLAGS  += $(NVCC_HOST_FLAGS)
ifneq ($(if $(filter fallback,$(FG_CBLAS)),,$(OPENBLAS_LIB)),)
  CUDA_CPU_BUILD   := $(BUILD)
  CUDA_CPU_FLAGS   :=
  CUDA_BLAS_KIND   := system OpenBLAS
  CUDA_BLAS_CFLAGS := $(BLAS_CFLAGS)
  CUDA_BLAS_LIBS   := $(BLAS_LIBS)
else
  CUDA_CPU_BUILD   := $(CUDA_BUILD)/cpu
  CUDA_CPU_FLAGS   := FG_CBLAS=fallback
  CUDA_BLAS_KIND   := fallback (ops/cpu/compat: no libopenblas here)
  CUDA_BLAS_CFLAGS := -Iops/cpu/compat
  CUDA_BLAS_LIBS   :=
endif
CUDA_XXH_KIND  := $(if $(filter compat,$(FG_XXHASH)),stand-in (tensor/compat/xxhash.h: no libxxhash-dev here),libxxhash)
# cuBLAS and cuRAND: the toolkit's, else (an image with nvcc but only PyTorch's pip wheels of the
# libraries) the nvidia-cublas / nvidia-curand packages python3 can import; rpath'd either way, so
# the binaries run without LD_LIBRARY_PATH.
CUDA_HOME      ?= $(abspath $(dir $(NVCC))..)
# the pip wheels' directories (nvidia-cublas, -curand, -nccl): searched for whatever the toolkit lacks
CUDA_PIP       := $(if $(NVCC),$(shell python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null))
CUDA_TK_LIBDIR := $(firstword $(foreach d,lib64 lib targets/x86_64-linux/lib,$(if $(wildcard $(CUDA_HOME)/$(d)/libcublas.so*),$(CUDA_HOME)/$(d))))
ifneq ($(CUDA_TK_LIBDIR),)
  CUDA_LIBS_KIND := toolkit ($(CUDA_TK_LIBDIR))
  CUDA_INC_FLAGS :=
  CUDA_LIB_FLAGS := -L$(CUDA_TK_LIBDIR) -Xlinker -rpath=$(CUDA_TK_LIBDIR) -lcublas -lcurand
else
  CUDA_PIP_LIBS  := $(wildcard $(addsuffix /cublas/lib,$(CUDA_PIP)) $(addsuffix /curand/lib,$(CUDA_PIP)))
  CUDA_LIBS_KIND := $(if $(CUDA_PIP_LIBS),pip wheels ($(CUDA_PIP_LIBS)),not found)
  CUDA_INC_FLAGS := $(addprefix -I,$(wildcard $(addsuffix /cublas/include,$(CUDA_PIP)) $(addsuffix /curand/include,$(CUDA_PIP))))
  CUDA_LIB_FLAGS := $(addprefix -L,$(CUDA_PIP_LIBS)) $(addprefix -Xlinker -rpath=,$(CUDA_PIP_LIBS)) \
                    $(addprefix -l:,$(notdir $(firstword $(wildcard $(addsuffix /cublas/lib/libcublas.so.*,$(CUDA_PIP)))) \
                                    $(firstword $(wildcard $(addsuffix /curand/lib/libcurand.so.*,$(CUDA_PIP))))))
endif
NVCCFLAGS      += $(CUDA_INC_FLAGS)
# NCCL (cuda/nccl.cu, multi-GPU data parallelism over MPI): the toolkit's, else the system's, else
# the nvidia-nccl pip wheel's; without it cuda/nccl.cu is left out and a multi-process CUDA run
# says so. FG_NCCL=0 leaves it out.
FG_NCCL        ?= 1
NCCL_INC_DIR   := $(if $(filter 0,$(FG_NCCL)),,$(firstword $(foreach d,$(CUDA_HOME)/include /usr/include /usr/local/include \
                    $(addsuffix /nccl/include,$(CUDA_PIP)),$(if $(wildcard $(d)/nccl.h),$(d)))))
NCCL_LIB_DIR   := $(if $(NCCL_INC_DIR),$(firstword $(foreach d,$(CUDA_HOME)/lib $(CUDA_HOME)/lib64 \
                    $(CUDA_HOME)/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu $(addsuffix /nccl/lib,$(CUDA_PIP)), \
                    $(if $(wildcard $(d)/libnccl.so*),$(d)))))
NCCL_KIND      := $(if $(NCCL_LIB_DIR),$(NCCL_LIB_DIR),not found)
NCCL_FLAGS     := $(if $(NCCL_LIB_DIR),-L$(NCCL_LIB_DIR) -Xlinker -rpath=$(NCCL_LIB_DIR) $(if $(wildcard $(NCCL_LIB_DIR)/libnccl.so),-lnccl,-l:libnccl.so.2))
NVCCFLAGS      += $(if $(NCCL_LIB_DIR),$(filter-out -I/usr/include,-I$(NCCL_INC_DIR)))
# the GPU test runner's C files: plain C over the CPU library's headers; a missing declaration is an error (a
# call to an undeclared function would truncate the pointer it returns and crash at run time)
CUDA_CFLAGS    := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror=implicit-function-declaration -Werror=int-conversion -g $(OPT) -I. -pthread $(CUDA_BLAS_CFLAGS)
CUDA_LDLIBS    := $(CUDA_LIB_FLAGS) $(NCCL_FLAGS) $(CUDA_BLAS_LIBS) $(PCRE2_LIBS) -lm -lpthread
CUDA_CPU_LIB   := $(CUDA_CPU_BUILD)/libflashgrad.a
CUDA_CU_SRC    := $(filter-out $(if $(NCCL_LIB_DIR),,cuda/nccl.cu),$(wildcard cuda/*.cu))
CUDA_CU_OBJ    := $(CUDA_CU_SRC:%.cu=$(CUDA_BUILD)/%.o)
CUDA_PROG_OBJ  := $(PROG_SRC:%.c=$(CUDA_CPU_BUILD)/%.o) $(MPI_SRC:%.c=$(CUDA_CPU_BUILD)/%.o)
CUDA_TEST_SRC  := $(wildcard tests/cuda/*.c tests/cuda/*.cu)
# tests/cuda/test_attention.c runs the attention and gradcheck commands in-process (fg_cmd_attention,
# fg_cmd_gradcheck) on the device: their CLI objects are linked into the GPU test runners by name.
CUDA_TEST_CLI  := $(addprefix $(CUDA_CPU_BUILD)/,cli/cmd_attention.o cli/cmd_gradcheck.o cli/attn_flags.o cli/flags.o cli/cli_util.o)
CUDA_TEST_OBJ  := $(patsubst %.cu,$(CUDA_BUILD)/%.o,$(patsubst %.c,$(CUDA_BUILD)/%.o,$(CUDA_TEST_SRC))) $(CUDA_TEST_CLI)
CUDA_BENCH_OBJ := $(CUDA_BUILD)/bench/fg_cuda_bench.o

# the CPU library and program objects the CUDA build stands on (built without any package install)
cuda-cpu:
	@$(MAKE) --no-print-directory BUILD=$(CUDA_CPU_BUILD) $(CUDA_CPU_FLAGS) $(CUDA_CPU_LIB) $(CUDA_PROG_OBJ) $(CUDA_TEST_CLI)

cuda:
	@if [ -z "$(NVCC)" ]; then echo "make cuda: nvcc not found (install the CUDA toolkit or pass NVCC=/path/to/nvcc)" >&2; exit 1; fi
	@echo "cuda: nvcc $(NVCC) ($$($(NVCC) --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')), -arch=sm_$(CUDA_ARCH), cuBLAS/cuRAND: $(CUDA_LIBS_KIND), CBLAS: $(CUDA_BLAS_KIND), NCCL: $(NCCL_KIND), MPI: $(if $(MPI_LIBS),yes,no), XXH64: $(CUDA_XXH_KIND)"
	@$(MAKE) --no-print-directory cuda-cpu
	@$(MAKE) --no-print-directory $(CUDA_BUILD)/libflashgrad_cuda.a $(CUDA_BUILD)/flashgrad $(CUDA_BUILD)/fg_cuda_tests \
	    $(CUDA_BUILD)/fg_cuda_bench
	@# the bf16 tensor-core kernels' SASS: HMMA, ldmatrix and cp.async present, no spills or local memory
	@if [ "$(BF16_SASS_CHECK)" != 0 ]; then bash tests/cuda/check_bf16_sass.sh $(CUDA_BUILD)/cuda/attention_bf16.o; fi

gpu-check:
	bash bench/gpu_check.sh

$(CUDA_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CUDA_CFLAGS) -MMD -MP -c $< -o $@

$(CUDA_BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
ifeq ($(PTXAS_VERBOSE),1)
$(CUDA_BUILD)/cuda/attention.o $(CUDA_BUILD)/cuda/attention_bf16.o: NVCCFLAGS += -Xptxas -v
endif

$(CUDA_BUILD)/libflashgrad_cuda.a: $(CUDA_CU_OBJ) Makefile
	@rm -f $@
	ar rcs $@ $(filter %.o,$^)

$(CUDA_BUILD)/flashgrad: $(CUDA_PROG_OBJ) $(CUDA_CU_OBJ) $(CUDA_CPU_LIB)
	$(NVCC) -arch=sm_$(CUDA_ARCH) -o $@ $^ $(CUDA_LDLIBS) $(MPI_LIBS)

$(CUDA_BUILD)/fg_cuda_tests: $(CUDA_TEST_OBJ) $(CUDA_CU_OBJ) $(CUDA_CPU_LIB)
	$(NVCC) -arch=sm_$(CUDA_ARCH) -o $@ $^ $(CUDA_LDLIBS)

$(CUDA_BUILD)/fg_cuda_bench: $(CUDA_BENCH_OBJ) $(CUDA_CU_OBJ) $(CUDA_CPU_LIB)
	$(NVCC) -arch=sm_$(CUDA_ARCH) -o $@ $^ $(CUDA_LDLIBS)

-include $(CUDA_CU_OBJ:.o=.d) $(CUDA_TEST_OBJ:.o=.d) $(CUDA_BENCH_OBJ:.o=.d)

# ---- cuda-emu: the CUDA code on the CPU, without a GPU or nvcc (tests/cuda/emu/README.md) ----
# Every cuda/*.cu is copied with its <<<...>>> launches rewritten and compiled by g++ against a CPU
# emulator of GPU threads and fake CUDA runtime / cuBLAS / cuRAND headers, with GCC's
# ThreadSanitizer instrumentation (and no SRA, so a float4 copy stays one 16-byte access) whose
# hooks the emulator's runtime implements itself (emu_runtime.cpp: not instrumented, no TSan
# runtime linked), so it sees every memory access. fg_emu_detectors shows each check firing on a
# seeded bug; fg_flash_emu checks the flash kernels against the CPU reference; fg_cuda_tests_emu
# runs the GPU test suite (without the device-only suite). Every block runs under EMU_SCHEDULES
# thread schedules (thread-id order, reversed, seeded random orders; FG_EMU_SEED picks them).
CUDA_EMU_BUILD ?= $(CUDA_BUILD)/emu
EMU_CXX        ?= g++
EMU_INSTR      := -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 -fno-tree-sra
EMU_CXXFLAGS   := -std=c++17 -O2 -g -Wall -Wextra -Wno-unknown-pragmas -pthread $(EMU_INSTR) \
                  -include tests/cuda/emu/cuda_emu.h -Itests/cuda/emu/include -I$(CUDA_EMU_BUILD) -I. $(CUDA_BLAS_CFLAGS)
# (cuda/nccl.cu runs on a one-rank loopback stand-in of NCCL, tests/cuda/emu/include/nccl.h)
EMU_CU_OBJ     := $(patsubst %.cu,$(CUDA_EMU_BUILD)/%.o,$(sort $(CUDA_CU_SRC) $(wildcard cuda/nccl.cu)))
EMU_CUH_GEN    := $(patsubst %,$(CUDA_EMU_BUILD)/%,$(wildcard cuda/*.cuh))
EMU_LIB_OBJ    := $(EMU_CU_OBJ)
EMU_TEST_OBJ   := $(patsubst %.c,$(CUDA_BUILD)/%.o,$(wildcard tests/cuda/*.c)) $(CUDA_EMU_BUILD)/device_cases_stub.o \
                  $(CUDA_TEST_CLI)
EMU_RT_OBJ     := $(CUDA_EMU_BUILD)/emu_runtime.o $(CUDA_EMU_BUILD)/emu_mma.o $(CUDA_EMU_BUILD)/emu_async.o
EMU_HDRS       := $(wildcard tests/cuda/emu/*.h tests/cuda/emu/include/*.h)
EMU_SCHEDULES  ?= 3
# objects compiled with other flags (say, without the instrumentation the checks depend on) are
# rebuilt: the flags are kept in a stamp that changes when they do
EMU_STAMP      := $(CUDA_EMU_BUILD)/.flags
ifneq ($(filter cuda-emu $(CUDA_EMU_BUILD)/%,$(MAKECMDGOALS)),)
  $(shell mkdir -p $(CUDA_EMU_BUILD) && (echo '$(EMU_CXXFLAGS)' | cmp -s - $(EMU_STAMP) || echo '$(EMU_CXXFLAGS)' > $(EMU_STAMP)))
endif
$(EMU_STAMP):
	@mkdir -p $(dir $@)
	echo '$(EMU_CXXFLAGS)' > $@

.PHONY: cuda-emu
cuda-emu:
	@$(MAKE) --no-print-directory cuda-cpu
	@$(MAKE) --no-print-directory $(CUDA_EMU_BUILD)/fg_emu_detectors $(CUDA_EMU_BUILD)/fg_flash_emu \
	    $(CUDA_EMU_BUILD)/fg_cuda_tests_emu $(CUDA_EMU_BUILD)/fg_cuda_bench_emu $(CUDA_EMU_BUILD)/fg_mma_emu \
	    $(CUDA_EMU_BUILD)/fg_attn_bf16_emu
	$(CUDA_EMU_BUILD)/fg_emu_detectors
	FG_EMU_SCHEDULES=$(EMU_SCHEDULES) $(CUDA_EMU_BUILD)/fg_mma_emu
	FG_EMU_SCHEDULES=$(EMU_SCHEDULES) $(CUDA_EMU_BUILD)/fg_attn_bf16_emu
	FG_EMU_SCHEDULES=$(EMU_SCHEDULES) $(CUDA_EMU_BUILD)/fg_flash_emu
	FG_EMU_SCHEDULES=$(EMU_SCHEDULES) OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-2} \
	    $(CUDA_EMU_BUILD)/fg_cuda_tests_emu --quick $(EMU_ARGS)
	@# the benchmark's exact calls (its buffers, every dtype, both implementations, the variants) at tiny shapes
	for a in "--dtype f32" "--dtype f64" "--impl naive" "--dtype f32 --alibi --softcap 30" "--gqa 2 --window 16,0" \
	    "--dtype bf16" "--dtype bf16 --gqa 2 --window 16,0" "--kernels"; do \
	    FG_EMU_SCHEDULES=1 $(CUDA_EMU_BUILD)/fg_cuda_bench_emu --n 40,64 --d 64,128 --tokens 64 --hidden 256 \
	        --budget-ms 1 $$a >/dev/null || exit 1; done
	@echo "fg_cuda_bench_emu: the benchmark's calls ran clean (8 option sets: bf16 tensor cores and the kernel table included)"

$(CUDA_EMU_BUILD)/cuda/%.cpp: cuda/%.cu tests/cuda/emu/rewrite_launches.py
	@mkdir -p $(dir $@)
	python3 tests/cuda/emu/rewrite_launches.py $< $@
$(CUDA_EMU_BUILD)/cuda/%.cuh: cuda/%.cuh tests/cuda/emu/rewrite_launches.py
	@mkdir -p $(dir $@)
	python3 tests/cuda/emu/rewrite_launches.py $< $@
$(CUDA_EMU_BUILD)/cuda/%.o: $(CUDA_EMU_BUILD)/cuda/%.cpp $(EMU_CUH_GEN) $(EMU_HDRS) $(EMU_STAMP)
	$(EMU_CXX) $(EMU_CXXFLAGS) -MMD -MP -c $< -o $@
$(CUDA_EMU_BUILD)/device_cases_stub.o: tests/cuda/emu/device_cases_stub.c
	@mkdir -p $(dir $@)
	$(CC) $(CUDA_CFLAGS) -c $< -o $@
# the runtime, its tensor-core instructions and its cp.async model: not instrumented
$(CUDA_EMU_BUILD)/emu_runtime.o $(CUDA_EMU_BUILD)/emu_mma.o $(CUDA_EMU_BUILD)/emu_async.o: $(CUDA_EMU_BUILD)/%.o: \
    tests/cuda/emu/%.cpp tests/cuda/emu/cuda_emu.h tests/cuda/emu/emu_mma.h tests/cuda/emu/emu_internal.h $(EMU_STAMP)
	@mkdir -p $(dir $@)
	$(EMU_CXX) -std=c++17 -O2 -g -Wall -Wextra -pthread -I. -c $< -o $@
$(CUDA_EMU_BUILD)/libflashgrad.a: $(EMU_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
# the emulated CUDA objects as a whole (--whole-archive: the CPU library reaches them through a weak
# symbol only), then the CPU library they stand on
$(CUDA_EMU_BUILD)/fg_cuda_tests_emu: $(EMU_TEST_OBJ) $(CUDA_EMU_BUILD)/libflashgrad.a $(EMU_RT_OBJ) $(CUDA_CPU_LIB)
	$(EMU_CXX) -o $@ $(EMU_TEST_OBJ) -Wl,--whole-archive $(CUDA_EMU_BUILD)/libflashgrad.a -Wl,--no-whole-archive \
	    $(EMU_RT_OBJ) $(CUDA_CPU_LIB) $(CUDA_BLAS_LIBS) $(PCRE2_LIBS) -lm -lpthread -ldl
# compiled with the instrumentation, linked without it (-fsanitize at link time would add the TSan
# runtime, which the emulator replaces)
# (after the rewritten copies of cuda/*.cuh, which -I$(CUDA_EMU_BUILD) puts first on the include path)
$(CUDA_EMU_BUILD)/%.o: tests/cuda/emu/%.cpp $(EMU_HDRS) $(EMU_CUH_GEN) $(wildcard cuda/*.cuh cuda/*.h ops/shared/*.h) \
    $(EMU_STAMP)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(filter-out -include tests/cuda/emu/cuda_emu.h,$(EMU_CXXFLAGS)) -c $< -o $@
$(CUDA_EMU_BUILD)/fg_flash_emu: $(CUDA_EMU_BUILD)/flash_emu.o $(CUDA_EMU_BUILD)/libflashgrad.a $(EMU_RT_OBJ) $(CUDA_CPU_LIB)
	$(EMU_CXX) -pthread -o $@ $(CUDA_EMU_BUILD)/flash_emu.o -Wl,--whole-archive $(CUDA_EMU_BUILD)/libflashgrad.a \
	    -Wl,--no-whole-archive $(EMU_RT_OBJ) $(CUDA_CPU_LIB) $(CUDA_BLAS_LIBS) $(PCRE2_LIBS) -lm -ldl
$(CUDA_EMU_BUILD)/bench/fg_cuda_bench.cpp: bench/fg_cuda_bench.cu tests/cuda/emu/rewrite_launches.py
	@mkdir -p $(dir $@)
	python3 tests/cuda/emu/rewrite_launches.py $< $@
$(CUDA_EMU_BUILD)/bench/fg_cuda_bench.o: $(CUDA_EMU_BUILD)/bench/fg_cuda_bench.cpp $(EMU_CUH_GEN) $(EMU_HDRS) $(EMU_STAMP)
	$(EMU_CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(CUDA_EMU_BUILD)/fg_cuda_bench_emu: $(CUDA_EMU_BUILD)/bench/fg_cuda_bench.o $(CUDA_EMU_BUILD)/libflashgrad.a $(EMU_RT_OBJ) $(CUDA_CPU_LIB)
	$(EMU_CXX) -pthread -o $@ $(CUDA_EMU_BUILD)/bench/fg_cuda_bench.o -Wl,--whole-archive $(CUDA_EMU_BUILD)/libflashgrad.a \
	    -Wl,--no-whole-archive $(EMU_RT_OBJ) $(CUDA_CPU_LIB) $(CUDA_BLAS_LIBS) $(PCRE2_LIBS) -lm -ldl
$(CUDA_EMU_BUILD)/fg_emu_detectors: $(CUDA_EMU_BUILD)/detectors.o $(EMU_RT_OBJ)
	$(EMU_CXX) -pthread -o $@ $^ -lm -ldl
$(CUDA_EMU_BUILD)/fg_mma_emu: $(CUDA_EMU_BUILD)/mma_emu.o $(EMU_RT_OBJ)
	$(EMU_CXX) -pthread -o $@ $^ -lm -ldl
$(CUDA_EMU_BUILD)/fg_attn_bf16_emu: $(CUDA_EMU_BUILD)/attn_bf16_emu.o $(CUDA_EMU_BUILD)/libflashgrad.a $(EMU_RT_OBJ) $(CUDA_CPU_LIB)
	$(EMU_CXX) -pthread -o $@ $(CUDA_EMU_BUILD)/attn_bf16_emu.o -Wl,--whole-archive $(CUDA_EMU_BUILD)/libflashgrad.a \
	    -Wl,--no-whole-archive $(EMU_RT_OBJ) $(CUDA_CPU_LIB) $(CUDA_BLAS_LIBS) $(PCRE2_LIBS) -lm -ldl

-include $(EMU_CU_OBJ:.o=.d)

# =================================================================================================
# bench — CPU speed: attention, the GPT's matmuls, training
# =================================================================================================
# `make bench` runs three benchmarks on $(BENCH_THREADS) threads. First float32 flash attention,
# forward + backward through autograd, B=4 H=4 d=64, N = $(BENCH_N), with and without the causal
# mask:
#   - against OpenBLAS sgemm on the same-shaped products (N x 64 by 64 x N, one per head), timed in
#     the same run by `flashgrad bench attention`, which prints flash's GFLOP/s as a % of sgemm's;
#   - when $(BENCH_PYTHON) has torch, against PyTorch's CPU attention (textbook formula with
#     autograd; scaled_dot_product_attention where the installed torch has it), side by side in
#     alternating runs by bench/attention_torch_cpu.py, which prints the speed-ups and a table.
# Then `flashgrad bench matmul`: the float32 products of a training step (the Tiny Shakespeare
# model's shapes) with each CPU matmul kernel. Then training: Tiny Shakespeare (n_layer 4, n_head 4,
# n_embd 128, block 64, batch 12) side by side with the same GPT in PyTorch, by
# bench/train_torch_cpu.py: tokens/s of each, their ratio, and the final validation losses.
# OPENBLAS_CORETYPE is used as the environment has it (the machine line names OpenBLAS's kernel).
# Reference figures: bench/results/attention_cpu.md. Timings on shared machines are noisy: compare
# the ratios of one run; BENCH_ROUNDS=3 alternates the two sides three times and takes medians.
BENCH_N            ?= 1024,2048,4096
BENCH_THREADS      ?= 2
BENCH_REPEAT       ?= 5
BENCH_TORCH_REPEAT ?= 3
BENCH_ROUNDS       ?= 1
BENCH_PYTHON       ?= /usr/bin/python3
bench: all
	@if $(BENCH_PYTHON) -c 'import torch' >/dev/null 2>&1; then \
	    $(BENCH_PYTHON) bench/attention_torch_cpu.py --flashgrad $(BUILD)/flashgrad --n $(BENCH_N) --b 4 --h 4 --d 64 \
	        --threads $(BENCH_THREADS) --repeat $(BENCH_REPEAT) --torch-repeat $(BENCH_TORCH_REPEAT) \
	        --rounds $(BENCH_ROUNDS); \
	else \
	    echo "bench: $(BENCH_PYTHON) has no torch: flashgrad against sgemm only"; \
	    $(BUILD)/flashgrad bench attention --impl flash --b 4 --h 4 --d 64 --n $(BENCH_N) \
	        --threads $(BENCH_THREADS) --repeat $(BENCH_REPEAT) && \
	    $(BUILD)/flashgrad bench attention --impl flash --b 4 --h 4 --d 64 --n $(BENCH_N) \
	        --threads $(BENCH_THREADS) --repeat $(BENCH_REPEAT) --causal; \
	fi
	@$(BUILD)/flashgrad bench matmul --threads $(BENCH_THREADS)
	@# training: Tiny Shakespeare, train's text defaults, side by side with the same GPT in PyTorch
	@# (bench/train_torch_cpu.py: same data, batches, initial weights and AdamW; tokens/s, ratio, val loss).
	@# Options pass through BENCH_TRAIN_ARGS, e.g. BENCH_TRAIN_ARGS='--steps 1000 --seeds 1,2,3'.
	@sh datasets/get_tinyshakespeare.sh datasets/tinyshakespeare.txt >/dev/null
	@if $(BENCH_PYTHON) -c 'import torch, numpy' >/dev/null 2>&1; then \
	    $(BENCH_PYTHON) bench/train_torch_cpu.py --flashgrad $(BUILD)/flashgrad --threads $(BENCH_THREADS) \
	        $(BENCH_TRAIN_ARGS); \
	else \
	    echo "bench: $(BENCH_PYTHON) has no torch (or numpy): flashgrad training speed only"; \
	    $(BUILD)/flashgrad bench train --data datasets/tinyshakespeare.txt --threads $(BENCH_THREADS) \
	        --warmup-steps 10 --steps 100; \
	fi

# ---- data parallelism: P = 1 (2 threads) against P = 2 (mpirun, 1 thread each) at L6 H6 C384 T256 B8:
# tokens/s and the communication time per step (bench/mpi_bench.sh; STEPS=4 ROUNDS=2 by default) ----
.PHONY: bench-mpi
bench-mpi: all
	@sh datasets/get_tinyshakespeare.sh datasets/tinyshakespeare.txt >/dev/null
	@sh bench/mpi_bench.sh
# ---- bench-scale: training speed from a toy GPT to GPT-2 small, flashgrad and PyTorch 2 ----
# bench/bench_scale.py trains L4 H4 C128 T64 B12, L6 H6 C384 T256 B8 and GPT-2 small (L12 H12 C768
# T1024 B1) for a few steps in each framework, vocabulary 65 (a synthetic text; GPT-2 small: 50304,
# synthetic tokens): median step ms, tokens/s, MFU against flashgrad's measured FMA peak, peak RSS.
# Rows to $(SCALE_CSV); the plot of MFU against model size (bench/results/train_scale.png) follows
# when gnuplot is there (make plots draws it later otherwise). The Python: FG_TORCH_PYTHON when set,
# else ../torch2/bin/python when present (a PyTorch 2 venv: python3 -m venv ../torch2 &&
# ../torch2/bin/pip install torch numpy), else
# python3 with whatever torch it has; without torch the script says so and measures flashgrad only.
# Options pass through BENCH_SCALE_ARGS, e.g. '--configs L6-C384 --repeat 3' or '--steps 5'.
SCALE_CSV    ?= bench/results/train_scale.csv
SCALE_PYTHON  = $(or $(FG_TORCH_PYTHON),$(wildcard ../torch2/bin/python),python3)
.PHONY: bench-scale
bench-scale: all
	$(SCALE_PYTHON) bench/bench_scale.py --flashgrad $(BUILD)/flashgrad --threads $(BENCH_THREADS) \
	    --csv $(SCALE_CSV) $(BENCH_SCALE_ARGS)
	sh bench/made_on.sh > $(SCALE_CSV).made
	@if command -v gnuplot >/dev/null 2>&1; then gnuplot bench/plots.gp && echo bench/results/train_scale.png; \
	else echo "bench-scale: no gnuplot here: make plots draws bench/results/train_scale.png"; fi

# ---- the recomputation study (docs/recomputation.md) ----
# make recompute-bench : the CSV files (attention naive vs flash over N, --recompute per setting, and
#                        bench recompute's trade-off at nanoGPT's L6 Shakespeare shape: CSV and PNG)
# make plots           : bench/results/{attention_memory,attention_time,train_recompute}.png from them
#                        (and train_scale.png from make bench-scale's CSV when it is there)
RECOMPUTE_N ?= 256,512,1024,2048,4096,8192,16384
RECOMPUTE_SDPA_N ?= 256,512,1024,2048
RECOMPUTE_L6 ?= --synthetic-vocab 65 --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 4 --dropout 0
.PHONY: recompute-bench
recompute-bench: all
	$(BUILD)/flashgrad bench attention --n $(RECOMPUTE_N) --d 64 --repeat 3 --csv bench/results/attention_cpu.csv
	sh bench/made_on.sh > bench/results/attention_cpu.csv.made
	$(BUILD)/flashgrad bench attention --n $(RECOMPUTE_N) --d 64 --repeat 3 --causal --csv bench/results/attention_cpu_causal.csv
	sh bench/recompute.sh --bin $(BUILD)/flashgrad
	sh bench/made_on.sh > bench/results/train_recompute.csv.made
	$(BUILD)/flashgrad bench recompute $(RECOMPUTE_L6) --steps 2 --warmup-steps 1 --pareto --sample 24 \
	    --csv bench/results/recompute_pareto_l6.csv --png bench/results/recompute_pareto_l6.png
	sh bench/made_on.sh > bench/results/recompute_pareto_l6.csv.made
	@# the SDPA line of attention_time.png (PyTorch at the same shapes), when $(SCALE_PYTHON) has torch
	-$(SCALE_PYTHON) bench/attention_torch_cpu.py --flashgrad $(BUILD)/flashgrad --n $(RECOMPUTE_SDPA_N) --b 1 --h 1 \
	    --d 64 --causal 0 --repeat 3 --csv bench/results/attention_torch_cpu.csv && \
	    sh bench/made_on.sh > bench/results/attention_torch_cpu.csv.made
# ---- generation speed: flashgrad's KV cache, flashgrad recomputing, nanoGPT's generate() in PyTorch,
# GPT-2 small's shape (random weights), greedy, in one run (bench/generate_torch_cpu.py) ----
BENCH_GEN_CASES ?= 1:64,960:16
.PHONY: bench-generate
bench-generate: all
	$(SCALE_PYTHON) bench/generate_torch_cpu.py --flashgrad $(BUILD)/flashgrad --threads $(BENCH_THREADS) \
	    --cases $(BENCH_GEN_CASES)

plots:
	@command -v gnuplot >/dev/null 2>&1 || sh tests/deps.sh gnuplot-nox
	gnuplot bench/plots.gp
	@ls -1 bench/results/*.png

# =================================================================================================
# shared library and Python package — make shared, make python-test   (this section only)
# =================================================================================================
# `make shared` builds $(BUILD)/libflashgrad.so: the static library's own objects (compiled with
# -fPIC) plus python/csrc/fgpy.c, the flat interface the Python package (python/flashgrad, ctypes)
# calls. With nvcc present it also builds $(CUDA_BUILD)/libflashgrad.so: those objects and the CUDA
# kernels (compiled again with -fPIC into $(CUDA_BUILD)/pic/; SHARED_CUDA=0 skips it).
# `make python-test` runs the pytest suite (tests/python/) with /usr/bin/python3 against that library
# (installing python3-numpy and python3-pytest when root, else skipping with one line); the torch
# tests run when $(FG_TORCH_PYTHON) names an interpreter with torch, numpy and pytest, or when
# /usr/bin/python3 has torch. `make test` runs it first (the prerequisite below).
PY_SHIM_SRC := python/csrc/fgpy.c
PIC_OBJ     := $(LIB_OBJ) $(PY_SHIM_SRC:%.c=$(BUILD)/%.o)
SHARED_CUDA ?= 1
FG_PYTHON   ?= /usr/bin/python3
FG_TORCH_PYTHON ?=
PYTEST_ARGS ?=

.PHONY: shared shared-cuda python-test
shared: deps
	@$(MAKE) --no-print-directory $(BUILD)/libflashgrad.so
	@if [ -n "$(NVCC)" ] && [ "$(SHARED_CUDA)" != 0 ]; then $(MAKE) --no-print-directory shared-cuda; fi

# The CUDA library alone, without the dependency check (bench/gpu_check.sh builds it on the GPU machine).
shared-cuda:
	@$(MAKE) --no-print-directory BUILD=$(CUDA_CPU_BUILD) $(CUDA_CPU_FLAGS) $(filter $(CUDA_CPU_BUILD)/%,$(CUDA_PIC_OBJ))
	@$(MAKE) --no-print-directory $(CUDA_BUILD)/libflashgrad.so

$(BUILD)/libflashgrad.so: $(PIC_OBJ)
	$(CC) $(CFLAGS) -shared -Wl,--no-undefined -Wl,-soname,libflashgrad.so -o $@ $^ $(LDLIBS)

CUDA_PIC_OBJ := $(patsubst %.c,$(CUDA_CPU_BUILD)/%.o,$(LIB_SRC) $(if $(CUDA_CPU_FLAGS),ops/cpu/compat/cblas_fallback.c) $(PY_SHIM_SRC)) \
                $(CUDA_CU_SRC:%.cu=$(CUDA_BUILD)/pic/%.o)
$(CUDA_BUILD)/pic/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -MMD -MP -c $< -o $@
$(CUDA_BUILD)/libflashgrad.so: $(CUDA_PIC_OBJ)
	$(NVCC) -arch=sm_$(CUDA_ARCH) -shared -Xlinker -soname=libflashgrad.so -o $@ $^ $(CUDA_LDLIBS)

# The Python tests (tests/python/run_pytest.sh says which interpreter runs which tests). A
# `make test TEST_ARGS=...` that picks Criterion suites leaves them out. (Under `make test` the
# dependency check is deps-test, the one `test` makes, so that two checks never run apt-get at once.)
python-test: $(if $(filter test,$(MAKECMDGOALS)),deps-test,deps)
	@$(MAKE) --no-print-directory $(BUILD)/libflashgrad.so $(BUILD)/flashgrad
	@rm -f $(SKIP_LOG_PY)
	@FG_PYTHON="$(FG_PYTHON)" FG_TORCH_PYTHON="$(FG_TORCH_PYTHON)" FLASHGRAD_LIB=$(abspath $(BUILD))/libflashgrad.so \
	    FG_BIN=$(abspath $(BUILD))/flashgrad FG_SKIP_LOG=$(SKIP_LOG_PY) sh tests/python/run_pytest.sh $(PYTEST_ARGS); \
	    st=$$?; $(if $(filter test,$(MAKECMDGOALS)),,sh tests/skip_summary.sh $(SKIP_LOG_PY);) exit $$st

test: $(if $(TEST_ARGS),,python-test)

-include $(PIC_OBJ:.o=.d)
