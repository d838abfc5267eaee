#!/usr/bin/env bash
# The decomposed runs on the CPU engine under MPI (CI has no GPU): `diffusion --mpi` over 1, 2 and 3 ranks
# must write the same bytes as the undecomposed run (odd sizes, so 3 ranks split unevenly), and more ranks
# than z planes must fail on every rank with a clear message, not hang.
#
# Needs OpenMPI and libclang (for the mpi crate's bindings); installs them with apt where missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mpicc >/dev/null || ! ls /usr/lib/llvm-*/lib/libclang*.so >/dev/null 2>&1; then
    echo "installing OpenMPI and libclang (apt)"
    packages="openmpi-bin libopenmpi-dev libclang-dev"
    apt-get install -y -q $packages >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q $packages >/dev/null; }
fi
cargo build --release --features mpi --bin diffusion
bin=$PWD/target/release/diffusion
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun_() { timeout 300 mpirun --allow-run-as-root --oversubscribe "$@"; }

status=0
for prec in f32 f64; do
    "$bin" --engine host --size 21x17x23 --steps 60 --precision "$prec" --output "$work/single-$prec" >/dev/null
    want=$(md5sum <"$work/single-$prec/diffusion.npy")
    for np in 1 2 3; do
        mpirun_ -np "$np" "$bin" --engine host --mpi --size 21x17x23 --steps 60 --precision "$prec" \
            --output "$work/mpi$np-$prec" >"$work/log" 2>&1 || { cat "$work/log"; status=1; continue; }
        got=$(md5sum <"$work/mpi$np-$prec/diffusion.npy")
        if [ "$got" = "$want" ]; then
            echo "diffusion $prec, $np MPI ranks: bit-identical to one domain  PASS"
        else
            echo "diffusion $prec, $np MPI ranks: differs from one domain       FAIL"
            status=1
        fi
    done
done
if mpirun_ -np 3 "$bin" --engine host --mpi --size 8x8x2 --steps 2 --output "$work/bad" >"$work/log" 2>&1; then
    echo "3 ranks on 2 z planes should fail                        FAIL"
    status=1
elif [ "$(grep -c '2 planes but 3 ranks' "$work/log")" -eq 3 ]; then
    echo "3 ranks on 2 z planes: clear error on every rank          PASS"
else
    cat "$work/log"
    echo "3 ranks on 2 z planes: no clear error on every rank       FAIL"
    status=1
fi
exit $status
