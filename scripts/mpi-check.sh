#!/usr/bin/env bash
# The decomposed runs under MPI, on the CPU engine in CI (no GPU): `diffusion --mpi` (z split),
# `advection --mpi` (y split) and `lbm --mpi` (z split, both streaming schemes, both velocity sets, walls, a moving lid, a body,
# an inlet and an outlet across the cuts, and the body's forces) over 1, 2
# and 3 ranks must write the same bytes as the undecomposed runs (odd sizes, so 3 ranks split unevenly),
# and impossible splits must fail with a clear message, not hang; diffusion, advection and lbm checkpoints
# written on 2 ranks resume on 3 (diffusion's and lbm's also on 1) to the same bytes, as does the checkpoint
# SIGUSR1 to the ranks makes.
#
# Needs OpenMPI and libclang (for the mpi crate's bindings); installs them with apt where missing, and
# skips with a message where that is impossible (fails instead with LATTICE_GPU_REQUIRE_MPI=1).
#
# On the GPU machine (no Rust): LATTICE_GPU_MPI_BIN=DIR takes the binaries built with the `mpi` feature
# from DIR instead of building them (scripts/gpu-check.sh stage puts them in .gpu-bin/mpi), and
# LATTICE_GPU_MPI_ENGINE=device runs the diffusion, advection and lbm comparisons on the GPU (every rank
# on GPU 0; the decomposed runs must still write the bytes of the one-domain GPU run), and the lqcd
# solve split into blocks over GPU ranks (along t; z; y and z; z and t) against the one-GPU solve.
set -euo pipefail
cd "$(dirname "$0")/.."
engine=${LATTICE_GPU_MPI_ENGINE:-host}
prebuilt=${LATTICE_GPU_MPI_BIN:-}

have_mpi() { command -v mpicc >/dev/null && ls /usr/lib/llvm-*/lib/libclang*.so >/dev/null 2>&1; }
if [ -n "$prebuilt" ]; then
    # Prebuilt binaries need only the MPI runtime.
    have_mpi() { command -v mpirun >/dev/null; }
fi
if ! have_mpi; then
    echo "installing OpenMPI and libclang (apt)"
    packages="openmpi-bin libopenmpi-dev libclang-dev"
    apt-get install -y -q $packages >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q $packages >/dev/null 2>&1; } || true
fi
if ! have_mpi; then
    # Like the GPU tests without a GPU: say so plainly, and fail only where MPI is required.
    echo "SKIPPED (no MPI): OpenMPI and libclang are not installed and apt could not install them;" \
        "install openmpi-bin libopenmpi-dev libclang-dev to run the decomposed checks"
    [ "${LATTICE_GPU_REQUIRE_MPI:-0}" = 1 ] && exit 1
    exit 0
fi
if [ -z "$prebuilt" ]; then
    # The MPI code is compiled only with the feature: lint it here.
    cargo clippy --release --workspace --all-targets --features mpi -- -D warnings
    cargo build --release --features mpi --bin diffusion --bin advection --bin lbm --bin lqcd
    prebuilt=target/release
fi
prebuilt=$(cd "$prebuilt" && pwd)
bin=$prebuilt/diffusion
adv=$prebuilt/advection
lbm=$prebuilt/lbm
lqcd=$prebuilt/lqcd
echo "decomposed runs on the $engine engine"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun_() { timeout 300 mpirun --allow-run-as-root --oversubscribe "$@"; }
# same_bytes NAME GOT WANT: the run's file holds the bytes of the one-domain run's (a missing file never
# does).
same_bytes() {
    if [ -f "$2" ] && [ -f "$3" ] && [ "$(md5sum <"$2")" = "$(md5sum <"$3")" ]; then
        echo "$1: bit-identical to one domain PASS"
    else
        echo "$1: differs from one domain FAIL"
        status=1
    fi
}

status=0
# 9x7x5 over 3 ranks gives slabs of 2, 2 and 1 planes: no interior loop, one boundary plane.
for case in "f32 21x17x23" "f64 21x17x23" "f32 9x7x5"; do
    set -- $case
    prec=$1 size=$2
    "$bin" --engine "$engine" --size "$size" --steps 60 --precision "$prec" --output "$work/single-$prec" >/dev/null
    for np in 1 2 3; do
        mpirun_ -np "$np" "$bin" --engine "$engine" --mpi --size "$size" --steps 60 --precision "$prec" \
            --output "$work/mpi$np-$prec" >"$work/log" 2>&1 || { cat "$work/log"; status=1; continue; }
        same_bytes "diffusion $prec $size, $np MPI ranks" "$work/mpi$np-$prec/diffusion.npy" \
            "$work/single-$prec/diffusion.npy"
    done
done
# Temporally blocked passes of 3 steps on 2 and 3 ranks (slabs of 11 to 7 planes): halos 3 planes deep
# exchanged once a pass, each rank advancing two of them with its own planes; 61 steps end in singles.
# Then auto: rank 0 chooses for every rank before the run (on the CPU single steps at this size).
"$bin" --engine "$engine" --size 21x17x23 --steps 61 --temporal 1 --output "$work/single-t" >/dev/null
for t in 3 auto; do
    for np in 2 3; do
        mpirun_ -np "$np" "$bin" --engine "$engine" --mpi --size 21x17x23 --steps 61 --temporal $t \
            --output "$work/mpi$np-t$t" >"$work/log" 2>&1 || { cat "$work/log"; status=1; continue; }
        same_bytes "diffusion f32 21x17x23, $np MPI ranks, --temporal $t" "$work/mpi$np-t$t/diffusion.npy" \
            "$work/single-t/diffusion.npy"
    done
done
# Checkpoint and restart across rank counts: 30 steps on 2 ranks, then 30 more from the checkpoint on 3
# ranks and on 1, give the bytes of 60 steps straight (single-f32 is 9x7x5).
mpirun_ -np 2 "$bin" --engine "$engine" --mpi --size 9x7x5 --steps 30 --checkpoint-every 15 \
    --output "$work/half" >"$work/log" 2>&1 || { cat "$work/log"; status=1; }
mpirun_ -np 3 "$bin" --engine "$engine" --mpi --size 9x7x5 --steps 60 --resume "$work/half/checkpoint" \
    --output "$work/resumed3" >"$work/log" 2>&1 || { cat "$work/log"; status=1; }
same_bytes "diffusion 9x7x5, 2 MPI ranks then resumed on 3" "$work/resumed3/diffusion.npy" \
    "$work/single-f32/diffusion.npy"
"$bin" --engine "$engine" --size 9x7x5 --steps 60 --resume "$work/half/checkpoint" \
    --output "$work/resumed1" >"$work/log" 2>&1 || { cat "$work/log"; status=1; }
same_bytes "diffusion 9x7x5, 2 MPI ranks then resumed on 1" "$work/resumed1/diffusion.npy" \
    "$work/single-f32/diffusion.npy"
# SIGUSR1 to every rank (mpirun's children; Ctrl-C to mpirun becomes SIGTERM with SIGKILL a second
# later, and not every OpenMPI forwards SIGUSR1 sent to it): the ranks agree on it at a check, write
# the checkpoint and stop; resumed on 1 rank ten steps further, it gives the bytes of a straight run.
# A watchdog ends a run that does not stop.
rm -rf "$work"/sig*
mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" --engine "$engine" --mpi --size 40x40x40 \
    --steps 100000000 --output "$work/sig" >"$work/log" 2>&1 &
sigpid=$!
# (Its output to a file: a sleep left behind must not hold this script's pipe open.)
(sleep 60 && kill -KILL "$sigpid" && echo "mpirun still ran after SIGUSR1") >"$work/dog" 2>&1 &
dog=$!
# After the run's header (the ranks take signals from then on), and some steps.
for _ in $(seq 60); do grep -q "engine:" "$work/log" && break; sleep 0.5; done
sleep 2
# On a loaded machine mpirun can still be starting its ranks here: look for them for a while.
ranks=""
for _ in $(seq 60); do ranks=$(pgrep -P "$sigpid" || true); [ -n "$ranks" ] && break; sleep 0.5; done
if [ -n "$ranks" ]; then kill -USR1 $ranks 2>/dev/null || true; else echo "no ranks under mpirun"; fi
wait "$sigpid" || true
kill "$dog" 2>/dev/null || true
cat "$work/dog"
sigstep=$(grep -o 'checkpoint of step [0-9]*' "$work/log" | grep -o '[0-9]*$' || true)
if [ -n "$sigstep" ] && [ ! -e "$work/sig/diffusion.npy" ] && grep -q "stopped by SIGUSR1" "$work/log"; then
    "$bin" --engine "$engine" --size 40x40x40 --steps $((sigstep + 10)) --resume "$work/sig/checkpoint" \
        --output "$work/sig-resumed" >"$work/log2" 2>&1 || { cat "$work/log2"; status=1; }
    "$bin" --engine "$engine" --size 40x40x40 --steps $((sigstep + 10)) --output "$work/sig-straight" \
        >"$work/log2" 2>&1 || { cat "$work/log2"; status=1; }
    same_bytes "diffusion 40^3, SIGUSR1 to its 2 MPI ranks at step $sigstep, resumed on 1" \
        "$work/sig-resumed/diffusion.npy" "$work/sig-straight/diffusion.npy"
else
    cat "$work/log"
    echo "diffusion 40^3, SIGUSR1 to its 2 MPI ranks: no checkpoint, or the output written FAIL"
    status=1
fi
# Without overlap (the exchange completes before any plane runs): the same bytes (single-f32 is 9x7x5).
mpirun_ -np 2 "$bin" --engine "$engine" --mpi --no-overlap --size 9x7x5 --steps 60 --precision f32 \
    --output "$work/noov" >"$work/log" 2>&1 || { cat "$work/log"; status=1; }
same_bytes "diffusion f32 9x7x5, 2 MPI ranks, no overlap" "$work/noov/diffusion.npy" \
    "$work/single-f32/diffusion.npy"
# 150 nodes a row are wide enough for 128-byte row padding (each row's interior 32 f32 in). 19x11 over 3
# ranks gives slabs of 4, 4 and 3 rows: no inner rows, and an end part of one row.
for case in "plain 41x37" "packed 41x37" "packed 150x41" "packed 19x11"; do
    set -- $case
    kernel=$1 size=$2
    rm -rf "$work/adv-single"
    "$adv" swirl --engine "$engine" --size "$size" --steps 30 --kernel "$kernel" --output "$work/adv-single" >/dev/null || status=1
    for np in 1 2 3; do
        rm -rf "$work/adv$np"
        mpirun_ -np "$np" "$adv" swirl --engine "$engine" --mpi --size "$size" --steps 30 --kernel "$kernel" \
            --output "$work/adv$np" >"$work/log" 2>&1 || { cat "$work/log"; status=1; continue; }
        same_bytes "advection $kernel $size, $np MPI ranks" "$work/adv$np/field.npy" "$work/adv-single/field.npy"
    done
done
# Without overlap: the same bytes (adv-single is the last case's, packed 19x11).
mpirun_ -np 3 "$adv" swirl --engine "$engine" --mpi --no-overlap --size 19x11 --steps 30 --kernel packed \
    --output "$work/adv-noov" >"$work/log" 2>&1 || { cat "$work/log"; status=1; }
same_bytes "advection packed 19x11, 3 MPI ranks, no overlap" "$work/adv-noov/field.npy" \
    "$work/adv-single/field.npy"
# Checkpoint and restart across rank counts: 15 steps on 2 ranks, then on to 30 on 3 (adv-single is 30).
mpirun_ -np 2 "$adv" swirl --engine "$engine" --mpi --size 19x11 --steps 15 --kernel packed \
    --checkpoint-every 5 --output "$work/adv-half" >"$work/log" 2>&1 || { cat "$work/log"; status=1; }
mpirun_ -np 3 "$adv" swirl --engine "$engine" --mpi --size 19x11 --steps 30 --kernel packed \
    --resume "$work/adv-half/checkpoint" --output "$work/adv-resumed" >"$work/log" 2>&1 \
    || { cat "$work/log"; status=1; }
same_bytes "advection packed 19x11, 2 MPI ranks then resumed on 3" "$work/adv-resumed/field.npy" \
    "$work/adv-single/field.npy"
# same_as_single NAME FILE ARGS...: lbm ARGS on one domain and over 1, 2, 3 ranks write the same FILE.
same_as_single() {
    local name=$1 file=$2
    shift 2
    rm -rf "$work/lbm-single"
    "$lbm" "$@" --output "$work/lbm-single" >/dev/null || { echo "$name: the one-domain run failed FAIL"; status=1; return; }
    for np in 1 2 3; do
        rm -rf "$work/lbm$np"
        mpirun_ -np "$np" "$lbm" "$@" --mpi --output "$work/lbm$np" >"$work/log" 2>&1 || { cat "$work/log"; status=1; continue; }
        same_bytes "$name, $np MPI ranks" "$work/lbm$np/$file" "$work/lbm-single/$file"
    done
}
same_as_single "lbm taylor-green f32" velocity.npy taylor-green --engine "$engine" --streaming ab --size 24x20x17 --steps 40
same_as_single "lbm taylor-green f16" density.npy taylor-green --engine "$engine" --streaming ab --precision f16 --size 16x12x13 --steps 30
same_as_single "lbm 3-D cavity f64" velocity.npy cavity --engine "$engine" --streaming ab --precision f64 --size 18x18x11 \
    --closed-z --re 20 --steps 300
same_as_single "lbm taylor-green f32, no overlap" velocity.npy taylor-green --engine "$engine" --streaming ab \
    --size 24x20x17 --steps 40 --no-overlap
# In place: the odd step writes into the halos, which go back to their planes (odd and even step counts).
same_as_single "lbm in-place 3-D cavity f64" velocity.npy cavity --engine "$engine" --streaming aa --precision f64 \
    --size 18x18x11 --closed-z --re 20 --steps 301
same_as_single "lbm in-place taylor-green f16" density.npy taylor-green --engine "$engine" --streaming aa --precision f16 \
    --size 16x12x13 --steps 30
# 5 planes over 3 ranks: slabs of 2, 2 and 1 planes (no planes without a halo, one plane both first and last).
same_as_single "lbm taylor-green f32, thin slabs" velocity.npy taylor-green --engine "$engine" --streaming ab \
    --size 16x12x5 --steps 20
same_as_single "lbm in-place taylor-green f32, thin slabs" velocity.npy taylor-green --engine "$engine" --streaming aa \
    --size 16x12x5 --steps 21
# A body between an inlet and an outlet in a duct, or with free-slip sides: its forces and the flow,
# across the cuts.
lbmbody="obstacle --engine $engine --size 30x16x13 --sides walls --profile parabolic --sphere 10,7.5,6,3 --re 20 \
    --steps 201 --force-every 20"
same_as_single "lbm obstacle in place, forces" forces.csv $lbmbody --streaming aa
same_as_single "lbm obstacle two-lattice f64, flow" velocity.npy $lbmbody --streaming ab --precision f64
same_as_single "lbm obstacle in place, free-slip sides" velocity.npy ${lbmbody/--sides walls --profile parabolic/--sides slip} \
    --streaming aa --precision f16
# Its links interpolated (in place, copies in the wall cells, some in halo planes) and the outlet letting
# sound out (its references in the outlet cells).
same_as_single "lbm obstacle in place, interpolated, non-reflecting" forces.csv $lbmbody --streaming aa \
    --bounce-back interpolated --outlet non-reflecting --outlet-memory 1
# The same on D3Q27, whose corner links cross the cuts too.
same_as_single "lbm D3Q27 obstacle in place, interpolated, non-reflecting" forces.csv $lbmbody --streaming aa \
    --bounce-back interpolated --outlet non-reflecting --outlet-memory 1 --velocities d3q27
same_as_single "lbm D3Q27 obstacle two-lattice f32, flow" velocity.npy $lbmbody --streaming ab --velocities d3q27
# An in-place f16 cavity stopped at an odd step on 2 ranks resumes on 3 and on 1 to the straight bytes.
lbmck="cavity --engine $engine --size 10x9x7 --closed-z --re 20 --precision f16 --streaming aa"
"$lbm" $lbmck --steps 24 --output "$work/lbm-straight" >/dev/null || { echo "lbm straight run FAIL"; status=1; }
mpirun_ -np 2 "$lbm" $lbmck --mpi --steps 11 --checkpoint-every 11 --output "$work/lbm-half" >"$work/log" 2>&1 \
    || { cat "$work/log"; status=1; }
for np in 3 1; do
    mpirun_ -np "$np" "$lbm" $lbmck --mpi --steps 24 --resume "$work/lbm-half/checkpoint" \
        --output "$work/lbm-resumed$np" >"$work/log" 2>&1 || { cat "$work/log"; status=1; }
    same_bytes "lbm in-place cavity f16, 2 MPI ranks then resumed on $np" \
        "$work/lbm-resumed$np/velocity.npy" "$work/lbm-straight/velocity.npy"
done
# --cut: one rank splits its steps as a decomposed run does (halo layers from itself where the axis
# wraps); on a GPU through NCCL too, the boundary layers and their exchange beside the interior.
cut_same() {
    local name=$1 file=$2 exe=$3 halos
    shift 3
    rm -rf "$work/cut-single"
    "$exe" "$@" --output "$work/cut-single" >/dev/null || { echo "$name: the one-domain run failed FAIL"; status=1; return; }
    for halos in host $([ "$engine" = device ] && echo nccl); do
        rm -rf "$work/cut"
        "$exe" "$@" --gpus 1 --cut --halos "$halos" --output "$work/cut" >"$work/log" 2>&1 \
            || { cat "$work/log"; status=1; continue; }
        same_bytes "$name, cut on one rank, $halos halos" "$work/cut/$file" "$work/cut-single/$file"
    done
}
cut_same "diffusion f32 21x17x23" diffusion.npy "$bin" --engine "$engine" --size 21x17x23 --steps 60
cut_same "diffusion f64 21x17x23, passes of 4 steps" diffusion.npy "$bin" --engine "$engine" --size 21x17x23 \
    --steps 61 --precision f64 --temporal 4
cut_same "lbm taylor-green f32" velocity.npy "$lbm" taylor-green --engine "$engine" --streaming ab \
    --size 24x20x17 --steps 40
cut_same "advection packed 41x37" field.npy "$adv" swirl --engine "$engine" --size 41x37 --steps 30 \
    --kernel packed
# lqcd: BiCGStab with the dot products summed over the ranks; the same iterations and |x| to 10 digits
# (the sums are grouped differently, so the last bits may differ).
lqcd_line() { grep -o 'converged in [0-9]* iterations.*|x| = [0-9.]*e[0-9+-]*' "$1" | sed -E 's/\([^)]*\)//; s/(\.[0-9]{9})[0-9]*/\1/'; }
mpirun_ -np 1 "$lqcd" solve --engine host --mpi --dims 4x4x6x10 --antiperiodic-t --tol 1e-10 >"$work/lqcd1" 2>&1 || true
want=$(lqcd_line "$work/lqcd1")
for np in 2 3; do
    mpirun_ -np "$np" "$lqcd" solve --engine host --mpi --dims 4x4x6x10 --antiperiodic-t --tol 1e-10 >"$work/lqcd$np" 2>&1 || true
    if [ -n "$want" ] && [ "$(lqcd_line "$work/lqcd$np")" = "$want" ]; then
        echo "lqcd solve, $np MPI ranks (t split): as on one rank ($want) PASS"
    else
        cat "$work/lqcd1" "$work/lqcd$np"
        echo "lqcd solve, $np MPI ranks: differs from one rank FAIL"
        status=1
    fi
done
# Four ranks on two time slices: the rank grid cuts z too (edges and corners through the halo plan),
# or, placed by --grid, y and z.
mpirun_ -np 1 "$lqcd" solve --engine host --mpi --dims 4x4x6x2 --tol 1e-10 >"$work/lqcd1" 2>&1 || true
want=$(lqcd_line "$work/lqcd1")
for grid in "t and z split" "2x2x1"; do
    args=()
    [ "$grid" = 2x2x1 ] && args=(--grid 2x2x1) && grid="--grid 2x2x1: y and z split"
    mpirun_ -np 4 "$lqcd" solve --engine host --mpi "${args[@]}" --dims 4x4x6x2 --tol 1e-10 >"$work/lqcd4" 2>&1 || true
    if [ -n "$want" ] && [ "$(lqcd_line "$work/lqcd4")" = "$want" ]; then
        echo "lqcd solve, 4 MPI ranks ($grid): as on one rank PASS"
    else
        cat "$work/lqcd1" "$work/lqcd4"
        echo "lqcd solve, 4 MPI ranks ($grid): differs     FAIL"
        status=1
    fi
done
# expect_refusal NAME PATTERN COMMAND...: the job fails (mpirun stops the other ranks once one has
# failed) and a rank says why.
expect_refusal() {
    local name=$1 pattern=$2
    shift 2
    if mpirun_ "$@" >"$work/log" 2>&1; then
        echo "$name: should fail                                     FAIL"
        status=1
    elif grep -q "$pattern" "$work/log"; then
        echo "$name: clear error                                     PASS"
    else
        cat "$work/log"
        echo "$name: no clear error                                  FAIL"
        status=1
    fi
}
expect_refusal "diffusion, 3 ranks on 2 z planes" "2 planes but 3 ranks" \
    -np 3 "$bin" --engine host --mpi --size 8x8x2 --steps 2 --output "$work/bad"
expect_refusal "advection, 3 ranks on 5 rows (halo 2)" "thinner than the halo" \
    -np 3 "$adv" swirl --engine host --mpi --size 41x5 --steps 2 --output "$work/bad"
expect_refusal "lbm, 3 ranks on 2 z planes" "start at most 2 MPI ranks" \
    -np 3 "$lbm" taylor-green --engine host --mpi --size 16x16x2 --steps 20 --output "$work/bad"
# Halos through NCCL are for GPU memory: refused on the CPU engine, on every rank.
expect_refusal "lbm --halos nccl on the CPU engine" "moves GPU memory" \
    -np 2 "$lbm" taylor-green --engine host --mpi --halos nccl --streaming ab --size 16x16x8 --steps 20 --output "$work/bad"
# NCCL halos, where this machine has a GPU per rank (builds with the `nccl` feature): two ranks, rank r
# on GPU r, must write the bytes of the one-domain run.
gpus=$( (nvidia-smi -L 2>/dev/null || true) | wc -l)
# An mpirun wrapper that shows each rank only its own GPU, as some batch systems start them.
one_gpu_each=(bash -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"' _)
if [ "$engine" = device ] && [ "$gpus" -ge 2 ]; then
    # nccl_same NAME FILE [mpirun wrapper...] -- BINARY ARGS...: one domain, then 2 ranks on 2 GPUs
    # with --halos nccl (rank r picks GPU r).
    nccl_same() {
        local name=$1 file=$2
        shift 2
        local wrap=()
        while [ "$1" != -- ]; do wrap+=("$1"); shift; done
        local exe=$2
        shift 2
        rm -rf "$work/nccl-single" "$work/nccl2"
        "$exe" "$@" --output "$work/nccl-single" >/dev/null || { echo "$name: the one-domain run failed FAIL"; status=1; return; }
        mpirun_ -np 2 "${wrap[@]}" "$exe" "$@" --mpi --halos nccl --output "$work/nccl2" >"$work/log" 2>&1 \
            || { cat "$work/log"; status=1; return; }
        same_bytes "$name, 2 GPUs, NCCL halos" "$work/nccl2/$file" "$work/nccl-single/$file"
    }
    nccl_same "diffusion f32 21x17x23" diffusion.npy -- "$bin" --engine device --size 21x17x23 --steps 60
    nccl_same "diffusion f32 21x17x23, passes of 3 steps" diffusion.npy -- "$bin" --engine device \
        --size 21x17x23 --steps 61 --temporal 3
    nccl_same "diffusion f32 21x17x23, each rank seeing one GPU" diffusion.npy "${one_gpu_each[@]}" -- \
        "$bin" --engine device --size 21x17x23 --steps 60
    # One process driving both GPUs (--gpus 2: a thread per GPU, one NCCL communicator).
    "$bin" --engine device --size 21x17x23 --steps 60 --gpus 2 --halos nccl --output "$work/threads2" \
        >"$work/log" 2>&1 || cat "$work/log"
    same_bytes "diffusion f32 21x17x23, --gpus 2 (one process), NCCL halos" "$work/threads2/diffusion.npy" \
        "$work/nccl-single/diffusion.npy"
    nccl_same "advection packed 41x37" field.npy -- "$adv" swirl --engine device --size 41x37 --steps 30 \
        --kernel packed
    nccl_same "lbm 3-D cavity f64" velocity.npy -- "$lbm" cavity --engine device --streaming ab --precision f64 \
        --size 18x18x11 --closed-z --re 20 --steps 300
    nccl_same "lbm taylor-green f16" density.npy -- "$lbm" taylor-green --engine device --streaming ab \
        --precision f16 --size 16x12x13 --steps 30
    # nccl_resume NAME FILE HALF WHOLE -- BINARY ARGS...: HALF steps on 2 GPUs through NCCL with a
    # checkpoint, then resumed to WHOLE on 2 GPUs (MPI ranks, and one process's threads) and on 1 GPU:
    # each the bytes of WHOLE steps on one domain.
    nccl_resume() {
        local name=$1 file=$2 half=$3 whole=$4
        shift 5
        local exe=$1
        shift
        rm -rf "$work"/nr-*
        "$exe" "$@" --steps "$whole" --output "$work/nr-single" >/dev/null \
            || { echo "$name: the one-domain run failed FAIL"; status=1; return; }
        mpirun_ -np 2 "$exe" "$@" --mpi --halos nccl --steps "$half" --checkpoint-every "$half" \
            --output "$work/nr-half" >"$work/log" 2>&1 || { cat "$work/log"; status=1; return; }
        local resume=(--steps "$whole" --resume "$work/nr-half/checkpoint")
        mpirun_ -np 2 "$exe" "$@" --mpi --halos nccl "${resume[@]}" --output "$work/nr-mpi" >"$work/log" 2>&1 \
            || cat "$work/log"
        same_bytes "$name, 2 GPUs NCCL, resumed on 2 GPUs (MPI)" "$work/nr-mpi/$file" "$work/nr-single/$file"
        "$exe" "$@" --gpus 2 --halos nccl "${resume[@]}" --output "$work/nr-threads" >"$work/log" 2>&1 \
            || cat "$work/log"
        same_bytes "$name, 2 GPUs NCCL, resumed on 2 GPUs (--gpus 2)" "$work/nr-threads/$file" \
            "$work/nr-single/$file"
        "$exe" "$@" "${resume[@]}" --output "$work/nr-one" >"$work/log" 2>&1 || cat "$work/log"
        same_bytes "$name, 2 GPUs NCCL, resumed on 1 GPU" "$work/nr-one/$file" "$work/nr-single/$file"
    }
    nccl_resume "diffusion f32 21x17x23" diffusion.npy 30 60 -- "$bin" --engine device --size 21x17x23
    nccl_resume "advection packed 41x37" field.npy 15 30 -- "$adv" swirl --engine device --size 41x37 \
        --kernel packed
    nccl_resume "lbm 3-D cavity f32" velocity.npy 11 24 -- "$lbm" cavity --engine device --streaming ab \
        --precision f32 --size 18x18x11 --closed-z --re 20
    expect_refusal "lbm --halos nccl with in-place streaming" "two-lattice streaming" \
        -np 2 "$lbm" taylor-green --engine device --mpi --halos nccl --streaming aa --size 16x16x8 --steps 20 --output "$work/bad"
else
    echo "SKIPPED (NCCL halos): they need the device engine and 2 GPUs ($engine engine, $gpus GPUs here)"
fi
# lqcd on GPUs: the lattice split into blocks, one per rank (all ranks on GPU 0 here, ghosts and sums
# through host memory), along t (the default grid), along z, y and z, or z and t (--grid), must take the
# one-GPU solve's iterations and give its |x| to 10 digits; so must 2 GPUs with NCCL (ghosts behind the
# inner sites, every solver variant) where the machine has them.
if [ "$engine" = device ]; then
    gpu_lqcd() {
        echo "$(grep -o '[0-9]* iterations' "$1" | head -1) $(grep -o '|x| = [0-9.]*e[0-9+-]*' "$1" \
            | sed -E 's/(\.[0-9]{9})[0-9]*/\1/')"
    }
    lqcd_args=(solve --engine device --precision f64 --dims 4x4x8x12 --antiperiodic-t --tol 1e-10)
    "$lqcd" "${lqcd_args[@]}" >"$work/lqcd-gpu" 2>&1 || true
    want=$(gpu_lqcd "$work/lqcd-gpu")
    # same_as_gpu NAME: the split run's log ($work/lqcd-split) against the one-GPU solve.
    same_as_gpu() {
        if [ "$want" != " " ] && [ "$(gpu_lqcd "$work/lqcd-split")" = "$want" ]; then
            echo "$1: as on one GPU ($want) PASS"
        else
            cat "$work/lqcd-gpu" "$work/lqcd-split"
            echo "$1: differs from one GPU FAIL"
            status=1
        fi
    }
    # lqcd_split NAME NP [mpirun wrapper...] -- OPTIONS...: NP ranks against the one-GPU solve.
    lqcd_split() {
        local name=$1 np=$2
        shift 2
        local wrap=()
        while [ "$1" != -- ]; do wrap+=("$1"); shift; done
        shift
        mpirun_ -np "$np" "${wrap[@]}" "$lqcd" "${lqcd_args[@]}" --mpi "$@" >"$work/lqcd-split" 2>&1 || true
        same_as_gpu "$name"
    }
    lqcd_split "lqcd GPU solve, 2 ranks (t split), host halos, sync" 2 -- --variant sync
    lqcd_split "lqcd GPU solve, 3 ranks (t split), host halos, async" 3 -- --variant async
    lqcd_split "lqcd GPU solve, 2 ranks (z split), host halos, sync" 2 -- --grid 1x2x1 --variant sync
    # One iteration a block: every iteration a point where ranks reading their state at different
    # times could stop apart (they must not: the last collective calls would go unmatched, a hang).
    lqcd_split "lqcd GPU solve, 4 ranks (y and z split), host halos, async, one-iteration blocks" 4 -- \
        --grid 2x2x1 --variant async --check-every 1
    lqcd_split "lqcd GPU solve, 6 ranks (z and t split), host halos, sync" 6 -- --grid 1x2x3 \
        --variant sync
    lqcd_split "lqcd GPU solve, 1 rank cut along y, z and t (--cut), host halos, async" 1 -- \
        --cut y,z,t --variant async
    # NCCL to itself on one GPU: packing, the exchange and the overlapped inner and outer sites.
    "$lqcd" "${lqcd_args[@]}" --gpus 1 --halos nccl --cut y,z,t --variant graph >"$work/lqcd-split" 2>&1 || true
    same_as_gpu "lqcd GPU solve, --gpus 1 --cut y,z,t, NCCL, graph"
    expect_refusal "lqcd GPU split, graph variant with host halos" "halos nccl" \
        -np 2 "$lqcd" "${lqcd_args[@]}" --mpi --variant graph
    expect_refusal "lqcd GPU split, 4 ranks along 6 t slices" "at most 3 GPUs along t" \
        -np 4 "$lqcd" solve --engine device --dims 4x4x8x6 --mpi --grid 1x1x4 --variant sync
    expect_refusal "lqcd GPU split, a grid of 4 ranks on 2" "places 4 ranks, but the run has 2" \
        -np 2 "$lqcd" "${lqcd_args[@]}" --mpi --grid 1x2x2 --variant sync
    if [ "$gpus" -ge 2 ]; then
        for variant in sync async graph waitkernel streamwait; do
            lqcd_split "lqcd GPU solve, 2 GPUs, NCCL, $variant" 2 -- --halos nccl --variant "$variant"
        done
        lqcd_split "lqcd GPU solve, 2 GPUs, NCCL, no overlap" 2 -- --halos nccl --no-overlap
        lqcd_split "lqcd GPU solve, 2 GPUs each seeing one, NCCL, z split, async" 2 "${one_gpu_each[@]}" -- \
            --halos nccl --grid 1x2x1 --variant async
        "$lqcd" "${lqcd_args[@]}" --gpus 2 --halos nccl --variant graph >"$work/lqcd-split" 2>&1 || true
        same_as_gpu "lqcd GPU solve, --gpus 2 (one process), NCCL, graph"
    else
        echo "SKIPPED (lqcd on 2 GPUs with NCCL): $gpus GPU here"
        # Two NCCL ranks on the one GPU: refused on every rank, naming them, before NCCL starts.
        expect_refusal "NCCL halos, 2 MPI ranks on one GPU" "run on the same GPU" \
            -np 2 "$bin" --engine device --mpi --halos nccl --size 8 --steps 2 --output "$work/bad"
        if "$bin" --engine device --gpus 2 --halos nccl --size 8 --steps 2 --output "$work/bad" \
            >"$work/log" 2>&1; then
            echo "NCCL halos, --gpus 2 on one GPU: should fail FAIL"
            status=1
        elif grep -q "run on the same GPU" "$work/log"; then
            echo "NCCL halos, --gpus 2 on one GPU: clear error PASS"
        else
            cat "$work/log"
            echo "NCCL halos, --gpus 2 on one GPU: no clear error FAIL"
            status=1
        fi
    fi
fi
# Ranks started with different options (here different step counts) must all refuse, not deadlock.
expect_refusal "ranks with different options" "started with different options" \
    -np 2 bash -c "exec '$bin' --engine host --mpi --size 8x8x8 --steps \$((5 + OMPI_COMM_WORLD_RANK)) --output '$work/bad'"
exit $status
