# flashgrad — build, test, train.
#
#   make            build/libflashgrad.a and build/flashgrad (CPU)
#   make test       build and run every test (Criterion)
#   make sanitize   the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make train      train the default small GPT on the synthetic addition task
#   make cuda       the CUDA build (nvcc, -arch=sm_$(CUDA_ARCH)) when nvcc is present
#
# Every .c file under tensor/ autograd/ ops/ datasets/ train/ (except train/main.c) goes into the
# library; every tests/*.c into one Criterion test runner. Adding a file needs no edit here.

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2 -march=x86-64-v2 -mtune=native
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -g $(OPT) -I. -pthread
DEPS_PKGS := libcriterion-dev libopenblas-dev pkg-config

# ---- dependencies: install what is missing (root), else stop with one line naming it ----
HAVE_PKGCONFIG := $(shell command -v pkg-config >/dev/null 2>&1 && echo yes)
deps_missing = $(strip $(if $(HAVE_PKGCONFIG),,pkg-config) \
    $(if $(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h /usr/include/openblas/cblas.h /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h),,libopenblas-dev) \
    $(if $(wildcard /usr/include/criterion/criterion.h),,$(if $(NEED_CRITERION),libcriterion-dev)))

BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
LDLIBS      += $(BLAS_LIBS) -lm -pthread
CFLAGS      += $(BLAS_CFLAGS)

LIB_DIRS := tensor autograd ops datasets train
LIB_SRC  := $(filter-out train/main.c,$(wildcard $(addsuffix /*.c,$(LIB_DIRS))))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

.PHONY: all deps deps-test test sanitize train train-shakespeare clean cuda gpu-check bench plots fuzz valgrind
all: deps
	@$(MAKE) --no-print-directory $(BUILD)/libflashgrad.a $(BUILD)/flashgrad

deps:
	@missing="$(deps_missing)"; sh tests/deps.sh $$missing
deps-test:
	@$(MAKE) --no-print-directory deps NEED_CRITERION=1

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libflashgrad.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/flashgrad: $(BUILD)/train/main.o $(BUILD)/libflashgrad.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/test_runner: $(TEST_OBJ) $(BUILD)/libflashgrad.a
	$(CC) $(CFLAGS) -o $@ $^ -lcriterion $(LDLIBS)

# The README's test command. Tests find the CLI at build/flashgrad and shared data at ../shared.
test: deps-test
	@$(MAKE) --no-print-directory $(BUILD)/test_runner $(BUILD)/flashgrad
	OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-2} FG_BIN=$(abspath $(BUILD))/flashgrad $(BUILD)/test_runner $(TEST_ARGS)

sanitize: deps-test
	@$(MAKE) --no-print-directory BUILD=build-san OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined" build-san/test_runner build-san/flashgrad
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    FG_SANITIZE=1 FG_BIN=$(abspath build-san)/flashgrad build-san/test_runner --jobs 1 $(TEST_ARGS)

train: all
	$(BUILD)/flashgrad train --task addition --out runs/addition

train-shakespeare: all
	sh datasets/get_tinyshakespeare.sh datasets/tinyshakespeare.txt
	$(BUILD)/flashgrad train --data datasets/tinyshakespeare.txt --out runs/shakespeare \
	    --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --steps 2000 \
	    --lr 1e-3 --min-lr 1e-4 --warmup 100 --dropout 0 --weight-decay 0.1 --beta2 0.99 --grad-clip 1.0

clean:
	rm -rf build build-san build-cuda

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/train/main.d
