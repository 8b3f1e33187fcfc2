//! Tests of `src/device.rs`.
#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn device_requests_parse_and_print_back() {
    for (s, d) in [
        ("auto", DeviceRequest::Auto),
        ("cpu", DeviceRequest::Cpu),
        ("CPU", DeviceRequest::Cpu),
        ("cuda", DeviceRequest::Cuda(None)),
        ("cuda:1", DeviceRequest::Cuda(Some(1))),
    ] {
        let got: DeviceRequest = s.parse().unwrap();
        assert_eq!(got, d);
        assert_eq!(got.to_string().parse::<DeviceRequest>().unwrap(), d);
    }
    for bad in ["cuda:", "cuda:x", "tpu", "cuda:-1", ""] {
        let e = bad.parse::<DeviceRequest>().unwrap_err();
        assert!(matches!(e, DeviceError::Unknown(_)), "{bad}: {e:?}");
    }
}

#[test]
fn no_device_messages_show_what_there_is() {
    let e = DeviceError::NoDevice {
        requested: 3,
        count: 2,
    };
    assert_eq!(
        e.to_string(),
        "no CUDA device 3: this machine has 2 (cuda:0..cuda:1)"
    );
    let e = DeviceError::NoDevice {
        requested: 0,
        count: 0,
    };
    assert!(e.to_string().contains("no GPU"), "{e}");
}

#[test]
fn spills_become_errors_only_for_real_architectures() {
    let o = nvrtc_options("sm_90", true);
    assert!(o.contains(&"--ptxas-options=--warning-as-error".to_string()));
    assert!(o.contains(&"--fmad=false".to_string()));
    let o = nvrtc_options("compute_80", true);
    assert!(!o.iter().any(|x| x.contains("ptxas")));
}

#[test]
fn logs_are_one_line() {
    let log = "a\n  b\tc\n".repeat(500);
    let l = one_line_log(&log);
    assert!(!l.contains('\n'));
    assert!(l.len() <= 603);
    assert!(l.starts_with("a b c a b c"));
}

/// The driver's share of a GPU run's budget is measured from the resident set: the
/// reading must see memory this process touches, and nothing is charged before a
/// context exists.
#[cfg(feature = "cuda")]
#[test]
fn the_resident_set_is_read_and_no_context_costs_nothing() {
    let mut v = vec![0u8; 64 << 20];
    for i in (0..v.len()).step_by(4096) {
        v[i] = 1;
    }
    // 64 MiB touched and held: resident whatever other tests free meanwhile
    let now = resident_bytes().unwrap();
    assert!(now >= 64 << 20, "resident set {now} bytes");
    assert_eq!(std::hint::black_box(&v)[4096], 1);
    if counters().contexts == 0 {
        assert_eq!(driver_host_bytes(), 0);
    } else {
        assert!(driver_host_bytes() >= DRIVER_EXTRA_BYTES);
    }
}
