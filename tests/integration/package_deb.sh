#!/usr/bin/env bash
# package_deb.sh — `make deb` builds a Debian package that installs with dpkg -i: the programs
# in /usr/bin, spank_loom.so in Slurm's plugin directory, /etc/slurm/plugstack.conf.d/loom.conf
# as a conffile (Debian's plugstack.conf includes it, so srun loads the plugin from the package),
# the man pages; dpkg -r removes every file but the conffile, dpkg -P that too.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_SKIP_CLUSTER_TESTS:-0}" = 1 ] && skip "LOOM_SKIP_CLUSTER_TESTS=1 (the package test installs into the system)"
[ "$(id -u)" -eq 0 ] || skip "not root: dpkg -i needs root"
command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null || skip "no dpkg-deb / dpkg-shlibdeps (dpkg-dev)"
[ -f "$LOOM_BUILDDIR/spank_plugin/.libs/spank_loom.so" ] || skip "spank_loom.so not built"
dpkg -s loom >/dev/null 2>&1 && skip "a loom package is already installed: not replacing it"
for p in /usr/bin/loom-train /usr/bin/loom-topo; do [ -e "$p" ] && skip "$p exists outside a package: not overwriting it"; done
plugindir=$(sed -n 's/^slurm_plugindir = //p' "$LOOM_BUILDDIR/Makefile")

run_cmd make -s -C "$LOOM_BUILDDIR" deb
expect_eq "make deb" 0 "$rc"
deb=$(grep -oE "/[^ ]+\.deb" <<<"$out" | head -1)
[ -f "$deb" ] || { fail "make deb wrote no package: $out $err"; finish; }
expect_match "the package names its Slurm release" "loom_[0-9.]+-1\+slurm[0-9]+\.[0-9]+_[a-z0-9]+\.deb" "$deb"
info=$(dpkg-deb -I "$deb")
expect_match "it depends on that Slurm release" "slurm-wlm-basic-plugins \(>= [0-9]+\.[0-9]+\), slurm-wlm-basic-plugins \(<< " "$info"
expect_match "and on the libraries it links" "Depends: .*libhwloc" "$info"
trap 'dpkg -P loom >/dev/null 2>&1; rm -rf "$LOOM_TMP"' EXIT

run_cmd dpkg -i "$deb"
expect_eq "dpkg -i" 0 "$rc"
files=$(dpkg -L loom)
for f in /usr/bin/loom-train /usr/bin/loom-serve /usr/bin/loom-sweep "$plugindir/spank_loom.so" \
  /etc/slurm/plugstack.conf.d/loom.conf /usr/share/man/man1/loom-sweep.1.gz /usr/share/man/man8/loom-serve.8.gz; do
  grep -qxF "$f" <<<"$files" && [ -e "$f" ] && pass || fail "the package did not install $f"
done
expect_match "the plugstack line is a conffile" "/etc/slurm/plugstack.conf.d/loom.conf" "$(dpkg-query -W -f='${Conffiles}' loom)"
expect_match "it points at the installed plugin" "^optional $plugindir/spank_loom.so " \
  "$(grep -v '^#' /etc/slurm/plugstack.conf.d/loom.conf)"
run_cmd /usr/bin/loom-sweep --version
expect_match "the installed programs run" "^loom-sweep \(Loom\)" "$out"
if [ -f "$LOOM_BUILDDIR/runtime/python/.libs/libloomtorch.so" ]; then
  # loom.torch where Debian's python3 finds it, its library inside (no PYTHONPATH, no LOOM_TORCH_LIB).
  run_cmd env -u PYTHONPATH -u LOOM_TORCH_LIB /usr/bin/python3 -c \
    'import loom.torch as lt; lt.init(); print(lt.size(), lt.describe(), lt.__file__)'
  expect_match "python3 imports the installed loom.torch" "^1 one process /usr/lib/python3[.0-9]*/dist-packages/loom/torch/__init__.py" "$out $err"
fi
run_cmd man -w loom-train
expect_match "man finds the pages" "/usr/share/man/man1/loom-train.1.gz" "$out"
if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
  # srun reads the system plugstack.conf (Debian's: include plugstack.conf.d/*.conf).
  sed 's|^PlugStackConfig=.*|PlugStackConfig=/etc/slurm/plugstack.conf|' "$SLURM_CONF" >"$LOOM_TMP/slurm.conf"
  cp "$(dirname "$SLURM_CONF")"/{gres.conf,cgroup.conf,mpi.conf,topology.conf} "$LOOM_TMP/" 2>/dev/null
  run_cmd env SLURM_CONF="$LOOM_TMP/slurm.conf" srun --help
  expect_match "srun loads the plugin from the package" "--loom-bind" "$out"
  run_cmd env SLURM_CONF="$LOOM_TMP/slurm.conf" srun -n1 --loom-bind=gpu --gpus=1 true
  expect_eq "and a step runs with its option" 0 "$rc"
else
  echo "package_deb: no local cluster: the srun check is skipped"
fi

run_cmd dpkg -r loom
expect_eq "dpkg -r" 0 "$rc"
for f in /usr/bin/loom-train "$plugindir/spank_loom.so" /usr/share/man/man1/loom-train.1.gz; do
  [ -e "$f" ] && fail "dpkg -r left $f" || pass
done
[ -f /etc/slurm/plugstack.conf.d/loom.conf ] && pass || fail "dpkg -r removed the conffile (only purge should)"
run_cmd dpkg -P loom
expect_eq "dpkg -P" 0 "$rc"
[ -e /etc/slurm/plugstack.conf.d/loom.conf ] && fail "dpkg -P left the conffile" || pass
dpkg -s loom >/dev/null 2>&1 && fail "the package is still known to dpkg" || pass
rm -f "$deb"
finish
