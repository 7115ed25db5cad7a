## examples/rk-serve: the toy model's decode server (every rank; rank 0 serves
## HTTP through libmicrohttpd, JSON through jansson), and examples/rk-load, its
## load client (libcurl). Built only when configure found the libraries
## (--with-serve); the decode tests then skip (77).
if HAVE_SERVE
bin_PROGRAMS += examples/rk-serve
examples_rk_serve_SOURCES = examples/rk-serve.c
examples_rk_serve_CPPFLAGS = $(AM_CPPFLAGS) $(MHD_CFLAGS) $(JANSSON_CFLAGS)
examples_rk_serve_CFLAGS = $(AM_CFLAGS)
examples_rk_serve_LDADD = examples/libtoy.la librankrt.la $(MHD_LIBS) $(JANSSON_LIBS) \
	$(PTHREAD_LIBS) $(LIBM)
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

## End-to-end tests through rk-launch; each skips (77) without the binaries.
TESTS += tests/decode-exact.sh tests/decode-kill.sh tests/decode-netns.sh tests/decode-mpi.sh
EXTRA_DIST += tests/decode-exact.sh tests/decode-kill.sh tests/decode-netns.sh \
	tests/decode-mpi.sh tests/bench-serve.sh examples/demo.sh docs/SERVE.md
