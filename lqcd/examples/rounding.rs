//! Which storage rounding costs the mixed-precision clover solve its iterations, measured on the CPU:
//! BiCGStab with reliable updates on the even-odd clover operator `M_hat` (the reference's f64
//! arithmetic), with the sloppy solve's links, clover entries, `M_hat`'s intermediate
//! `A_oo^{-1} H_oe x`, its vectors and its iterate each rounded to a chosen storage after every write.
//! The recurrence is the library's (`lattice_gpu_host::solvers::reliable`): the Krylov scalars carry
//! on through an update, or, with `n`, `rho` is recomputed from the new residual as QUDA's pipelined
//! BiCGStab does.
//!
//! ```text
//! cargo run --release -p lattice-gpu-lqcd --example rounding -- 16x16x16x32 0.212 1 \
//!     f64:dddddS half:hhhhhS mid:hhfhfS
//! ```
//!
//! Each case is `name:` and six letters: links, clover entries, intermediate, vectors, iterate, each
//! `d` (f64), `f` (f32), `h` (binary16; a spinor site scaled by its norm as `Half` stores it) or `q`
//! (15-bit fixed point: links scaled by 1, clover entries by the field's largest, a site by its norm);
//! then `S` (scalars stand) or `N` (`rho` recomputed). `SEED` (1) and `DELTA` (0.1) come from the
//! environment. Random (Haar) links as `lqcd bench-mixed` uses; one core, about 6 minutes a case at
//! 16^3x32 and 14 GB at 32^3x64.
//!
//! It exists because the 16-bit GPU solve took 41% more iterations than f64 at 32^3x64 where rounding
//! emulated in an f32 solve cost 10% to 20% (docs/benchmarks/history.md): the same rounding on the CPU
//! at the sizes a CPU reaches tells whether the GPU's excess is the rounding's or the field's.

use std::time::Instant;

use lattice_gpu_kernels::complex::Complex as KernelComplex;
use lattice_gpu_kernels::wilson::{Half, WilsonStore};
use lattice_gpu_lqcd::clover::{apply_clover_inverse_parity, apply_clover_parity, CloverField};
use lattice_gpu_lqcd::gauge::GaugeField;
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::reference::{hopping_eo, hopping_oe};
use lattice_gpu_lqcd::spinor::SpinorField;
use num_complex::Complex64 as C;

/// A storage a value is rounded to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Store {
    F64,
    F32,
    Binary16,
    Fixed15,
}

impl Store {
    fn parse(c: char) -> Result<Self, String> {
        Ok(match c {
            'd' => Store::F64,
            'f' => Store::F32,
            'h' => Store::Binary16,
            'q' => Store::Fixed15,
            _ => return Err(format!("storage `{c}`: use d, f, h or q")),
        })
    }

    /// `z` rounded to this storage, fixed point scaled by `scale` (its largest magnitude).
    fn entry(self, z: C, scale: f64) -> C {
        let each = |x: f64| match self {
            Store::F64 => x,
            Store::F32 => x as f32 as f64,
            Store::Binary16 => half::f16::from_f64(x).to_f64(),
            Store::Fixed15 => (x / scale * 32767.0).round() / 32767.0 * scale,
        };
        C::new(each(z.re), each(z.im))
    }

    /// A half field rounded site by site (16-bit storages scale a site by its largest real).
    fn spinor(self, v: &mut [C]) {
        for s in v.chunks_mut(12) {
            match self {
                Store::F64 => {}
                Store::F32 => s.iter_mut().for_each(|z| *z = self.entry(*z, 1.0)),
                // The library's own encoding, as the GPU kernels store a site.
                Store::Binary16 => {
                    let site: [KernelComplex<f64>; 12] =
                        core::array::from_fn(|k| KernelComplex::new(s[k].re, s[k].im));
                    let back = Half::decode_site(&Half::encode_site(&site));
                    for (z, b) in s.iter_mut().zip(back) {
                        *z = C::new(b.re, b.im);
                    }
                }
                Store::Fixed15 => {
                    let m = s
                        .iter()
                        .map(|z| z.re.abs().max(z.im.abs()))
                        .fold(0.0, f64::max);
                    // The norm is stored as an f32.
                    let m = m as f32 as f64;
                    if m > 0.0 {
                        s.iter_mut().for_each(|z| *z = self.entry(*z, m));
                    }
                }
            }
        }
    }
}

/// The even-odd clover operator with its intermediate rounded to `mid`.
struct Operator<'a> {
    lat: &'a Lattice,
    u: GaugeField,
    clover: CloverField,
    mid: Store,
}

impl Operator<'_> {
    /// `A_ee x - kappa^2 H_eo A_oo^{-1} H_oe x`, as `lattice_gpu_lqcd::clover::clover_m_hat`.
    fn apply(&self, x: &[C]) -> Vec<C> {
        let mut t = apply_clover_inverse_parity(&self.clover, 1, &hopping_oe(self.lat, &self.u, x));
        self.mid.spinor(&mut t);
        let mut y = hopping_eo(self.lat, &self.u, &t);
        let a = apply_clover_parity(&self.clover, 0, x);
        let k2 = self.clover.kappa * self.clover.kappa;
        for (y, a) in y.iter_mut().zip(&a) {
            *y = a - k2 * *y;
        }
        y
    }
}

/// The links as 12-number storage keeps them: two rows rounded, the third rebuilt from them.
fn round_links(u: &GaugeField, store: Store) -> GaugeField {
    let mut u = u.clone();
    if store == Store::F64 {
        return u;
    }
    for l in u.links.iter_mut() {
        for a in 0..2 {
            for b in 0..3 {
                l[(a, b)] = store.entry(l[(a, b)], 1.0);
            }
        }
        for b in 0..3 {
            let (b1, b2) = ((b + 1) % 3, (b + 2) % 3);
            l[(2, b)] = (l[(0, b1)] * l[(1, b2)] - l[(0, b2)] * l[(1, b1)]).conj();
        }
    }
    u
}

fn round_clover(c: &CloverField, store: Store) -> CloverField {
    let mut c = c.clone();
    let all = || {
        c.blocks
            .iter()
            .chain(&c.inverse)
            .flatten()
            .flat_map(|m| m.iter())
    };
    let scale = all()
        .map(|z| z.re.abs().max(z.im.abs()))
        .fold(0.0, f64::max);
    for b in c.blocks.iter_mut().chain(c.inverse.iter_mut()).flatten() {
        b.iter_mut().for_each(|z| *z = store.entry(*z, scale));
    }
    c
}

fn dot(a: &[C], b: &[C]) -> C {
    a.iter().zip(b).map(|(a, b)| a.conj() * b).sum()
}

fn norm2(a: &[C]) -> f64 {
    a.iter().map(|z| z.norm_sqr()).sum()
}

/// One case's sloppy storages.
struct Case {
    name: String,
    links: Store,
    clover: Store,
    mid: Store,
    vectors: Store,
    iterate: Store,
    recompute_rho: bool,
}

impl Case {
    fn parse(s: &str) -> Result<Self, String> {
        let (name, letters) = s
            .split_once(':')
            .ok_or_else(|| format!("case `{s}`: write NAME:LLLLLL plus S or N"))?;
        let l: Vec<char> = letters.chars().collect();
        if l.len() != 6 || !matches!(l[5], 'S' | 'N') {
            return Err(format!(
                "case `{s}`: six letters after the name, five of d/f/h/q and S or N"
            ));
        }
        Ok(Self {
            name: name.to_string(),
            links: Store::parse(l[0])?,
            clover: Store::parse(l[1])?,
            mid: Store::parse(l[2])?,
            vectors: Store::parse(l[3])?,
            iterate: Store::parse(l[4])?,
            recompute_rho: l[5] == 'N',
        })
    }
}

/// The outcome of a solve.
struct Outcome {
    iterations: usize,
    updates: usize,
    residual: f64,
}

/// BiCGStab with reliable updates: `lo` and the case's roundings in the iterations, `hi` for the
/// true residual at an update (the iterated one fell by `delta` below its largest since the last).
fn solve(hi: &Operator, lo: &Operator, case: &Case, b: &[C], delta: f64) -> Outcome {
    const TOL: f64 = 1e-10;
    const MAX_ITER: usize = 5000;
    let (vecs, zero) = (case.vectors, C::new(0.0, 0.0));
    let bb = norm2(b);
    let n = b.len();
    let (mut x_hi, mut x) = (vec![zero; n], vec![zero; n]);
    let mut r = b.to_vec();
    vecs.spinor(&mut r);
    let r0 = r.clone();
    let mut p = r.clone();
    let mut v = vec![zero; n];
    let mut rho = dot(&r0, &r);
    let mut max_rr = norm2(&r);
    let (mut beta, mut omega) = (zero, C::new(1.0, 0.0));
    let mut updates = 0;
    for it in 1..=MAX_ITER {
        if it > 1 {
            for k in 0..n {
                p[k] = r[k] + beta * (p[k] - omega * v[k]);
            }
            vecs.spinor(&mut p);
        }
        v = lo.apply(&p);
        vecs.spinor(&mut v);
        let alpha = rho / dot(&r0, &v);
        let mut s: Vec<C> = r.iter().zip(&v).map(|(r, v)| r - alpha * v).collect();
        vecs.spinor(&mut s);
        let mut t = lo.apply(&s);
        vecs.spinor(&mut t);
        omega = dot(&t, &s) / norm2(&t);
        for k in 0..n {
            x[k] += alpha * p[k] + omega * s[k];
        }
        case.iterate.spinor(&mut x);
        r = s.iter().zip(&t).map(|(s, t)| s - omega * t).collect();
        vecs.spinor(&mut r);
        let rho_next = dot(&r0, &r);
        beta = (rho_next / rho) * (alpha / omega);
        rho = rho_next;
        let rr = norm2(&r);
        max_rr = max_rr.max(rr);
        if rr > delta * delta * max_rr && rr > TOL * TOL * bb {
            continue;
        }
        for (h, s) in x_hi.iter_mut().zip(x.iter_mut()) {
            *h += *s;
            *s = zero;
        }
        let ax = hi.apply(&x_hi);
        r = b.iter().zip(&ax).map(|(b, a)| b - a).collect();
        let true_rr = norm2(&r);
        updates += 1;
        if true_rr <= TOL * TOL * bb {
            return Outcome {
                iterations: it,
                updates,
                residual: (true_rr / bb).sqrt(),
            };
        }
        vecs.spinor(&mut r);
        max_rr = norm2(&r);
        if case.recompute_rho {
            let rho_next = dot(&r0, &r);
            beta *= rho_next / rho;
            rho = rho_next;
        }
    }
    Outcome {
        iterations: MAX_ITER,
        updates,
        residual: f64::NAN,
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match std::env::var(name) {
        Ok(s) => s.parse().map_err(|_| format!("{name}={s} is not a number")),
        Err(_) => Ok(default),
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        return Err("usage: rounding DIMS KAPPA CSW CASE... (see the example's docs)".into());
    }
    let number = |s: &str| {
        s.parse::<f64>()
            .map_err(|_| format!("`{s}` is not a number"))
    };
    let d: Vec<usize> = args[0]
        .split('x')
        .map(|s| {
            s.parse()
                .map_err(|_| format!("dims `{}`: write XxYxZxT", args[0]))
        })
        .collect::<Result<_, _>>()?;
    let dims: [usize; 4] = d
        .try_into()
        .map_err(|_| format!("dims `{}`: four extents", args[0]))?;
    let (kappa, csw) = (number(&args[1])?, number(&args[2])?);
    let cases: Vec<Case> = args[3..]
        .iter()
        .map(|s| Case::parse(s))
        .collect::<Result<_, _>>()?;
    let seed: u64 = env_or("SEED", 1)?;
    let delta: f64 = env_or("DELTA", 0.1)?;
    let lat = Lattice::new(dims, true).map_err(|e| e.to_string())?;
    let u = GaugeField::random(dims, seed);
    let clover = CloverField::new(&u, csw, kappa).map_err(|e| e.to_string())?;
    let source = SpinorField::random(dims, seed + 1);
    // The even-odd source b_e + kappa H_eo A_oo^{-1} b_o.
    let half = lat.half_volume();
    let part = |parity: usize| -> Vec<C> {
        (0..half)
            .flat_map(|e| {
                let n = lat.site_of_eo(parity * half + e);
                source.data[12 * n..12 * n + 12].to_vec()
            })
            .collect()
    };
    let hop = hopping_eo(&lat, &u, &apply_clover_inverse_parity(&clover, 1, &part(1)));
    let b: Vec<C> = part(0)
        .iter()
        .zip(&hop)
        .map(|(b, h)| b + kappa * h)
        .collect();
    let hi = Operator {
        lat: &lat,
        u: u.clone(),
        clover: clover.clone(),
        mid: Store::F64,
    };
    for case in &cases {
        let lo = Operator {
            lat: &lat,
            u: round_links(&u, case.links),
            clover: round_clover(&clover, case.clover),
            mid: case.mid,
        };
        let start = Instant::now();
        let o = solve(&hi, &lo, case, &b, delta);
        println!(
            "{}: {dims:?} kappa {kappa} c_sw {csw} delta {delta} seed {seed}: {} iterations, {} \
             updates, true residual {:.2e}, {:.0} s",
            case.name,
            o.iterations,
            o.updates,
            o.residual,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("rounding: {e}");
        std::process::exit(2);
    }
}
