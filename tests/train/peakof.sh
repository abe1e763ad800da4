#!/bin/sh
# peakof.sh PREFIX CMD...: runs CMD and writes its peak resident KiB to PREFIX.<rank> (a file:
# mpirun may drop what a rank prints as it exits). Used by train_zero3.sh and zero3_figures.sh.
p=$1
shift
exec /usr/bin/time -f "%M" -o "$p.${OMPI_COMM_WORLD_RANK:-0}" "$@"
