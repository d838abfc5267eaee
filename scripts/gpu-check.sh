#!/usr/bin/env bash
# Every GPU check and benchmark of lattice-gpu in one call.
#
#   scripts/gpu-check.sh stage   (on a build machine with Rust) builds the release binaries and the test
#                                binaries, strips them and packs them into .gpu-bin/bundle.tar.xz (ignored
#                                by git; carry .gpu-bin), which `run` unpacks
#   scripts/gpu-check.sh run [PARTS]
#                                (on the GPU machine, which has no Rust) runs them from .gpu-bin/; PARTS
#                                (default: all of them) is any of
#                                  tests      every test binary with LATTICE_GPU_REQUIRE_GPU=1 (a GPU test
#                                             must not skip there)
#                                  diffusion  the diffusion application, its bad-input errors, and the
#                                             benchmark tables (tuned over all kernel variants, then each
#                                             variant alone at 256^3, 512^3 and 8x512x512)
#                                  lqcd       solve, propagator and bad input of the lqcd application, and
#                                             its dslash / solver-variant benchmark
#                                  lbm        the lattice-Boltzmann cases (cavity against Ghia, Poiseuille,
#                                             Taylor-Green in f16), bad input, and the MLUPs/s benchmark
#                                  advection  rotation and swirl runs, bad input, and the benchmark of every
#                                             kernel variant (tuned) against the copy bandwidth
#                                  poisson    mixed, all-f64 and AoS runs at 256^3, `poisson bench`
#                                             (solve times at 128^3 and 256^3 for every technique, levels
#                                             against their floors, the smoothers against the copy bandwidth)
#                                             and every technique at 256^3 with 1 to 4 smoothing sweeps
#                                  poisson512 `poisson bench` at 512^3: f64 and mixed, plain and with every
#                                             technique (minutes of set-up: a call of its own)
#                                  lqcdsplit  what the lqcd GPU split costs on one GPU: BiCGStab and M_hat
#                                             (f32, 32^3x64 and 48^3x96) unsplit, then split over one rank
#                                             (NCCL) cutting no axis, t, z, and y, z and t (--cut: ghosts
#                                             exchanged with itself), with and without overlap (not in the
#                                             default set)
#                                  temporal   diffusion's temporally blocked passes (1 to 4 steps; the
#                                             general form and the column form) at 256^3, 512^3 and
#                                             8x512x512 against the tuned single step (not in the
#                                             default set)
#                                  stencilsplit what the split costs diffusion (512^3, 512x512x256), LBM
#                                             (384^3, two-lattice) and advection (8192^2, 8192x4096) on one
#                                             GPU: unsplit, then cut over one rank (--cut) with host
#                                             (diffusion) and NCCL halos, with and without overlap (not in
#                                             the default set)
#                                  example    the Gray-Scott example (a user's crate with its own kernels):
#                                             runs in 3-D and 2-D, bad input, and its step at 256^3 against
#                                             the copy bandwidth (not in the default set)
#                                  summary    the figures of the README's summary, in one call (not in the
#                                             default set)
#                                  sanitize   compute-sanitizer on one small run of each application: memcheck
#                                             on all five, racecheck, synccheck and initcheck on diffusion,
#                                             LBM and the lqcd solve (not in the default set)
#                                  soak       every application over and over for $SOAK_SECONDS (default 560:
#                                             what fits one 10-minute device call)
#                                             in all, mixed sizes and precisions, each run's result checked
#                                             against its reference (not in the default set)
#                                  mpi        scripts/mpi-check.sh with the `mpi` builds of the applications
#                                             and LATTICE_GPU_MPI_ENGINE=device: diffusion, advection and
#                                             lbm split over 1, 2 and 3 ranks (all on GPU 0) against the
#                                             one-domain GPU run, byte for byte (not in the default set)
#                                logs go to .gpu-bin/out (with $OUT: its CSVs and logs.tar.gz), a short summary table last.
#                                All parts together take longer than one 10-minute device call: run them in
#                                groups, e.g. `run tests lbm`, then `run advection poisson`, `run diffusion`,
#                                `run lqcd`.
#   scripts/gpu-check.sh profile (on the GPU machine) Nsight Compute figures of the diffusion kernel at
#                                512^3 (f32 and f64): DRAM and L1/L2 throughput, occupancy, stall reasons.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.gpu-bin

stage() {
    set -e
    rm -rf "$BIN" && mkdir -p "$BIN/tests"
    # The workspace's default members: each application's crate with its binary, and the facade with
    # scaling-plot.
    cargo build --release --bins
    cp target/release/diffusion target/release/lqcd target/release/lbm target/release/advection target/release/poisson \
        target/release/scaling-plot "$BIN/"
    cargo test --release --workspace --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' \
        | grep -v -e '/nccl_gpu-' -e '/build_script-' | while read -r exe; do cp "$exe" "$BIN/tests/"; done
    # (build_script runs cargo, which the GPU machine lacks; CI runs it.)
    # The Gray-Scott example, built as the user's crate it is (its own workspace, this target directory).
    mkdir -p "$BIN/example"
    CARGO_TARGET_DIR="$PWD/target" cargo build --release --manifest-path examples/gray-scott/Cargo.toml
    cp target/release/gray-scott "$BIN/example/"
    CARGO_TARGET_DIR="$PWD/target" cargo test --release --manifest-path examples/gray-scott/Cargo.toml \
        --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' \
        | while read -r exe; do cp "$exe" "$BIN/tests/gray_scott_$(basename "$exe")"; done
    # The NCCL tests (the `nccl` feature; libnccl is loaded at run time). Without the feature the file
    # holds none, and that binary's log would take the name: left out above.
    cargo test --release -p lattice-gpu --features nccl --test nccl_gpu --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' \
        | while read -r exe; do cp "$exe" "$BIN/tests/"; done
    # The applications with the `mpi` and `nccl` features (decomposed runs), for the `mpi` part and
    # scripts/scaling-check.sh.
    mkdir -p "$BIN/mpi"
    if command -v mpicc >/dev/null; then
        cargo build --release --features mpi,nccl --bin diffusion --bin advection --bin lbm --bin lqcd
        cp target/release/diffusion target/release/advection target/release/lbm target/release/lqcd "$BIN/mpi/"
    else
        echo "no OpenMPI here (apt install libopenmpi-dev openmpi-bin libclang-dev): the mpi part is not staged"
    fi
    mkdir -p "$BIN/benches"
    cargo bench --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        print(m["executable"])' \
        | while read -r exe; do cp "$exe" "$BIN/benches/"; done
    # The device call carries at most 64 MiB: stripped and packed with xz, the binaries take about a
    # tenth (gzip left 78 MB at 2026-11-26: the test binaries share most of their code, which xz's
    # larger window finds).
    strip "$BIN"/* "$BIN"/tests/* "$BIN"/benches/* "$BIN"/mpi/* "$BIN"/example/* 2>/dev/null || true
    ls -la "$BIN" "$BIN/tests"
    tar cf - -C "$BIN" . | xz -T0 -6 >"$BIN.tar.xz"
    rm -rf "$BIN" && mkdir -p "$BIN" && mv "$BIN.tar.xz" "$BIN/bundle.tar.xz"
    du -sh "$BIN"
}

# Unpacks what `stage` packed (once per machine).
unpack() {
    if [ -f "$BIN/bundle.tar.xz" ] && [ ! -x "$BIN/diffusion" ]; then
        xz -dc "$BIN/bundle.tar.xz" | tar xf - -C "$BIN"
    fi
}

run() {
    unpack
    local parts=" ${*:-tests diffusion lqcd lbm advection poisson} "
    # With $OUT (the device machine's return folder, which takes few files) the work happens in /tmp and
    # $OUT gets the CSVs plus one archive of every log, PNG and the tune cache.
    local out=$BIN/out
    [ -n "${OUT:-}" ] && out=/tmp/gpu-check && rm -rf "$out"
    mkdir -p "$out"
    export PTXAS=${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
    local summary=() status=0
    # The summary also grows in $OUT as it goes, so a call cut off by its time limit still reports.
    record() {
        summary+=("$(printf '%-44s %s' "$1" "$2")")
        [ "$2" = PASS ] || status=1
        [ -n "${OUT:-}" ] && printf '%-44s %s\n' "$1" "$2" >>"$OUT/summary.txt"
    }
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"

    for t in "$BIN"/tests/*; do
        [[ $parts == *" tests "* ]] || break
        local name
        name=$(basename "$t" | sed 's/-[0-9a-f]*$//')
        # A hang (a wait kernel never released) must cost minutes, not the whole device call.
        if LATTICE_GPU_REQUIRE_GPU=1 LATTICE_GPU_DIFFUSION_BIN="$PWD/$BIN/diffusion" \
            LATTICE_GPU_LQCD_BIN="$PWD/$BIN/lqcd" LATTICE_GPU_LBM_BIN="$PWD/$BIN/lbm" \
            LATTICE_GPU_ADVECTION_BIN="$PWD/$BIN/advection" LATTICE_GPU_POISSON_BIN="$PWD/$BIN/poisson" \
            LATTICE_GPU_SCALING_PLOT_BIN="$PWD/$BIN/scaling-plot" \
            GRAY_SCOTT_BIN="$PWD/$BIN/example/gray-scott" timeout 180 "$t" --test-threads=1 >"$out/test-$name.log" 2>&1; then
            record "tests: $name ($(grep -ho '[0-9]* passed' "$out/test-$name.log" | head -1))" PASS
        else
            record "tests: $name" FAIL
            tail -40 "$out/test-$name.log"
        fi
    done

    # expect NAME ok|fail PATTERN LOG COMMAND...: PASS when COMMAND exits as expected and LOG has PATTERN.
    expect() {
        local name=$1 want=$2 pattern=$3 log=$4 rc
        shift 4
        timeout 300 "$@" >"$log" 2>&1
        rc=$?
        if { [ "$want" = ok ] && [ $rc -eq 0 ]; } || { [ "$want" = fail ] && [ $rc -ne 0 ]; } \
            && grep -q "$pattern" "$log"; then
            record "$name" PASS
        else
            record "$name" FAIL
        fi
        cat "$log"
    }
    # bench NAME LOG COMMAND...: runs a benchmark, its output shown and kept in LOG; PASS when it succeeds.
    bench() {
        local name=$1 log=$2
        shift 2
        if "$@" 2>&1 | tee "$log"; then
            record "$name" PASS
        else
            record "$name" FAIL
        fi
    }
    export LATTICE_GPU_TUNE_CACHE="$out/tunecache.tsv"
    [[ $parts == *" example "* ]] && example_part "$out"
    [[ $parts == *" summary "* ]] && summary_part "$out"
    [[ $parts == *" diffusion "* ]] && diffusion_part "$out"
    [[ $parts == *" temporal "* ]] && temporal_part "$out"
    [[ $parts == *" lqcd "* ]] && lqcd_part "$out"
    [[ $parts == *" lqcdsplit "* ]] && lqcdsplit_part "$out"
    [[ $parts == *" stencilsplit "* ]] && stencilsplit_part "$out"
    [[ $parts == *" lbm "* ]] && lbm_part "$out"
    [[ $parts == *" advection "* ]] && advection_part "$out"
    [[ $parts == *" poisson "* ]] && poisson_part "$out"
    [[ $parts == *" poisson512 "* ]] && poisson512_part "$out"
    [[ $parts == *" sanitize "* ]] && sanitize_part "$out"
    [[ $parts == *" soak "* ]] && soak_part "$out"
    if [[ $parts == *" mpi "* ]]; then
        if LATTICE_GPU_MPI_BIN=$BIN/mpi LATTICE_GPU_MPI_ENGINE=device LATTICE_GPU_REQUIRE_MPI=1 \
            timeout 400 scripts/mpi-check.sh 2>&1 | tee "$out/mpi-check.log"; then
            record "decomposed runs on the GPU (mpi-check, $(grep -c PASS "$out/mpi-check.log") checks)" PASS
        else
            record "decomposed runs on the GPU (mpi-check)" FAIL
        fi
    fi
    if [ -n "${OUT:-}" ]; then
        tar czf "$OUT/logs.tar.gz" -C "$out" --exclude='*.npy' --exclude='*.vtk' --exclude='*.raw' .
        cp "$out"/*.csv "$OUT/" 2>/dev/null
    fi
    echo
    printf '%s\n' "${summary[@]}"
    return $status
}

diffusion_part() {
    local out=$1
    expect "diffusion 256^3 tuned (tunes)" ok "auto-tuned" "$out/diffusion-run1.log" \
        "$BIN/diffusion" --size 256 --steps 2000 --output "$out/diffusion"
    expect "diffusion 256^3 second run uses tune cache" ok "from the tune cache" "$out/diffusion-run2.log" \
        "$BIN/diffusion" --size 256 --steps 2000 --output "$out/diffusion"
    expect "diffusion f64 fixed device engine" ok "relative L2 error" "$out/diffusion-f64.log" \
        "$BIN/diffusion" --size 256 --steps 200 --precision f64 --engine device --block 32x8 --march 4 \
        --output "$out/diffusion64"
    expect "diffusion 4096^3 f64: clear out-of-memory error" fail "GiB of GPU memory but only" "$out/oom.log" \
        "$BIN/diffusion" --size 4096 --precision f64 --engine device
    for v in zqueue tiled vector; do
        expect "diffusion f32 device engine, $v variant" ok "relative L2 error" "$out/diffusion-$v.log" \
            "$BIN/diffusion" --size 256 --steps 200 --engine device --block 32x4 --march 8 --variant "$v" \
            --output "$out/diffusion-$v"
    done

    for b in "$BIN"/benches/*; do
        if "$b" --bench --noplot >"$out/criterion-$(basename "$b").log" 2>&1; then
            record "cargo bench: $(basename "$b" | sed 's/-[0-9a-f]*$//')" PASS
        else
            record "cargo bench: $(basename "$b" | sed 's/-[0-9a-f]*$//')" FAIL
        fi
        grep -E "^diffusion|time:|thrpt:" "$out/criterion-$(basename "$b").log"
    done

    bench "diffusion bench" "$out/bench.log" "$BIN/diffusion" bench --csv "$out/bench.csv"
    # Each kernel variant tuned alone, and the tuner's pick among them, side by side.
    bench "diffusion bench --variants" "$out/bench-variants.log" \
        "$BIN/diffusion" bench --sizes 256,512,8x512x512 --variants plain,zqueue,tiled,vector,auto --csv "$out/bench-variants.csv"
    echo
    grep -E "^\| " "$out/bench.log"
    echo
    grep -E "^\| " "$out/bench-variants.log"
}

temporal_part() {
    local out=$1
    # Temporal blocking (issue 37): passes of 1 to 4 steps against the tuned single step.
    bench "diffusion bench --temporal" "$out/bench-temporal.log" \
        "$BIN/diffusion" bench --sizes 256,512,8x512x512 --temporal 1,2,3,4 --csv "$out/bench-temporal.csv"
    echo
    grep -E "^\| " "$out/bench-temporal.log"
}

lqcd_part() {
    local out=$1
    expect "lqcd solve f64 (async)" ok "true residual" "$out/lqcd-solve.log" \
        "$BIN/lqcd" solve --engine device --dims 8x8x8x16 --antiperiodic-t
    expect "lqcd propagator f32 graph + pion" ok "pion" "$out/lqcd-propagator.log" \
        "$BIN/lqcd" propagator --engine device --dims 8x8x8x16 --precision f32 --tol 1e-6 --variant graph \
        --antiperiodic-t --output "$out/lqcd"
    expect "lqcd kappa 0.3: clear error" fail "kappa" "$out/lqcd-badkappa.log" \
        "$BIN/lqcd" solve --engine device --kappa 0.3
    expect "lqcd solve f32 in f64, reliable updates" ok "true residual" "$out/lqcd-mixed.log" \
        "$BIN/lqcd" solve --engine device --dims 8x8x8x16 --antiperiodic-t --sloppy f32
    expect "lqcd solve half in f64, reliable updates" ok "true residual" "$out/lqcd-mixed-half.log" \
        "$BIN/lqcd" solve --engine device --dims 8x8x8x16 --antiperiodic-t --sloppy half
    expect "lqcd solve clover f32 in f64, CGNR" ok "true residual" "$out/lqcd-mixed-clover.log" \
        "$BIN/lqcd" solve --engine device --dims 8x8x8x16 --antiperiodic-t --csw 1 --sloppy f32 --solver cgnr
    expect "lqcd sloppy f64 under f32: clear error" fail "sloppy" "$out/lqcd-badsloppy.log" \
        "$BIN/lqcd" solve --engine device --precision f32 --sloppy f64
    bench "lqcd bench" "$out/lqcd-bench.log" \
        "$BIN/lqcd" bench --solver 4,8,16,32x32x32x64,48x48x48x96 --csv "$out/lqcd-bench.csv"
    bench "lqcd bench-mixed" "$out/lqcd-bench-mixed.log" \
        "$BIN/lqcd" bench-mixed --cgnr --csv "$out/lqcd-bench-mixed.csv"
    bench "lqcd bench-mixed clover" "$out/lqcd-bench-mixed-clover.log" \
        "$BIN/lqcd" bench-mixed --csw 1 --cgnr --csv "$out/lqcd-bench-mixed-clover.csv"
    echo
    grep -E "^\| " "$out/lqcd-bench.log"
}

lqcdsplit_part() {
    local out=$1 dims cut mode log line
    # The copy bandwidth of the same call, which the figures are quoted against.
    "$BIN/diffusion" bench --sizes 32 --precision f32 >"$out/lqcdsplit-copy.log" 2>&1
    grep -o 'copy bandwidth [0-9.]* GB/s' "$out/lqcdsplit-copy.log" | head -1
    local table=("| lattice | run | M_hat us | BiCGStab us/iteration: sync / async / graph / waitkernel / streamwait |")
    for dims in 32x32x32x64 48x48x48x96; do
        for cut in unsplit none t z y,z,t; do
            for mode in overlap seq; do
                local args=(solve --engine device --precision f32 --dims "$dims" --kappa 0.18 --bench 200
                    --check-every 20)
                [ "$cut" = unsplit ] && [ "$mode" = seq ] && continue
                [ "$cut" = none ] && [ "$mode" = seq ] && continue
                [ "$cut" != unsplit ] && args+=(--gpus 1 --halos nccl)
                [ "$cut" != unsplit ] && [ "$cut" != none ] && args+=(--cut "$cut")
                [ "$mode" = seq ] && args+=(--no-overlap)
                log="$out/lqcdsplit-$dims-${cut//,/}-$mode.log"
                expect "lqcd split bench $dims, cut $cut, $mode" ok "M_hat" "$log" "$BIN/mpi/lqcd" "${args[@]}"
                line="| $dims | $cut$([ "$mode" = seq ] && echo ", no overlap") |"
                line="$line $(grep -o '[0-9.]* us per application' "$log" | cut -d' ' -f1) |"
                line="$line $(grep -o 'bench [a-z]*: [0-9.]* us' "$log" | awk '{print $3}' | paste -sd/ | sed 's|/| / |g') |"
                table+=("$line")
            done
        done
    done
    printf '%s\n' "${table[@]}" | tee "$out/lqcdsplit.md"
}

stencilsplit_part() {
    local out=$1 size run
    "$BIN/diffusion" bench --sizes 32 --precision f32 >"$out/stencilsplit-copy.log" 2>&1
    grep -o 'copy bandwidth [0-9.]* GB/s' "$out/stencilsplit-copy.log" | head -1
    local table=("| application, size | run | rate |")
    # row APP SIZE RUN UNIT ARGS...: APP with ARGS and RUN's options; its last rate in UNIT to the table.
    row() {
        local app=$1 size=$2 run=$3 unit=$4 log
        shift 4
        local args=("$@" --output "$out/stencilsplit-$app")
        case $run in
            "cut, host halos") args+=(--gpus 1 --cut) ;;
            "cut, NCCL") args+=(--gpus 1 --cut --halos nccl) ;;
            "cut, NCCL, no overlap") args+=(--gpus 1 --cut --halos nccl --no-overlap) ;;
        esac
        log="$out/stencilsplit-$app-$size-${run//[ ,]/}.log"
        expect "$app $size, $run" ok "$unit" "$log" "$BIN/mpi/$app" "${args[@]}"
        table+=("| $app $size | $run | $(grep -o "[0-9.]* $unit" "$log" | tail -1) |")
    }
    for size in 512 512x512x256; do
        for run in unsplit "cut, host halos" "cut, NCCL" "cut, NCCL, no overlap"; do
            row diffusion "$size" "$run" GLUPS --engine device --block 32x4 --march 4 --variant vector \
                --size "$size" --steps 2000
        done
    done
    for run in unsplit "cut, NCCL" "cut, NCCL, no overlap"; do
        row lbm 384 "$run" MLUPs/s cavity --engine device --streaming ab --size 384 --steps 300
    done
    for size in 8192x8192 8192x4096; do
        for run in unsplit "cut, NCCL" "cut, NCCL, no overlap"; do
            row advection "$size" "$run" "G points/s" swirl --engine device --block 32x4 --unroll 4 \
                --steps 2000 --size "$size"
        done
    done
    printf '%s\n' "${table[@]}" | tee "$out/stencilsplit.md"
}

lbm_part() {
    local out=$1
    expect "lbm cavity Re 100 quasi-2-D vs Ghia" ok "against Ghia" "$out/lbm-cavity.log" \
        "$BIN/lbm" cavity --engine device --size 130x130x4 --output "$out/lbm-cavity"
    expect "lbm cavity 3-D Re 400 f16 ab" ok "wrote" "$out/lbm-cavity3d.log" \
        "$BIN/lbm" cavity --engine device --size 96 --closed-z --re 400 --precision f16 --streaming ab \
        --steps 20000 --output "$out/lbm-cavity3d"
    expect "lbm poiseuille f64 bgk" ok "parabola" "$out/lbm-poiseuille.log" \
        "$BIN/lbm" poiseuille --engine device --precision f64 --collision bgk --width 32 --steady 1e-9 \
        --output "$out/lbm-poiseuille"
    expect "lbm taylor-green f32 256^2" ok "analytic" "$out/lbm-tg.log" \
        "$BIN/lbm" taylor-green --engine device --size 256x256x4 --steps 4000 --output "$out/lbm-tg"
    expect "lbm taylor-green f16 64^2" ok "analytic" "$out/lbm-tg16.log" \
        "$BIN/lbm" taylor-green --engine device --precision f16 --size 64x64x4 --steps 2000 --output "$out/lbm-tg16"
    expect "lbm taylor-green D3Q27 f32 128^2" ok "analytic" "$out/lbm-tg27.log" \
        "$BIN/lbm" taylor-green --engine device --velocities d3q27 --size 128x128x4 --steps 2000 \
        --output "$out/lbm-tg27"
    expect "lbm lid 0.3: clear error" fail "Mach 0.3" "$out/lbm-badlid.log" \
        "$BIN/lbm" cavity --engine device --lid 0.3 --output "$out/lbm-bad"
    expect "lbm 1600^3 f64: clear out-of-memory error" fail "GiB of GPU memory but only" "$out/lbm-oom.log" \
        "$BIN/lbm" taylor-green --engine device --precision f64 --streaming ab --size 1600 --output "$out/lbm-bad"
    cp "$out"/lbm-cavity/centreline_*.csv "$out/" 2>/dev/null
    bench "lbm bench" "$out/lbm-bench.log" "$BIN/lbm" bench --velocities d3q19,d3q27 \
        --csv "$out/lbm-bench.csv"
}

advection_part() {
    local out=$1
    expect "advection rotation 1024^2, one revolution (tunes)" ok "interpolation error" "$out/adv-rotation.log" \
        "$BIN/advection" rotation --size 1024 --output "$out/adv-rotation"
    expect "advection swirl 3000x2000, shared kernel" ok "mass drift" "$out/adv-swirl.log" \
        "$BIN/advection" swirl --size 3000x2000 --steps 500 --kernel shared --png-every 250 --output "$out/adv-swirl"
    expect "advection CFL 1.5: clear error" fail "exceeds 1" "$out/adv-badcfl.log" \
        "$BIN/advection" translation --cfl 1.5 --output "$out/adv-bad"
    bench "advection bench" "$out/advection-bench.log" "$BIN/advection" bench --csv "$out/advection-bench.csv"
}

poisson_part() {
    local out=$1
    # Plain runs at 256^3, tuned (their tuning fills the cache the benchmark then reads): both
    # preconditioner precisions with the error against the manufactured solution, and AoS coefficients.
    for prec in f32 f64; do
        expect "poisson 256^3, $prec preconditioner, tuned" ok "relative L2" "$out/poisson-256-$prec.log" \
            "$BIN/poisson" --engine auto --size 256 --precision "$prec" --output "$out/poisson-256-$prec"
    done
    expect "poisson 256^3, f32, AoS coefficients" ok "relative L2" "$out/poisson-256-aos.log" \
        "$BIN/poisson" --engine auto --size 256 --layout aos --output "$out/poisson-256-aos"
    grep -h "set-up\|converged\|^level" "$out"/poisson-256-*.log
    # Mixed vs f64, SoA vs AoS, tuned vs fixed at 128^3 and 256^3; levels against their floors; the
    # finest smoother against the copy bandwidth.
    bench "poisson bench" "$out/poisson-bench.log" "$BIN/poisson" bench --csv "$out/poisson-bench.csv"
    # Every technique, 1 to 4 smoothing sweeps each way: mixed against all-f64 at equal V-cycles (the
    # same iterations) and between the fastest of each.
    bench "poisson bench, sweeps" "$out/poisson-smooth.log" \
        "$BIN/poisson" bench --sizes 256 --smooth 1,2,3,4 --configs f64-all,all --csv "$out/poisson-smooth.csv"
}

poisson512_part() {
    local out=$1
    bench "poisson bench 512^3" "$out/poisson-bench-512.log" \
        "$BIN/poisson" bench --sizes 512 --configs f64,mixed,f64-all,all,f64-all-async,all-async --csv "$out/poisson-bench-512.csv"
}

example_part() {
    local out=$1
    expect "gray-scott 3-D 128^3 tuned, frames and .npy" ok "MLUPS" "$out/gs-run.log" \
        "$BIN/example/gray-scott" --size 128 --steps 2000 --frames 500 --output "$out/gray-scott"
    expect "gray-scott 2-D 1024^2 f64 tuned" ok "MLUPS" "$out/gs-2d.log" \
        "$BIN/example/gray-scott" --size 1024x1024 --steps 2000 --precision f64 --output "$out/gray-scott-2d"
    expect "gray-scott unstable dt: clear error" fail "stab" "$out/gs-bad.log" \
        "$BIN/example/gray-scott" --size 64 --dt 100 --output "$out/gray-scott-bad"
    for prec in f32 f64; do
        bench "gray-scott bench 256^3 $prec" "$out/gs-bench-$prec.log" \
            "$BIN/example/gray-scott" --bench --size 256 --precision "$prec" --output "$out/gray-scott-bench"
    done
    # One frame comes back with the CSVs, to be looked at.
    ls "$out"/gray-scott/frame-*.png 2>/dev/null | tail -1 | xargs -r -I{} cp {} "${OUT:-$out}/gray-scott-frame.png"
}

# One small run of each application under compute-sanitizer: memcheck everywhere, the other three tools
# where kernels share memory or synchronise (the stencil variants, LBM, the solvers).
sanitize_part() {
    local out=$1 tool
    local cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
    # sanitized TOOL NAME ARGS...: PASS when the run succeeds and the tool reports no error.
    sanitized() {
        local tool=$1 name=$2
        shift 2
        local log="$out/sanitize-$tool-$name.log"
        if timeout 300 "$cs" --tool "$tool" --error-exitcode 99 "$@" >"$log" 2>&1 \
            && grep -qE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" "$log"; then
            record "compute-sanitizer $tool: $name" PASS
        else
            record "compute-sanitizer $tool: $name" FAIL
            tail -30 "$log"
        fi
    }
    for tool in memcheck racecheck synccheck initcheck; do
        sanitized "$tool" diffusion "$BIN/diffusion" --size 40x36x33 --steps 40 --no-tune-cache \
            --output "$out/san-diffusion"
        sanitized "$tool" lbm "$BIN/lbm" cavity --engine device --size 34x34x4 --steps 200 \
            --output "$out/san-lbm"
        sanitized "$tool" lqcd "$BIN/lqcd" solve --engine device --dims 4x4x4x8 --antiperiodic-t
    done
    sanitized memcheck advection "$BIN/advection" rotation --size 96 --output "$out/san-adv"
    sanitized memcheck poisson "$BIN/poisson" --engine device --block 128x1 --march 2 --size 24 \
        --output "$out/san-poisson"
}

# A soak: the applications in turn, mixed sizes and precisions, until $SOAK_SECONDS (default 560) have
# passed; every run must succeed and print its check against its reference within tolerance.
soak_part() {
    local out=$1 until=$((SECONDS + ${SOAK_SECONDS:-560})) round=0 failed=0 runs=0
    # soaked NAME PATTERN ARGS...: one run, its output matching PATTERN (its check passed).
    soaked() {
        local name=$1 pattern=$2 log="$out/soak.log"
        shift 2
        runs=$((runs + 1))
        if ! timeout 300 "$@" >"$log" 2>&1 || ! grep -qE "$pattern" "$log" || grep -q "NaN" "$log"; then
            failed=$((failed + 1))
            echo "soak round $round: $name FAILED"
            tail -20 "$log"
            cp "$log" "$out/soak-failed-$failed.log"
        fi
    }
    while [ $SECONDS -lt $until ]; do
        round=$((round + 1))
        local n=$((96 + 32 * (round % 5))) prec=f32
        [ $((round % 2)) = 0 ] && prec=f64
        # The scheme's own decay of the sine mode, to round-off.
        soaked "diffusion $n^3 $prec" "e-([5-9]|1[0-9]) against the scheme" \
            "$BIN/diffusion" --size "$n" --steps 500 --precision "$prec" --output "$out/soak-d"
        soaked "lbm taylor-green $n^2 $prec" "analytic" "$BIN/lbm" taylor-green --engine device \
            --size "${n}x${n}x4" --steps 1000 --precision "$prec" --output "$out/soak-l"
        soaked "lbm cavity Re 100 vs Ghia" "against Ghia" "$BIN/lbm" cavity --engine device \
            --size 66x66x4 --output "$out/soak-c"
        soaked "advection rotation $((8 * n))^2" "interpolation error" "$BIN/advection" rotation \
            --size $((8 * n)) --output "$out/soak-a"
        local tol=1e-10
        [ "$prec" = f32 ] && tol=1e-6
        soaked "lqcd solve $prec" "true residual" "$BIN/lqcd" solve --engine device --dims 8x8x8x16 \
            --precision "$prec" --tol "$tol" --antiperiodic-t
        soaked "poisson $((n + 1))^3" "relative L2" "$BIN/poisson" --engine auto --size $((n + 1)) \
            --output "$out/soak-p"
    done
    [ $failed = 0 ] && record "soak: $runs runs in $round rounds, all checked" PASS \
        || record "soak: $failed of $runs runs failed" FAIL
}

# The figures of the README's summary, for comparison after a change that should not move them: the
# diffusion table's grids, the diffusion run, the hopping term and solver variants, LBM at 256^3 and
# 384^3, advection from 2048^2 to 8192^2, and the Poisson solves at 256^3.
summary_part() {
    local out=$1
    bench "summary: diffusion bench" "$out/sum-diffusion.log" \
        "$BIN/diffusion" bench --sizes 256,512,8x512x512 --csv "$out/sum-diffusion.csv"
    expect "summary: diffusion 256^3 run (tuned)" ok "GLUPS" "$out/sum-diffusion-run.log" \
        "$BIN/diffusion" --size 256 --steps 2000 --output "$out/sum-diffusion"
    expect "summary: diffusion 256^3 run (from the cache)" ok "GLUPS" "$out/sum-diffusion-run2.log" \
        "$BIN/diffusion" --size 256 --steps 2000 --output "$out/sum-diffusion"
    bench "summary: lqcd bench" "$out/sum-lqcd.log" \
        "$BIN/lqcd" bench --dslash 32x32x32x64 --solver 8,32x32x32x64,48x48x48x96 --csv "$out/sum-lqcd.csv"
    bench "summary: lbm bench" "$out/sum-lbm.log" "$BIN/lbm" bench --sizes 256,384 --csv "$out/sum-lbm.csv"
    bench "summary: advection bench" "$out/sum-advection.log" \
        "$BIN/advection" bench --sizes 2048,4096,8192 --csv "$out/sum-advection.csv"
    bench "summary: poisson bench 256^3" "$out/sum-poisson.log" \
        "$BIN/poisson" bench --sizes 256 --csv "$out/sum-poisson.csv"
}

profile() {
    unpack
    local out=${OUT:-$BIN/out}
    mkdir -p "$out"
    for cfg in "f32 64x2 4" "f64 64x2 2"; do
        set -- $cfg
        ncu --kernel-name "diffusion3d_$1" --launch-skip 3 --launch-count 1 \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
            --section WarpStateStats --section LaunchStats \
            "$BIN/diffusion" --engine device --precision "$1" --block "$2" --march "$3" --size 512 --steps 8 \
            --output "$out/profile" >"$out/ncu-$1.txt" 2>&1
        echo "== ncu diffusion3d_$1 512^3 ($2)/march=$3"
        grep -E "DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Duration|Mem Busy|Max Bandwidth|L1/TEX Cache Throughput|L2 Cache Throughput|Stall|Warp Cycles Per Issued" "$out/ncu-$1.txt" | head -20
    done
}

case "${1:-}" in
stage) stage ;;
run) shift; run "$@" ;;
profile) profile ;;
*) echo "usage: $0 stage|run|profile" >&2; exit 2 ;;
esac
