# pagedllm: nginx module + engine + kernels.
#   make            build everything (installs missing Debian packages)
#   make run        start engine + nginx on 127.0.0.1:8080 with the tiny model
#   make test       build and run every test (prove)
#   make bench      serving benchmark: engine + nginx under pagedllm-load
#   make CUDA=0     build without the CUDA backend
#   make BUILD=dir  build into another folder
#   make NCCL_HOME=dir  use the NCCL in dir (else the one the compiler finds)

BUILD    ?= build
CC       ?= gcc
NVCC     ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA     ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(abspath $(dir $(NVCC))/..)
# sm_90a: Hopper's own cubin (wgmma, setmaxnreg); it runs on compute
# capability 9.0 only, which is all sm_90 code ever ran on.  PTX for the rest.
CUDA_ARCH ?= -gencode arch=compute_90a,code=sm_90a \
             -gencode arch=compute_90,code=compute_90

CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -fopenmp \
            -Iproto -Itext -Ikernels -Iengine
KCFLAGS  := -O3 -march=native
LDLIBS   := -ljansson -lm -pthread -fopenmp
NVFLAGS  := -O3 -std=c++17 $(CUDA_ARCH) -Iproto -Ikernels -Iengine \
            -Xcompiler -fPIC,-Wall

PROTO_SRCS  := $(wildcard proto/*.c)
TEXT_SRCS   := $(wildcard text/*.c)
KERNEL_SRCS := $(wildcard kernels/*.c kernels/cpu/*.c)
ENGINE_SRCS := $(filter-out engine/main.c,$(wildcard engine/*.c))
CUDA_SRCS   := $(wildcard kernels/*.cu)

ifeq ($(CUDA),1)
KERNEL_SRCS := $(filter-out kernels/nocuda.c,$(KERNEL_SRCS))
LDLIBS      += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
               -lcublas -lcudart -lstdc++
CFLAGS      += -DPL_HAVE_CUDA=1
# NCCL: Debian's or the toolkit's (found by its header), or NCCL_HOME=DIR
# for a copy with DIR/include/nccl.h and DIR/lib/libnccl.so.2 (pip's)
ifneq ($(NCCL_HOME),)
NVFLAGS     += -DPL_HAVE_NCCL=1 -I$(NCCL_HOME)/include
LDLIBS      += -L$(NCCL_HOME)/lib -Wl,-rpath,$(NCCL_HOME)/lib -l:libnccl.so.2
else ifneq ($(shell printf '\#include <nccl.h>\n' \
                | $(CC) -E -I$(CUDA_HOME)/include -x c - >/dev/null 2>&1 \
                && echo 1),)
NVFLAGS     += -DPL_HAVE_NCCL=1
LDLIBS      += -lnccl
endif
else
CUDA_SRCS   :=
endif

# the engine's library: protocol, kernels, engine.  The text stack
# (tokenizer, templates) is the nginx module's; programs that use it link
# libpltext.a.
LIB_OBJS := $(PROTO_SRCS:%.c=$(BUILD)/obj/%.o) \
            $(KERNEL_SRCS:%.c=$(BUILD)/obj/%.o) \
            $(ENGINE_SRCS:%.c=$(BUILD)/obj/%.o) \
            $(CUDA_SRCS:%.cu=$(BUILD)/obj/%.cu.o)
TEXT_OBJS := $(TEXT_SRCS:%.c=$(BUILD)/obj/%.o)
HEADERS  := $(wildcard proto/*.h text/*.h kernels/*.h kernels/*.cuh engine/*.h)

TOOLS    := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/*.c))
UNITS    := $(patsubst t/unit/%.c,$(BUILD)/t/%.t,$(wildcard t/unit/*.c))
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
MODULE   := $(BUILD)/ngx_http_pagedllm_module.so
ENGINE   := $(BUILD)/pagedllm-engine
TINY     := $(BUILD)/models/tiny/model.safetensors
LIB      := $(BUILD)/libpagedllm.a
TEXTLIB  := $(BUILD)/libpltext.a
# the programs that use the text stack and nothing of the engine's library
TEXT_PROGS := $(BUILD)/pagedllm-tokenize $(BUILD)/bench/tokenizer \
              $(patsubst t/unit/%.c,$(BUILD)/t/%.t,$(wildcard t/unit/tokenizer*.c))

.PHONY: all deps test-deps engine module model tools units run test bench \
        clean

all: deps engine module model tools $(BENCHES)

deps: $(BUILD)/.deps
$(BUILD)/.deps: tools/install-deps.sh
	@mkdir -p $(BUILD)
	@sh tools/install-deps.sh
	@touch $@

test-deps: deps
	@sh tools/install-deps.sh --test

engine: $(ENGINE)
module: $(MODULE)
model: $(TINY)
tools: $(TOOLS)
units: $(UNITS)

$(BUILD)/obj/kernels/cpu/%.o: kernels/cpu/%.c $(HEADERS) | $(BUILD)/.deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(KCFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.c $(HEADERS) | $(BUILD)/.deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(TEXTLIB): $(TEXT_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(ENGINE): $(BUILD)/obj/engine/main.o $(LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# each program links the archives it is given below ($(filter %.a,$^))
$(filter-out $(TEXT_PROGS),$(TOOLS) $(UNITS) $(BENCHES)): $(LIB)
$(TEXT_PROGS): $(TEXTLIB)

$(BUILD)/%: tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(filter %.a,$^) $(LDLIBS)

$(BUILD)/t/%.t: t/unit/%.c $(wildcard t/unit/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -It/unit -o $@ $< $(filter %.a,$^) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(filter %.a,$^) $(LDLIBS)

$(MODULE): config $(wildcard ngx_http_pagedllm_module/*.[ch]) \
           $(wildcard proto/*.[ch] text/*.[ch]) tools/build-module.sh \
           | $(BUILD)/.deps
	tools/build-module.sh $(BUILD)

$(TINY): $(BUILD)/mktinymodel
	$(BUILD)/mktinymodel $(BUILD)/models/tiny

run: all
	tools/run.sh $(BUILD)

test: all test-deps units
	PAGEDLLM_BUILD=$(abspath $(BUILD)) prove -j2 $(UNITS) $(wildcard t/*.t)

bench: all $(BENCHES)
	bench/serve.sh $(BUILD)

clean:
	rm -rf $(BUILD)

# GPU tests and kernel benchmarks: run on a machine with an NVIDIA GPU
# (tools/gpu-run.sh runs both on the lent one).
GPU_TESTS   := $(patsubst t/gpu/%.c,$(BUILD)/t/gpu/%.t,$(wildcard t/gpu/*.c))
GPU_BENCHES := $(patsubst bench/gpu/%.c,$(BUILD)/bench/gpu/%,\
                 $(wildcard bench/gpu/*.c))

.PHONY: test-gpu bench-gpu

$(BUILD)/t/gpu/%.t: t/gpu/%.c $(wildcard t/gpu/*.h) t/unit/tap.h \
                    $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -It/unit -It/gpu -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/bench/gpu/%: bench/gpu/%.c $(wildcard bench/gpu/*.h) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< $(LIB) \
	    $(LDLIBS)

# bench/gpu/attention with the decode kernel's phase trace built in
# (kernels/decode_attention.cu, PL_DEC_TRACE): its object comes before the
# library, so the library's untraced one is not linked
$(BUILD)/obj/trace/decode_attention.cu.o: kernels/decode_attention.cu $(HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -DPL_DEC_TRACE=1 -c $< -o $@

$(BUILD)/bench/gpu/attention-trace: bench/gpu/attention.c \
        $(wildcard bench/gpu/*.h) $(BUILD)/obj/trace/decode_attention.cu.o \
        $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< \
	    $(BUILD)/obj/trace/decode_attention.cu.o $(LIB) \
	    $(LDLIBS)

# no GPU in CI, but it compiles every program that runs on one
ifeq ($(CUDA),1)
GPU_BENCHES += $(BUILD)/bench/gpu/attention-trace
all: $(GPU_TESTS) $(GPU_BENCHES)
endif

test-gpu: $(GPU_TESTS) $(if $(wildcard tools/mktinymodel.c),$(TINY))
	PAGEDLLM_BUILD=$(abspath $(BUILD)) prove -v $(GPU_TESTS)

bench-gpu: $(GPU_BENCHES)
	$(BUILD)/bench/gpu/attention
	PAGEDLLM_BENCH_BLOCKS=engine $(BUILD)/bench/gpu/attention decode
	python3 bench/gpu/attention_torch.py
	$(BUILD)/bench/gpu/gemv
