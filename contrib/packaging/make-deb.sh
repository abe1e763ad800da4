#!/usr/bin/env bash
# make-deb.sh BUILDDIR SRCDIR VERSION PLUGINDIR — `make deb`: a Debian package of this build for
# the Slurm version it was compiled against. The programs go to /usr/bin, spank_loom.so to Slurm's
# plugin directory, the plugstack line to /etc/slurm/plugstack.conf.d/loom.conf (a conffile, which
# Debian's /etc/slurm/plugstack.conf includes), the man pages and the loom-serve systemd unit.
# Depends: the shared libraries the binaries use (dpkg-shlibdeps) and the Slurm release the plugin
# was built for (a SPANK plugin loads only into the Slurm major release it was compiled for).
set -euo pipefail
build=$1 src=$2 version=$3 plugindir=$4
die() { echo "make deb: $*" >&2; exit 1; }
command -v dpkg-deb >/dev/null || die "dpkg-deb not found (a Debian system is needed)"
command -v dpkg-shlibdeps >/dev/null || die "dpkg-shlibdeps not found (apt-get install dpkg-dev)"
[ -f "$build/spank_plugin/.libs/spank_loom.so" ] || die "spank_loom.so was not built (configure found no Slurm headers)"
hex=$(sed -n 's/^#define SLURM_VERSION_NUMBER 0x\([0-9a-fA-F]*\).*/\1/p' /usr/include/slurm/slurm_version.h 2>/dev/null)
[ -n "$hex" ] || die "cannot read SLURM_VERSION_NUMBER from /usr/include/slurm/slurm_version.h"
slurm=$(printf '%d.%02d.%d' $((16#${hex:0:2})) $((16#${hex:2:2})) $((16#${hex:4:2})))
[[ $slurm =~ ^([0-9]+)\.([0-9]+)\.[0-9]+ ]] || die "cannot read the Slurm version from slurm/slurm_version.h ($slurm)"
major=${BASH_REMATCH[1]}.${BASH_REMATCH[2]}
next="${BASH_REMATCH[1]}.$(printf '%02d' $((10#${BASH_REMATCH[2]} + 1)))"
arch=$(dpkg --print-architecture)
libslurm_pkg=$(dpkg -S "$(readlink -f "$(${CC:-gcc} -print-file-name=libslurm.so)")" 2>/dev/null | cut -d: -f1 | head -1)
stage=$build/deb-stage
rm -rf "$stage"
make -C "$build" install DESTDIR="$stage" prefix=/usr sysconfdir=/etc >/dev/null
find "$stage" -name '*.la' -delete  # libtool's notes: the plugin's and loom.torch's
install -D -m 0644 "$src/contrib/slurm/plugstack.conf.d/loom.conf" "$stage/etc/slurm/plugstack.conf.d/loom.conf"
sed -i "s|optional [^ ]*/spank_loom.so|optional $plugindir/spank_loom.so|" "$stage/etc/slurm/plugstack.conf.d/loom.conf"
install -D -m 0644 "$src/contrib/loom-serve.service" "$stage/lib/systemd/system/loom-serve.service"
sed -i 's|/usr/local/bin/loom-serve|/usr/bin/loom-serve|' "$stage/lib/systemd/system/loom-serve.service"
find "$stage/usr/share/man" -type f ! -name '*.gz' -exec gzip -9n {} +
# As dh_strip does: no debug sections in the package.
find "$stage/usr/bin" "$stage$plugindir" "$stage/usr/lib" -type f \( -perm -u+x -o -name '*.so' \) -exec strip --strip-unneeded {} +
# Shared-library dependencies, as debhelper would compute them (CUDA's runtime, found through
# the binaries' rpath under /usr/local/cuda, is no Debian package and is left out).
mkdir -p "$stage/DEBIAN" "$build/deb-shlibs/debian"
printf 'Source: loom\n\nPackage: loom\nArchitecture: any\n' >"$build/deb-shlibs/debian/control"
bins=$(find "$stage/usr/bin" "$stage$plugindir" "$stage/usr/lib" -type f \( -perm -u+x -o -name '*.so' \) | sort -u)
shlibs=$(cd "$build/deb-shlibs" && dpkg-shlibdeps -O --ignore-missing-info -l/usr/local/cuda/lib64 $bins 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
depends="${shlibs:+$shlibs, }slurm-wlm-basic-plugins (>= $major), slurm-wlm-basic-plugins (<< $next)${libslurm_pkg:+, $libslurm_pkg}"
size=$(du -sk "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<CTRL
Package: loom
Version: $version-1+slurm$major
Architecture: $arch
Maintainer: Loom developers <loom@localhost>
Installed-Size: $size
Depends: $depends
Section: admin
Priority: optional
Homepage: https://localhost/loom
Description: topology-aware placement, training and serving for Slurm clusters of mixed GPUs
 spank_loom.so places each task of a Slurm step on a GPU, CPU cores and a NIC from the node's
 hwloc/NVLink topology (loaded through /etc/slurm/plugstack.conf.d/loom.conf). loom-topo writes
 gres.conf and slurm.conf lines; loom-train trains data-parallel across mixed GPUs with MPI;
 loom-compress prunes and quantizes; loom-serve serves models over KServe v2 HTTP and gRPC;
 loom-sweep runs Bayesian hyperparameter sweeps as Slurm job arrays; loom-bench measures;
 the Python package loom.torch gives PyTorch scripts the same balanced data parallelism.
 Built for Slurm $slurm (a SPANK plugin loads only into its own Slurm release).
CTRL
echo /etc/slurm/plugstack.conf.d/loom.conf >"$stage/DEBIAN/conffiles"
cat >"$stage/DEBIAN/postinst" <<'SH'
#!/bin/sh
# The loom-serve unit runs as the system user loom, which reads /var/lib/loom/models.
set -e
if [ "$1" = configure ]; then
  getent passwd loom >/dev/null || adduser --system --group --no-create-home --home /var/lib/loom loom >/dev/null 2>&1 || true
  mkdir -p /var/lib/loom/models /etc/loom
fi
exit 0
SH
chmod 0755 "$stage/DEBIAN/postinst"
out="$build/loom_$version-1+slurm${major}_$arch.deb"
dpkg-deb --root-owner-group --build "$stage" "$out" >/dev/null
rm -rf "$stage" "$build/deb-shlibs"
echo "make deb: $out (Slurm $slurm, plugin in $plugindir)"
