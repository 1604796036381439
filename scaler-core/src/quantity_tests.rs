use proptest::prelude::*;

use super::*;

fn down(text: &str) -> Milli {
    parse_quantity(text, Rounding::Down).unwrap()
}

#[test]
fn quantities_in_every_notation() {
    let cases: &[(&str, i128)] = &[
        ("0", 0),
        ("2", 2_000),
        ("500m", 500),
        ("0.5", 500),
        (".5", 500),
        ("5.", 5_000),
        ("+1", 1_000),
        ("1.5", 1_500),
        ("1k", 1_000_000),
        ("1Ki", 1_024_000),
        ("1.5Gi", 1_610_612_736_000),
        ("10Gi", 10_737_418_240_000),
        ("2Ti", 2_199_023_255_552_000),
        ("1Ei", 1_152_921_504_606_846_976_000),
        ("1M", 1_000_000_000),
        ("1e3", 1_000_000),
        ("1E3", 1_000_000),
        ("1e+3", 1_000_000),
        ("5e-3", 5),
        ("1e35", 10i128.pow(38)),
        ("250u", 0),
        ("1500000000n", 1_500),
        ("1E", 1_000_000_000_000_000_000_000),
        ("-0", 0),
        ("000000000000000000000000000000000000000001", 1_000),
    ];
    for (text, milli) in cases {
        assert_eq!(down(text), Milli(*milli), "{text}");
    }
    // Finer than a milli: costs round up, capacities down.
    assert_eq!(parse_quantity("250u", Rounding::Up), Ok(Milli(1)));
    assert_eq!(parse_quantity("1001u", Rounding::Down), Ok(Milli(1)));
    assert_eq!(parse_quantity("1001u", Rounding::Up), Ok(Milli(2)));
}

/// As a fraction nothing finer than a milli is lost (HPA tolerances are fractions).
#[test]
fn fractions_are_exact() {
    for (text, value) in [
        ("0.05", 0.05),
        ("50m", 0.05),
        ("5e-2", 0.05),
        ("2500u", 0.0025),
        ("0.0025", 0.0025),
        ("1n", 1e-9),
        ("1Ki", 1024.0),
        ("1e-18", 1e-18),
    ] {
        assert_eq!(Quantity::parse(text).unwrap().as_f64(), value, "{text}");
    }
}

#[test]
fn malformed_quantities_are_errors_naming_the_value() {
    for text in [
        "", "+", "-", ".", "m", "1..2", "1.2.3", "1mm", "1e", "1e+", "1e3.5", "1 Gi", " 1", "1 ",
        "1gi", "0x10", "Gi", "1KiB", "NaN", "inf", "--1", "+-1", "1e--3", "1e3m", "e3", "1,5",
    ] {
        let err = parse_quantity(text, Rounding::Down).unwrap_err();
        assert!(matches!(err, QuantityError::Syntax(_)), "{text:?}: {err:?}");
    }
    for negative in ["-1", "-0.001", "-1Ki", "-5e-3"] {
        assert!(
            matches!(
                parse_quantity(negative, Rounding::Down),
                Err(QuantityError::Negative(_))
            ),
            "{negative}"
        );
    }
    for huge in [
        "1e41",
        "1e-41",
        "1e99999999999999",
        "1e-99999999999999",
        "9999999999999999999999999999999",
        "99999999999999999999Ei",
        "999999999999999999999999999999e40",
    ] {
        assert!(
            matches!(
                parse_quantity(huge, Rounding::Down),
                Err(QuantityError::TooLarge(_))
            ),
            "{huge}"
        );
    }
    // Text past the length bound is refused unread, and its echo is bounded.
    let long = "1".repeat(10_000);
    let err = parse_quantity(&long, Rounding::Down).unwrap_err();
    assert!(err.to_string().len() < 2 * MAX_QUANTITY_LEN, "{err}");
}

proptest! {
    #[test]
    fn millis_round_trip(milli in 0i128..1_000_000_000_000) {
        let text = format!("{milli}m");
        prop_assert_eq!(down(&text), Milli(milli));
        prop_assert_eq!(down(&Milli(milli).to_string()), Milli(milli));
    }

    #[test]
    fn parsing_never_panics(text in "\\PC{0,40}|[-+]?[0-9.]{0,35}([eE][-+]?[0-9]{0,12}|[KMGTPE]i|[numkMGTPE])?") {
        if let Ok(q) = Quantity::parse(&text) {
            prop_assert!(q.milli(Rounding::Down) <= q.milli(Rounding::Up));
            prop_assert!(q.as_f64().is_finite() && q.as_f64() >= 0.0);
        }
    }
}
