#!/bin/sh
# run.sh — builds bench/json_libs/compare.c (flashgrad's safetensors reader against jansson, cJSON and
# json-c) and runs it over the fuzz corpus and regressions, plus FUZZ_CORPUS (a folder that
# `make fuzz` grew, build-fuzz/corpus-safetensors by default) when it is there. Needs
# libjansson-dev libcjson-dev libjson-c-dev (installed when root). Not part of any make target.
cd "$(dirname "$0")/../.." || exit 1
sh tests/deps.sh $(for p in jansson:libjansson-dev libcjson:libcjson-dev json-c:libjson-c-dev; do
    pkg-config --exists "${p%%:*}" 2>/dev/null || echo "${p#*:}"; done) || exit 1
mkdir -p build
cc -std=c11 -D_GNU_SOURCE -O2 -I. -o build/json_libs_compare bench/json_libs/compare.c bench/json_libs/compare_jsonc.c tensor/*.c \
    $(pkg-config --cflags --libs jansson libcjson json-c) -lm -pthread || exit 1
build/json_libs_compare tests/fuzz/corpus/safetensors tests/fuzz/regressions/safetensors \
    ${FUZZ_CORPUS:-build-fuzz/corpus-safetensors}
