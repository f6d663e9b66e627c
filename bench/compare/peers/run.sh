#!/bin/bash
# The peers bench/compare measures gocoll against, on this machine:
#   run.sh PEER MODE NP MIN MAX    an allreduce sweep, float32 sum, MIN..MAX bytes doubling,
#                                  printed as "size count time_us algbw busbw wrong"
#   run.sh membw                   this machine's single-thread memory bandwidth
# PEER and MODE:
#   openmpi tcp   Open MPI 4 restricted to TCP on loopback: --mca btl self,tcp, pml ob1, btl_tcp_if_include lo
#   openmpi shm   Open MPI's default on one host (its vader shared-memory btl)
#   mpich tcp     MPICH 4 (ch4:ucx) restricted to TCP: MPIR_CVAR_NOLOCAL=1 (no shared-memory module, every
#                 rank as if on another node), UCX_TLS=self,tcp, UCX_NET_DEVICES=lo
#   mpich shm     MPICH's default on one host (ch4's POSIX shared memory)
#   gloo tcp      PyTorch's gloo backend (its ring allreduce over TCP on lo; gloo has no shared memory)
# Programs are built into $TMPDIR/gocoll-peers from the sources beside this script, with each MPI's own
# wrapper (mpicc.openmpi, mpicc.mpich), so that whichever MPI the mpicc alternative points to, the label
# is true. Debian packages: openmpi-bin libopenmpi-dev, mpich libmpich-dev, python3-torch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${TMPDIR:-/tmp}/gocoll-peers
mkdir -p "$bin"
need() { command -v "$1" >/dev/null || { echo "run.sh: $1 not found: apt-get install $2" >&2; exit 1; }; }
build() { # build WRAPPER SRC OUT
  [ "$3" -nt "$2" ] || "$1" -O2 -o "$3" "$2"
}
if [ "${1:-}" = membw ]; then
  need gcc gcc
  build gcc "$here/membw.c" "$bin/membw"
  exec "$bin/membw"
fi
[ $# -eq 5 ] || { echo "usage: $0 openmpi|mpich|gloo tcp|shm NP MINBYTES MAXBYTES | $0 membw" >&2; exit 2; }
peer=$1 mode=$2 np=$3 min=$4 max=$5
case $peer/$mode in
  openmpi/tcp|openmpi/shm)
    need mpicc.openmpi "openmpi-bin libopenmpi-dev"
    build mpicc.openmpi "$here/allreduce.c" "$bin/allreduce.openmpi"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    tcp=(); [ "$mode" = shm ] || tcp=(--mca btl self,tcp --mca btl_tcp_if_include lo --mca pml ob1)
    echo "# Open MPI $(mpirun.openmpi --version | head -n1 | awk '{print $NF}') $mode, $np ranks" >&2
    exec mpirun.openmpi "${tcp[@]}" -np "$np" "$bin/allreduce.openmpi" "$min" "$max" ;;
  mpich/tcp|mpich/shm)
    need mpicc.mpich "mpich libmpich-dev"
    build mpicc.mpich "$here/allreduce.c" "$bin/allreduce.mpich"
    [ "$mode" = shm ] || export MPIR_CVAR_NOLOCAL=1 UCX_TLS=self,tcp UCX_NET_DEVICES=lo
    echo "# MPICH $(mpichversion 2>/dev/null | awk -F'\t' '/^MPICH Version/{print $NF}') $mode, $np ranks" >&2
    exec mpiexec.mpich -n "$np" "$bin/allreduce.mpich" "$min" "$max" ;;
  gloo/tcp)
    # The python that has torch: $PYTHON, Debian's, or the first on PATH (a
    # pyenv shim may shadow Debian's python3).
    for py in ${PYTHON:-} /usr/bin/python3 $(type -ap python3); do
      if "$py" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
        echo "# gloo (torch $("$py" -c 'import torch; print(torch.__version__)')) tcp, $np ranks" >&2
        exec "$py" "$here/gloo_allreduce.py" "$np" "$min" "$max"
      fi
    done
    echo "run.sh: no python3 with torch.distributed and gloo: apt-get install python3-torch, or set PYTHON" >&2
    exit 1 ;;
  *) echo "run.sh: $peer has no $mode path (gloo: tcp only)" >&2; exit 2 ;;
esac
