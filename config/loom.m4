# loom.m4 — Loom's configure macros: optional dependencies (auto / --with-X / --without-X),
# hardening and warning flags, fuzzing, and the closing summary.

# LOOM_OPTIONAL(NAME, SHELL_NAME, DESCRIPTION, CHECK)
# --with-NAME makes DESCRIPTION required, --without-NAME turns it off, nothing = auto.
# CHECK runs unless the dependency is off and must set loom_found=yes when it finds it.
# Defines AM_CONDITIONAL HAVE_<SHELL_NAME> (upper case), shell have_<SHELL_NAME>, and a summary row.
AC_DEFUN([LOOM_OPTIONAL], [
  AC_ARG_WITH([$1], [AS_HELP_STRING([--with-$1], [require $3; --without-$1 disables it (default: auto)])],
              [], [with_$2=auto])
  loom_found=no
  AS_IF([test "x$with_$2" != xno], [$4])
  AS_IF([test "x$with_$2" = xyes && test "x$loom_found" != xyes],
        [AC_MSG_ERROR([--with-$1 was given but $3 was not found])])
  have_$2=$loom_found
  AS_IF([test "x$with_$2" = xno], [loom_state="off (--without-$1)"],
        [test "x$loom_found" = xyes], [loom_state=yes],
        [loom_state="no (not found)"])
  LOOM_SUMMARY_ADD([$3], [$loom_state])
  AM_CONDITIONAL(m4_toupper([HAVE_$2]), [test "x$loom_found" = xyes])
  AS_IF([test "x$loom_found" = xyes], [AC_DEFINE(m4_toupper([LOOM_HAVE_$2]), [1], [$3 available])])
])

AC_DEFUN([LOOM_SUMMARY_ADD], [
  loom_summary="$loom_summary
m4_format([  %-34s], [$1]) $2"
])

AC_DEFUN([LOOM_SUMMARY], [
  AS_ECHO([""])
  AS_ECHO(["Loom $PACKAGE_VERSION configuration summary"])
  AS_ECHO(["  C++ compiler                       $CXX"])
  AS_ECHO(["$loom_summary"])
  AS_ECHO([""])
])

# Hardening and warnings for Loom's own code.
AC_DEFUN([LOOM_FLAGS], [
  AC_ARG_ENABLE([werror], [AS_HELP_STRING([--disable-werror], [do not turn warnings into errors])],
                [], [enable_werror=yes])
  LOOM_WARN_CXXFLAGS="-Wall -Wextra -Wno-unused-parameter"
  AS_IF([test "x$enable_werror" = xyes], [LOOM_WARN_CXXFLAGS="$LOOM_WARN_CXXFLAGS -Werror"])
  LOOM_HARDEN_CXXFLAGS="-std=c++17 -fstack-protector-strong -fPIC -D_FORTIFY_SOURCE=2 -D_GLIBCXX_ASSERTIONS"
  LOOM_HARDEN_LDFLAGS="-Wl,-z,relro -Wl,-z,now -Wl,--as-needed"
  AC_SUBST([LOOM_WARN_CXXFLAGS])
  AC_SUBST([LOOM_HARDEN_CXXFLAGS])
  AC_SUBST([LOOM_HARDEN_LDFLAGS])
])

# --enable-fuzzing: libFuzzer targets for the text readers, built with clang++.
AC_DEFUN([LOOM_FUZZING], [
  AC_ARG_ENABLE([fuzzing], [AS_HELP_STRING([--enable-fuzzing], [build libFuzzer targets with clang++ (default: no)])],
                [], [enable_fuzzing=no])
  AS_IF([test "x$enable_fuzzing" = xyes], [
    AC_PATH_PROGS([FUZZ_CXX], [clang++ clang++-14], [no])
    AS_IF([test "x$FUZZ_CXX" = xno], [AC_MSG_ERROR([--enable-fuzzing needs clang++ (apt-get install clang)])])
    AC_MSG_CHECKING([whether $FUZZ_CXX links -fsanitize=fuzzer])
    echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > conftest_fuzz.cpp
    AS_IF([$FUZZ_CXX -fsanitize=fuzzer conftest_fuzz.cpp -o conftest_fuzz >&AS_MESSAGE_LOG_FD 2>&1],
          [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); AC_MSG_ERROR([$FUZZ_CXX cannot build libFuzzer targets])])
    rm -f conftest_fuzz.cpp conftest_fuzz
  ])
  AM_CONDITIONAL([ENABLE_FUZZING], [test "x$enable_fuzzing" = xyes])
  LOOM_SUMMARY_ADD([libFuzzer targets], [$enable_fuzzing])
])
