## examples/toy: the deterministic tensor-parallel toy model and its CPU backend
## (examples/TOY.md). A convenience library for the example servers and tests.
noinst_LTLIBRARIES += examples/libtoy.la
examples_libtoy_la_SOURCES = examples/toy.c examples/toy_cpu.c examples/toy.h
examples_libtoy_la_CPPFLAGS = $(AM_CPPFLAGS) $(CRYPTO_CFLAGS)
# Sampling is defined in IEEE double basic operations: no FMA contraction.
examples_libtoy_la_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
# No rankrt library here: programs add librankrt.la, tests the core library,
# so no binary carries two copies of the runtime.
examples_libtoy_la_LIBADD = $(CRYPTO_LIBS) $(PTHREAD_LIBS) $(LIBM)
EXTRA_DIST += examples/TOY.md

if HAVE_CHECK
check_PROGRAMS += tests/check_toy
TESTS += tests/check_toy
tests_check_toy_SOURCES = tests/check_toy.c tests/rk_test.h
tests_check_toy_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/examples
tests_check_toy_CFLAGS = $(RK_TEST_CFLAGS)
tests_check_toy_LDADD = examples/libtoy.la $(RK_TEST_LIBS)
endif
