//! The filter's unit tests: parsing filters, compiling them into passes, and the
//! sorting networks of the GPU's medians.
#![allow(clippy::unwrap_used)]

use super::cuda::sorting_network;
use super::*;

fn no_kernel(_: &str) -> Result<(Vec<f64>, usize, usize)> {
    Err(Error::Invalid("no".into()))
}

#[test]
fn parse_filters() {
    assert_eq!(
        Filter::parse("gaussian:sigma=2", no_kernel).unwrap(),
        Filter::Gaussian {
            sigma: 2.0,
            truncate: 4.0
        }
    );
    assert_eq!(
        Filter::parse("box:size=5", no_kernel).unwrap(),
        Filter::Box { size: 5 }
    );
    assert_eq!(
        Filter::parse("sobel", no_kernel).unwrap(),
        Filter::Sobel { axis: None }
    );
    for bad in [
        "gauss:sigma=1",
        "gaussian",
        "gaussian:sigma=-1",
        "box:size=0",
        "box:width=3",
        "median:size=x",
        "sobel:axis=2",
        "convolve",
    ] {
        let e = Filter::parse(bad, no_kernel).unwrap_err().to_string();
        assert!(e.contains(bad) || e.contains("filter"), "{bad}: {e}");
    }
}

#[test]
fn gaussian_kernel_matches_scipy_shape() {
    // scipy: radius = int(4 * 2 + 0.5) = 8, weights sum to one, symmetric
    let k = gaussian_kernel(2.0, 4.0);
    assert_eq!(k.w.len(), 17);
    assert_eq!(k.before, 8);
    assert!((k.w.iter().sum::<f64>() - 1.0).abs() < 1e-15);
    assert_eq!(k.w[0].to_bits(), k.w[16].to_bits());
}

#[test]
fn halos() {
    let s = Stencil::new(Filter::Box { size: 4 }, Boundary::Reflect).unwrap();
    assert_eq!(
        s.halos().0,
        Halo {
            before: 2,
            after: 1
        }
    );
    let c = Stencil::new(
        Filter::Convolve {
            weights: vec![1.0; 4],
            rows: 1,
            cols: 4,
        },
        Boundary::Reflect,
    )
    .unwrap();
    // convolve centres the original kernel at 4 // 2 = 2: in[i - m + 2], m in 0..4
    assert_eq!(
        c.halos().1,
        Halo {
            before: 1,
            after: 2
        }
    );
    assert_eq!(c.halos().0, Halo::default());
}

fn sorts(net: &[(usize, usize)], v: &mut [u32]) {
    for &(x, y) in net {
        if v[x] > v[y] {
            v.swap(x, y);
        }
    }
}

/// Every 0-1 input up to 16 values (the 0-1 principle: a network that sorts them
/// sorts everything), and pseudo-random inputs with ties up to the 49 of a 7x7 median.
#[test]
fn sorting_networks_sort() {
    for n in 0..=16usize {
        let net = sorting_network(n);
        for bits in 0u32..(1 << n) {
            let mut v: Vec<u32> = (0..n).map(|i| (bits >> i) & 1).collect();
            sorts(&net, &mut v);
            assert!(v.is_sorted(), "n {n}, input {bits:b}");
        }
    }
    let mut seed = 0x2545_f491_u64;
    for n in 17..=49usize {
        let net = sorting_network(n);
        assert!(net.iter().all(|&(x, y)| x < y && y < n));
        for _ in 0..2000 {
            let mut v: Vec<u32> = (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    (seed >> 59) as u32
                })
                .collect();
            let mut want = v.clone();
            want.sort_unstable();
            sorts(&net, &mut v);
            assert_eq!(v, want, "n {n}");
        }
    }
    assert_eq!(sorting_network(49).len(), 394);
}
