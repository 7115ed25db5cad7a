## examples/rk-serve: the toy model's decode server (every rank), always built:
## --demo and --bench need nothing more. Its HTTP server (rank 0, libmicrohttpd,
## JSON through jansson) is compiled in when configure found both
## (RK_HAVE_SERVE_HTTP, --with-serve). --backend=cuda runs the CUDA backend
## (examples/cuda.mk): libtoy_cuda.a is always linked (-EOPNOTSUPP stubs without
## CUDA and NCCL), with the CUDA and NCCL libraries when it has the kernels.
## examples/rk-load, the HTTP load client (libcurl), is built when configure
## found libcurl and jansson.
bin_PROGRAMS += examples/rk-serve
examples_rk_serve_SOURCES = examples/rk-serve.c
examples_rk_serve_CPPFLAGS = $(AM_CPPFLAGS) $(MHD_CFLAGS) $(JANSSON_CFLAGS)
examples_rk_serve_CFLAGS = $(AM_CFLAGS)
examples_rk_serve_LDADD = examples/libtoy_cuda.a examples/libtoy.la librankrt.la \
	$(MHD_LIBS) $(JANSSON_LIBS) $(PTHREAD_LIBS) $(LIBM)
if HAVE_TOY_CUDA
examples_rk_serve_LDADD += $(NCCL_LIBS) $(CUDA_LIBS)
endif

if HAVE_LOAD
bin_PROGRAMS += examples/rk-load
examples_rk_load_SOURCES = examples/rk-load.c
examples_rk_load_CPPFLAGS = $(AM_CPPFLAGS) $(CURL_CFLAGS) $(JANSSON_CFLAGS)
examples_rk_load_CFLAGS = $(AM_CFLAGS)
# libtoy for toy_hash_tokens() and the TP1 reference (--check-ref); its objects
# reference the wire codec, hence librankrt
examples_rk_load_LDADD = examples/libtoy.la librankrt.la $(CURL_LIBS) $(JANSSON_LIBS) \
	$(PTHREAD_LIBS) $(LIBM)
endif

## End-to-end tests through rk-launch; each skips (77) without the binaries. The
## HTTP ones run only when rk-serve has its HTTP server (rk-load alone is not enough).
TESTS += tests/decode-bench.sh tests/decode-netns.sh tests/decode-mpi.sh
if HAVE_SERVE
TESTS += tests/decode-exact.sh tests/decode-kill.sh tests/decode-stranger.sh
endif
EXTRA_DIST += tests/decode-exact.sh tests/decode-kill.sh tests/decode-stranger.sh tests/decode-netns.sh \
	tests/decode-mpi.sh tests/decode-bench.sh tests/bench-serve.sh tests/bench-bcast.sh \
	examples/demo.sh docs/SERVE.md
