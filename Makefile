# pagedllm: nginx module + engine + kernels.
#   make            build everything (installs missing Debian packages);
#                   one job per core unless -jN is given (or JOBS=N)
#   make run        start engine + nginx on 127.0.0.1:8080 with models/kjv-small
#   make test       build and run every test (prove), then every fuzzer
#                   for TEST_FUZZ_SECONDS (30) from its seed corpus, then
#                   make test-sanitize (TEST_SANITIZE=0 leaves it out)
#   make test-sanitize  every test again, with nginx, the module, the engine,
#                   tools and unit tests built with ASan + UBSan (clang)
#   make fuzz SECONDS=N  every libFuzzer target (t/fuzz/) for N seconds
#   make bench      serving benchmark: engine + nginx under pagedllm-load
#   make install    programs, module, tiny model, systemd units (PREFIX,
#                   DESTDIR; see the README's Installing)
#   make CUDA=0     build without the CUDA backend
#   make BUILD=dir  build into another folder
#   make NCCL_HOME=dir  use the NCCL in dir (else the one the compiler finds)
#   make CFLAGS='-O0 -g'  replaces the optimisation and debug flags only
#                   (likewise KCFLAGS, NVFLAGS; LDFLAGS, LDLIBS are added):
#                   warnings, -std and include paths (PL_*) always apply

BUILD    ?= build
CC       ?= gcc
NVCC     ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA     ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(abspath $(dir $(NVCC))/..)
# sm_90a: Hopper's own cubin (wgmma, setmaxnreg); it runs on compute
# capability 9.0 only, which is all sm_90 code ever ran on.  PTX for the rest.
CUDA_ARCH ?= -gencode arch=compute_90a,code=sm_90a \
             -gencode arch=compute_90,code=compute_90

JOBS     ?= $(shell nproc 2>/dev/null || echo 1)
MAKEFLAGS += -j$(JOBS)

# optimisation and debug: the command line's replace these ...
CFLAGS   ?= -O2 -g
KCFLAGS  := -O3 -march=native
NVFLAGS  := -O3
# ... and the flags the code needs, always there
PL_CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -fopenmp \
              -Iproto -Itext -Ikernels -Iengine -Igrammar
PL_NVFLAGS := -std=c++17 $(CUDA_ARCH) -Iproto -Ikernels -Iengine \
              -Xcompiler -fPIC,-Wall
PL_LDLIBS  := -ljansson -lm -pthread -fopenmp
# each object's and program's own header list ($@.d), so a header change
# rebuilds only what includes it
DEPFLAGS    = -MMD -MP -MF $(@:.o=.d)

PROTO_SRCS  := $(wildcard proto/*.c)
TEXT_SRCS   := $(wildcard text/*.c)
KERNEL_SRCS := $(wildcard kernels/*.c kernels/cpu/*.c)
ENGINE_SRCS := $(filter-out engine/main.c,$(wildcard engine/*.c))
GRAMMAR_SRCS := $(wildcard grammar/*.c)
CUDA_SRCS   := $(wildcard kernels/*.cu)

ifeq ($(CUDA),1)
KERNEL_SRCS := $(filter-out kernels/nocuda.c,$(KERNEL_SRCS))
PL_LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
               -lcublas -lcudart -lstdc++
PL_CFLAGS   += -DPL_HAVE_CUDA=1
# NCCL: Debian's or the toolkit's (found by its header), or NCCL_HOME=DIR
# for a copy with DIR/include/nccl.h and DIR/lib/libnccl.so.2 (pip's)
ifneq ($(NCCL_HOME),)
PL_NVFLAGS  += -DPL_HAVE_NCCL=1 -I$(NCCL_HOME)/include
PL_LDLIBS   += -L$(NCCL_HOME)/lib -Wl,-rpath,$(NCCL_HOME)/lib -l:libnccl.so.2
else ifneq ($(shell printf '\#include <nccl.h>\n' \
                | $(CC) -E -I$(CUDA_HOME)/include -x c - >/dev/null 2>&1 \
                && echo 1),)
PL_NVFLAGS  += -DPL_HAVE_NCCL=1
PL_LDLIBS   += -lnccl
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
            $(GRAMMAR_SRCS:%.c=$(BUILD)/obj/%.o) \
            $(CUDA_SRCS:%.cu=$(BUILD)/obj/%.cu.o)
TEXT_OBJS := $(TEXT_SRCS:%.c=$(BUILD)/obj/%.o)

TOOLS    := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/*.c))
UNITS    := $(patsubst t/unit/%.c,$(BUILD)/t/%.t,$(wildcard t/unit/*.c))
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
MODULE   := $(BUILD)/ngx_http_pagedllm_module.so
ENGINE   := $(BUILD)/pagedllm-engine
TINY     := $(BUILD)/models/tiny/model.safetensors
LIB      := $(BUILD)/libpagedllm.a
TEXTLIB  := $(BUILD)/libpltext.a

.PHONY: all deps test-deps engine module model tools units run test bench \
        clean install

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

$(BUILD)/obj/kernels/cpu/%.o: kernels/cpu/%.c | $(BUILD)/.deps
	@mkdir -p $(dir $@)
	$(CC) $(PL_CFLAGS) $(CFLAGS) $(KCFLAGS) $(DEPFLAGS) -c $< -o $@

# A beam's row pass (engine/beam.c) gets -fno-trapping-math: without it
# gcc will not if-convert its exponential's clamp and so not vectorize it.
# The flag changes no result (nothing here reads the FP exception flags).
$(BUILD)/obj/engine/beam.o: engine/beam.c | $(BUILD)/.deps
	@mkdir -p $(dir $@)
	$(CC) $(PL_CFLAGS) $(CFLAGS) -fno-trapping-math $(DEPFLAGS) \
	    -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(BUILD)/.deps
	@mkdir -p $(dir $@)
	$(CC) $(PL_CFLAGS) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(PL_NVFLAGS) $(NVFLAGS) $(DEPFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(TEXTLIB): $(TEXT_OBJS)
	@rm -f $@
	ar rcs $@ $^

# Links program $@ from $< (and $(1), more objects or flags) against the
# archives among its prerequisites.  A program depends on the archive
# members the linker took (its link map, written to $@.ld as a rule), not
# on the archives: touching one source relinks only the programs that
# contain its object.
define link
@mkdir -p $(dir $@)
$(CC) $(PL_CFLAGS) $(CFLAGS) -MMD -MP -MF $@.d -MT $@ -o $@ $< $(1) \
    $(filter %.a,$^ $|) $(LDFLAGS) $(PL_LDLIBS) $(LDLIBS) -Wl,-Map=$@.map
@{ printf '%s: $$(filter ' '$@'; \
   sed -n 's,^[^ ]*/lib\(pagedllm\|pltext\)\.a(\([^)]*\)).*, %/\2,p' \
       $@.map | sort -u | tr -d '\n'; \
   printf ',$$(LIB_OBJS) $$(TEXT_OBJS))\n'; } >$@.ld && rm -f $@.map
endef

$(ENGINE): $(BUILD)/obj/engine/main.o | $(LIB)
	$(call link)

$(BUILD)/%: tools/%.c | $(LIB) $(TEXTLIB)
	$(call link)

$(BUILD)/t/%.t: t/unit/%.c | $(LIB) $(TEXTLIB)
	$(call link,-It/unit)

$(BUILD)/bench/%: bench/%.c | $(LIB) $(TEXTLIB)
	$(call link)

# pagedllm-load's parts (bench/load/), linked by it and its unit tests
LOAD_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard bench/load/*.c))
$(BUILD)/bench/pagedllm-load: bench/pagedllm-load.c $(LOAD_OBJS) \
        | $(LIB) $(TEXTLIB)
	$(call link,$(LOAD_OBJS))

$(BUILD)/t/load_%.t: t/unit/load_%.c $(LOAD_OBJS) | $(LIB) $(TEXTLIB)
	$(call link,-It/unit -Ibench $(LOAD_OBJS))

$(MODULE): config $(wildcard ngx_http_pagedllm_module/*.[ch]) \
           $(wildcard proto/*.[ch] text/*.[ch] grammar/*.[ch]) \
           tools/build-module.sh ui/index.html tools/embed-ui.sh \
           | $(BUILD)/.deps
	+tools/build-module.sh $(BUILD)

$(TINY): $(BUILD)/mktinymodel
	$(BUILD)/mktinymodel $(BUILD)/models/tiny

run: all
	tools/run.sh $(BUILD)

TEST_FUZZ_SECONDS ?= 30
TEST_SANITIZE     ?= 1

test: all test-deps units
	PAGEDLLM_BUILD=$(abspath $(BUILD)) prove -j2 $(UNITS) $(wildcard t/*.t)
	$(MAKE) fuzz SECONDS=$(TEST_FUZZ_SECONDS)
	$(if $(filter 1,$(TEST_SANITIZE)),$(MAKE) test-sanitize)

bench: all $(BENCHES)
	bench/serve.sh $(BUILD)

clean:
	rm -rf $(BUILD)

# make install: the programs, the tiny model and the docs under PREFIX;
# the module where Debian's nginx loads modules from, with the
# load_module snippet Debian's module packages ship (modules-available,
# enabled by a link in modules-enabled); the engine's systemd unit and
# nginx's drop-in.  DESTDIR stages all of it.
PREFIX        ?= /usr/local
BINDIR        ?= $(PREFIX)/bin
DATADIR       ?= $(PREFIX)/share/pagedllm
DOCDIR        ?= $(PREFIX)/share/doc/pagedllm
UNITDIR       ?= $(PREFIX)/lib/systemd/system
NGINX_MODDIR  ?= /usr/lib/nginx/modules
NGINX_AVAIL   ?= /usr/share/nginx/modules-available
NGINX_ENABLED ?= /etc/nginx/modules-enabled
INSTALL_BINS  := $(ENGINE) $(BUILD)/pagedllm-tokenize $(BUILD)/pagedllm-sim \
                 $(BUILD)/bench/pagedllm-load
# the model make run serves, what a server needs of it and its model card
# (its training logs and goldens stay in the source tree)
INSTALL_MODEL := $(addprefix models/kjv-small/,config.json \
                   generation_config.json model.safetensors tokenizer.json \
                   tokenizer_config.json README.md)

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(NGINX_MODDIR) \
	    $(DESTDIR)$(NGINX_AVAIL) $(DESTDIR)$(NGINX_ENABLED) \
	    $(DESTDIR)$(DATADIR)/models/kjv-small $(DESTDIR)$(DOCDIR) \
	    $(DESTDIR)$(UNITDIR)/nginx.service.d
	install -m 755 $(INSTALL_BINS) $(DESTDIR)$(BINDIR)
	install -m 644 $(MODULE) $(DESTDIR)$(NGINX_MODDIR)
	install -m 644 packaging/nginx/mod-http-pagedllm.conf \
	    $(DESTDIR)$(NGINX_AVAIL)
	ln -sf $(NGINX_AVAIL)/mod-http-pagedllm.conf \
	    $(DESTDIR)$(NGINX_ENABLED)/50-mod-http-pagedllm.conf
	install -m 644 $(INSTALL_MODEL) $(DESTDIR)$(DATADIR)/models/kjv-small
	install -m 644 packaging/nginx/pagedllm.conf \
	    $(DESTDIR)$(DATADIR)/nginx-pagedllm.conf
	install -m 644 README.md $(DESTDIR)$(DOCDIR)
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@DATADIR@|$(DATADIR)|g' \
	    -e 's|@DOCDIR@|$(DOCDIR)|g' packaging/systemd/pagedllm-engine.service.in \
	    >$(DESTDIR)$(UNITDIR)/pagedllm-engine.service
	chmod 644 $(DESTDIR)$(UNITDIR)/pagedllm-engine.service
	install -m 644 packaging/systemd/nginx.service.d/pagedllm.conf \
	    $(DESTDIR)$(UNITDIR)/nginx.service.d

# GPU tests and kernel benchmarks: run on a machine with an NVIDIA GPU
# (tools/gpu-run.sh runs both on the lent one).
GPU_TESTS   := $(patsubst t/gpu/%.c,$(BUILD)/t/gpu/%.t,$(wildcard t/gpu/*.c))
GPU_BENCHES := $(patsubst bench/gpu/%.c,$(BUILD)/bench/gpu/%,\
                 $(wildcard bench/gpu/*.c))

.PHONY: test-gpu bench-gpu

$(BUILD)/t/gpu/%.t: t/gpu/%.c | $(LIB) $(TEXTLIB)
	$(call link,-It/unit -It/gpu)

$(BUILD)/bench/gpu/%: bench/gpu/%.c | $(LIB) $(TEXTLIB)
	$(call link,-I$(CUDA_HOME)/include)

# bench/gpu/attention with the decode kernel's phase trace built in
# (kernels/decode_attention.cu, PL_DEC_TRACE), for make bench-gpu only: its
# object comes before the library, so the library's untraced one is not
# linked
TRACE_BENCH := $(BUILD)/bench/gpu/attention-trace
$(BUILD)/obj/trace/decode_attention.cu.o: kernels/decode_attention.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(PL_NVFLAGS) $(NVFLAGS) $(DEPFLAGS) -DPL_DEC_TRACE=1 -c $< -o $@

$(TRACE_BENCH): bench/gpu/attention.c \
        $(BUILD)/obj/trace/decode_attention.cu.o | $(LIB) $(TEXTLIB)
	$(call link,-I$(CUDA_HOME)/include \
	    $(BUILD)/obj/trace/decode_attention.cu.o)

# no GPU in CI, but it compiles every CUDA file and every program that runs
# on one
ifeq ($(CUDA),1)
all: $(GPU_TESTS) $(GPU_BENCHES)
endif

test-gpu: $(GPU_TESTS) $(ENGINE) $(if $(wildcard tools/mktinymodel.c),$(TINY))
	PAGEDLLM_BUILD=$(abspath $(BUILD)) prove -v $(GPU_TESTS)

bench-gpu: $(GPU_BENCHES) $(TRACE_BENCH)
	$(BUILD)/bench/gpu/attention
	PAGEDLLM_BENCH_BLOCKS=engine $(BUILD)/bench/gpu/attention decode
	python3 bench/gpu/attention_torch.py
	$(BUILD)/bench/gpu/gemv

PROGRAMS := $(ENGINE) $(TOOLS) $(UNITS) $(BENCHES) $(GPU_TESTS) \
            $(GPU_BENCHES) $(TRACE_BENCH)
OBJECTS  := $(LIB_OBJS) $(TEXT_OBJS) $(LOAD_OBJS) $(BUILD)/obj/engine/main.o \
            $(BUILD)/obj/trace/decode_attention.cu.o
# an object without its .d, or a program without its .ld (both built by a
# Makefile that wrote none), depends on every header and on the archives
# whole until it is built again
HEADERS  := $(wildcard proto/*.h text/*.h kernels/*.h kernels/*.cuh \
                       engine/*.h t/unit/*.h t/gpu/*.h bench/gpu/*.h)
UNTRACKED := $(filter-out $(patsubst %.d,%.o,$(wildcard $(OBJECTS:.o=.d))),\
                          $(OBJECTS))
UNMAPPED  := $(filter-out $(patsubst %.ld,%,$(wildcard $(PROGRAMS:=.ld))),\
                          $(PROGRAMS))
ifneq ($(UNTRACKED),)
$(UNTRACKED): $(HEADERS)
endif
ifneq ($(UNMAPPED),)
$(UNMAPPED): $(HEADERS) $(LIB) $(TEXTLIB)
endif
-include $(OBJECTS:.o=.d) $(PROGRAMS:=.d) $(PROGRAMS:=.ld)

# Fuzzing (libFuzzer, clang from Debian): each t/fuzz/NAME_fuzz.c is a
# target built with AddressSanitizer and UBSan (which aborts on its first
# report) against a library of the sources compiled the same way.
#   make fuzz SECONDS=N     every target for N seconds (default 60), one
#                           after another, from its seed corpus
#                           t/fuzz/corpus/NAME/; new inputs go to
#                           $(BUILD)/fuzz/corpus/NAME, crashes to
#                           $(BUILD)/fuzz/crash-NAME-*
#   make fuzz-NAME SECONDS=N  one target
FUZZ_CC     ?= clang
SECONDS     ?= 60
FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=undefined
# -Wno-pass-failed: at -O1 clang declines to vectorize the kernels'
# "omp simd" loops and says so
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread \
               -fopenmp -Iproto -Itext -Ikernels -Iengine -Igrammar -g -O1 \
               $(FUZZ_SAN) -Wno-pass-failed
FUZZ_SRCS   := $(PROTO_SRCS) $(TEXT_SRCS) $(ENGINE_SRCS) $(GRAMMAR_SRCS) \
               $(wildcard kernels/*.c kernels/cpu/*.c)
FUZZ_OBJS   := $(FUZZ_SRCS:%.c=$(BUILD)/fuzz/obj/%.o)
FUZZ_LIB    := $(BUILD)/fuzz/libpagedllm-fuzz.a
FUZZ_NAMES  := $(patsubst t/fuzz/%_fuzz.c,%,$(wildcard t/fuzz/*_fuzz.c))
FUZZERS     := $(FUZZ_NAMES:%=$(BUILD)/fuzz/%)

.PHONY: fuzz fuzzers $(FUZZ_NAMES:%=fuzz-%)

fuzzers: $(FUZZERS)

$(BUILD)/fuzz/obj/%.o: %.c | $(BUILD)/.deps $(BUILD)/.fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(DEPFLAGS) \
	    -c $< -o $@

$(BUILD)/.fuzz-deps: tools/install-deps.sh
	@mkdir -p $(BUILD)
	@sh tools/install-deps.sh --fuzz
	@touch $@

$(FUZZ_LIB): $(FUZZ_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/fuzz/%: t/fuzz/%_fuzz.c $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -MMD -MP -MF $@.d -o $@ \
	    $< $(FUZZ_LIB) -ljansson -lm

# request: the module's request parser without a server, against nginx's
# core objects from the sanitized nginx build (below) and the tiny model's
# tokenizer
SAN_BUILD   ?= $(BUILD)-sanitize
SAN_NGINX   := $(SAN_BUILD)/nginx-asan/nginx
NGX_TREE    := $(SAN_BUILD)/nginx-asan/src
NGX_INCS    := $(addprefix -I$(NGX_TREE)/,src/core src/event \
                 src/event/modules src/os/unix src/http src/http/modules \
                 src/http/v2 objs) -Ingx_http_pagedllm_module
MODULE_SRCS := $(wildcard ngx_http_pagedllm_module/*.c)
FUZZ_MODULE := $(BUILD)/fuzz/libngx-pagedllm-fuzz.a
FUZZ_NGX    := $(BUILD)/fuzz/libngx-core.a

# the sanitized nginx tree, built once; make test-sanitize keeps it current
$(SAN_NGINX):
	tools/build-nginx-sanitized.sh $(SAN_BUILD)

# the playground page the module compiles in, as config makes it
FUZZ_UI     := $(BUILD)/fuzz/ui/ngx_http_pagedllm_ui_page.h
$(FUZZ_UI): ui/index.html tools/embed-ui.sh
	sh tools/embed-ui.sh ui/index.html $@

# nginx's own warning flags for its headers
$(BUILD)/fuzz/ngx/%.o: ngx_http_pagedllm_module/%.c \
        | $(BUILD)/.fuzz-deps $(SAN_NGINX) $(FUZZ_UI)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -W -Wall -Wpointer-arith -Wno-unused-parameter -Werror \
	    -g -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link -Iproto -Itext \
	    -Igrammar -I$(dir $(FUZZ_UI)) $(NGX_INCS) $(DEPFLAGS) -c $< -o $@

$(FUZZ_MODULE): $(MODULE_SRCS:ngx_http_pagedllm_module/%.c=$(BUILD)/fuzz/ngx/%.o)
	@rm -f $@
	ar rcs $@ $^

# every core and OS object but main's; the linker takes what the parser
# calls
$(FUZZ_NGX): | $(SAN_NGINX)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $(filter-out %/nginx.o,$(wildcard \
	    $(NGX_TREE)/objs/src/core/*.o $(NGX_TREE)/objs/src/os/unix/*.o))

$(BUILD)/fuzz/request: t/fuzz/request_fuzz.c $(FUZZ_MODULE) $(FUZZ_NGX) \
        $(FUZZ_LIB)
	$(FUZZ_CC) -W -Wall -Wpointer-arith -Wno-unused-parameter -Werror \
	    -g -O1 $(FUZZ_SAN) -fsanitize=fuzzer -Iproto -Itext -Igrammar \
	    $(NGX_INCS) -MMD -MP -MF $@.d -o $@ $< $(FUZZ_MODULE) $(FUZZ_NGX) $(FUZZ_LIB) \
	    -ljansson -lm -lcrypt -lpthread

fuzz: $(FUZZERS) $(TINY)
	tools/fuzz.sh $(BUILD) $(SECONDS) $(FUZZ_NAMES)

$(FUZZ_NAMES:%=fuzz-%): fuzz-%: $(BUILD)/fuzz/% $(TINY)
	tools/fuzz.sh $(BUILD) $(SECONDS) $*

-include $(FUZZ_OBJS:.o=.d) $(FUZZERS:=.d)

# The whole suite under AddressSanitizer + UBSan: the engine, tools, unit
# tests (here, CFLAGS/LDFLAGS below) and nginx itself with the module
# (tools/build-nginx-sanitized.sh: Debian's nginx source), built into
# $(SAN_BUILD).  Every report aborts its process and is written under
# $(SAN_BUILD)/reports/; the target fails when any report exists, even
# one from a process whose exit no test looked at.
SAN_FLAGS   := -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_REPORTS := $(abspath $(SAN_BUILD))/reports
# clang, whose UBSan (unlike gcc's) honours log_path.  lsan.supp: see
# tools/build-nginx-sanitized.sh; print_suppressions=0, so that a process
# whose leaks were all suppressed writes nothing under reports/.  Waits in
# the tests are 4 times longer (PAGEDLLM_TEST_TIME_SCALE): the sanitized
# processes are that slower.  PAGEDLLM_TEST_SANITIZED: t/54-slow-readers.t
# runs its small bound alone (docs/RELIABILITY.md says why).
# -ffp-contract=off: no multiply-add fused where gcc (-std=c11) fuses none,
# as the CPU kernels' tests compare fused and unfused twins bit for bit.
# Two warnings gcc does not have are off, as the benchmarks trip them by
# design: a long string literal split over lines in an array of them
# (bench/grammar.c) and rand() / RAND_MAX in float (bench/beam.c)
SAN_CLANG   := -Wno-pass-failed -ffp-contract=off -Wno-string-concatenation \
               -Wno-implicit-const-int-float-conversion
SAN_ASAN    := abort_on_error=1:detect_leaks=1
SAN_UBSAN   := halt_on_error=1:abort_on_error=1:print_stacktrace=1
SAN_ENV     := ASAN_OPTIONS=$(SAN_ASAN):log_path=$(SAN_REPORTS)/asan \
               LSAN_OPTIONS=suppressions=$(abspath $(SAN_BUILD))/nginx-asan/lsan.supp:print_suppressions=0 \
               UBSAN_OPTIONS=$(SAN_UBSAN):log_path=$(SAN_REPORTS)/ubsan \
               PAGEDLLM_NGINX=$(abspath $(SAN_BUILD))/nginx-asan/nginx \
               PAGEDLLM_TEST_TIME_SCALE=4 PAGEDLLM_TEST_SANITIZED=1

.PHONY: test-sanitize

test-sanitize: test-deps $(BUILD)/.fuzz-deps
	$(MAKE) BUILD=$(SAN_BUILD) CUDA=0 CC=$(FUZZ_CC) \
	    CFLAGS='-O1 -g -fno-omit-frame-pointer $(SAN_FLAGS) $(SAN_CLANG)' \
	    LDFLAGS='$(SAN_FLAGS)' engine model tools units \
	    $(BENCHES:$(BUILD)/%=$(SAN_BUILD)/%)
	CC=$(FUZZ_CC) tools/build-nginx-sanitized.sh $(SAN_BUILD)
	rm -rf $(SAN_REPORTS) && mkdir -p $(SAN_REPORTS)
	$(SAN_ENV) PAGEDLLM_BUILD=$(abspath $(SAN_BUILD)) \
	    prove -j2 $(patsubst $(BUILD)/%,$(SAN_BUILD)/%,$(UNITS)) \
	    $(wildcard t/*.t); \
	rc=$$?; \
	if [ -n "$$(ls $(SAN_REPORTS))" ]; then \
	    head -50 $(SAN_REPORTS)/*; \
	    echo "test-sanitize: sanitizer reports in $(SAN_REPORTS)" >&2; \
	    exit 1; \
	fi; \
	exit $$rc
