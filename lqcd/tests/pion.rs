//! The pion correlator: gauge invariant, time-reflection symmetric on the free field, and the effective
//! mass of a pure exponential is its exponent.

use lattice_gpu_lqcd::gauge::{random_gauge_transform, GaugeField};
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::pion::{correlator, effective_mass, write_csv};
use lattice_gpu_lqcd::reference::solve_eo;
use lattice_gpu_lqcd::spinor::SpinorField;

fn propagator(lat: &Lattice, u: &GaugeField, kappa: f64) -> Vec<SpinorField> {
    let mut out = Vec::new();
    for s in 0..4 {
        for c in 0..3 {
            let b = SpinorField::point_source(lat.dims, s, c);
            out.push(solve_eo(lat, u, kappa, &b, 1e-13, 1000).unwrap().0);
        }
    }
    out
}

#[test]
fn correlator_is_gauge_invariant() {
    let dims = [4, 4, 4, 8];
    let lat = Lattice::new(dims, true).unwrap();
    let u = GaugeField::random(dims, 5);
    let g = random_gauge_transform(dims, 6);
    let c = correlator(&lat, &propagator(&lat, &u, 0.11));
    let cg = correlator(&lat, &propagator(&lat, &u.gauge_transform(&g), 0.11));
    for t in 0..8 {
        assert!(
            (c[t] - cg[t]).abs() <= 1e-9 * c[t],
            "t = {t}: {} vs {} after a gauge transformation",
            c[t],
            cg[t]
        );
    }
    // It falls off from the source.
    assert!(c[1] < c[0] && c[2] < c[1]);
}

#[test]
fn free_field_correlator_is_reflection_symmetric() {
    let dims = [4, 4, 4, 8];
    let lat = Lattice::new(dims, false).unwrap();
    let c = correlator(&lat, &propagator(&lat, &GaugeField::unit(dims), 0.1));
    for t in 1..8 {
        assert!(
            (c[t] - c[8 - t]).abs() <= 1e-9 * c[t],
            "C({t}) = {} but C({}) = {}",
            c[t],
            8 - t,
            c[8 - t]
        );
    }
    assert!(c[4] < c[1]);
}

#[test]
fn effective_mass_of_an_exponential_and_csv() {
    let c: Vec<f64> = (0..8).map(|t| 3.0 * (-0.7 * t as f64).exp()).collect();
    let m = effective_mass(&c);
    assert_eq!(m.len(), 7);
    for v in m {
        assert!((v.unwrap() - 0.7).abs() < 1e-12);
    }
    let dir = std::env::temp_dir().join(format!("lqcd-pion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pion.csv");
    write_csv(&path, &c, &effective_mass(&c)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("t,C,m_eff\n0,3."));
    assert_eq!(text.lines().count(), 9);
    // m_eff below T/2 only.
    assert!(text.lines().nth(4).unwrap().ends_with("0.7000000000"));
    assert!(text.lines().nth(5).unwrap().ends_with(','));
    std::fs::remove_dir_all(&dir).unwrap();
}
