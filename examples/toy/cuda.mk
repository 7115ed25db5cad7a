## examples/toy/cuda.mk: the toy model's CUDA backend (toy_cuda.h, docs/GPU.md).
## With CUDA and NCCL: toy_cuda.c and the kernels in toy_cuda.cu, compiled by
## nvcc through the suffix rule below; without either, toy_cuda_stub.c
## (-EOPNOTSUPP), so callers build in every configuration. A plain archive,
## linked into programs and tests: nvcc cannot take libtool's PIC flags, so its
## object is compiled -fPIC (and PIE executables accept it) instead.
noinst_LIBRARIES = examples/toy/libtoy_cuda.a
examples_toy_libtoy_cuda_a_SOURCES = examples/toy/toy_cuda.h examples/toy/toy_cuda_k.h
examples_toy_libtoy_cuda_a_CPPFLAGS = $(RK_TOY_CPPFLAGS) $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS)
examples_toy_libtoy_cuda_a_CFLAGS = $(AM_CFLAGS)
if HAVE_TOY_CUDA
examples_toy_libtoy_cuda_a_SOURCES += examples/toy/toy_cuda.c examples/toy/toy_cuda.cu
else
examples_toy_libtoy_cuda_a_SOURCES += examples/toy/toy_cuda_stub.c
endif
EXTRA_DIST += examples/toy/toy_cuda.cu

SUFFIXES = .cu
# Hopper (H100/H200) code, plus PTX for the JIT on anything newer. Override with
# make NVCC_ARCH='-gencode arch=compute_80,code=sm_80 ...'.
NVCC_ARCH = -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# Host side: C++ without exceptions or thread-safe statics, so the object needs
# only libcudart (no libstdc++) when gcc links it into C programs. The one
# static the launch stubs initialise is a kernel handle that any racing thread
# computes identically.
NVCC_HOSTFLAGS = -Xcompiler -fPIC,-fno-exceptions,-fno-threadsafe-statics,-Wall,-Wextra
NVCCFLAGS = -O2 $(NVCC_ARCH) $(NVCC_HOSTFLAGS) $(NVCC_WERROR)
nvcc_verbose = $(nvcc_verbose_@AM_V@)
nvcc_verbose_ = $(nvcc_verbose_@AM_DEFAULT_V@)
nvcc_verbose_0 = @echo "  NVCC    " $@;
.cu.$(OBJEXT):
	$(nvcc_verbose)$(NVCC) $(NVCCFLAGS) $(DEFS) $(DEFAULT_INCLUDES) -I$(srcdir)/examples/toy \
		$(CUDA_CPPFLAGS) -c -o $@ $<
# no dependency tracking for nvcc: name the header by hand
examples/toy/toy_cuda.$(OBJEXT): $(srcdir)/examples/toy/toy_cuda_k.h
ARFLAGS = cr
