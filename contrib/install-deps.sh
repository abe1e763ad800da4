#!/usr/bin/env bash
# install-deps.sh — installs every Debian package Loom's build, tests and quickstart need.
# Idempotent and non-interactive; safe to run again. Needs root (or sudo).
set -euo pipefail

packages=(
  # build
  build-essential autoconf automake libtool pkg-config clang libomp-dev
  # Slurm + munge (real daemons for the integration tests)
  slurm-wlm slurmctld slurmd libslurm-dev munge
  # MPI
  libopenmpi-dev openmpi-bin libpmix-dev libucx-dev
  # topology
  libhwloc-dev hwloc
  # checkpoints and models
  libhdf5-dev hdf5-tools zlib1g-dev libonnx-dev python3-onnx
  # CLI, tests, numerics
  libboost-program-options-dev libgtest-dev googletest libopenblas-dev libdnnl-dev
  # sweeps (loom-sweep: Gaussian process with Eigen, NLopt)
  libeigen3-dev libnlopt-cxx-dev
  # serving
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev libyaml-cpp-dev nlohmann-json3-dev libgoogle-perftools-dev
  # tokenizer.json: split patterns (PCRE2, Unicode properties) and NFC (ICU)
  libpcre2-dev libicu-dev
  # data, peers and tools used by tests and benchmarks
  dataset-fashion-mnist python3 python3-numpy python3-h5py python3-torch python3-torchvision python3-grpcio
  python3-optuna python3-yaml
  hyperfine fio wrk iproute2 curl procps util-linux
  # Prometheus' promtool lints the metrics' names; Chromium renders loom-topo draw's pictures and
  # drives the status page (Selenium)
  prometheus chromium chromium-driver python3-selenium
  # test peers from PyPI go into a virtual environment (tests/integration/lib.sh peer_venv);
  # Triton's perf_analyzer (in tritonclient's wheel) needs libb64
  python3-venv libb64-0d
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
