//! Kubernetes quantities (`resource.Quantity`: `500m`, `2`, `1.5Gi`, `1e3`), parsed exactly and
//! once for every reader: quota capacities and instance costs in milli-units (quota.rs,
//! cluster.rs) and HPA tolerances as fractions (hpa.rs).
//!
//! The value is kept as an exact fraction of integers until a reader asks for its unit, so
//! `2 × 500m` fits `1` and a tolerance of `2500u` stays 0.0025. Hostile text is bounded: at most
//! [`MAX_QUANTITY_LEN`] bytes, [`MAX_DIGITS`] significant digits and exponents of ±40, every
//! product checked, so nothing overflows, loops or allocates by the input's size.
use std::fmt;
use std::num::IntErrorKind;

use serde::Serialize;

/// A quantity in milli-units (1 = 0.001 of the unit: millicores, millibytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Milli(pub i128);

impl fmt::Display for Milli {
    /// Whole units when exact, else millis (`500m`), like `kubectl`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 == 0 {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

/// Which way a value finer than a milli-unit is rounded: costs up, capacities down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    Up,
    Down,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a Kubernetes quantity (e.g. 500m, 2, 1.5Gi, 1e3)")]
    Syntax(String),
    #[error("{0:?} is negative; quota and resource quantities are not")]
    Negative(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// Longest quantity text read: the API server's canonical forms are far shorter.
pub const MAX_QUANTITY_LEN: usize = 64;
/// Most significant digits kept exact (i128 holds 38).
pub const MAX_DIGITS: usize = 30;
/// Largest exponent either way (`e40`, `e-40`): far beyond any real quantity; what it leaves
/// is bounded, and every product is checked.
const MAX_EXPONENT: i32 = 40;

/// A quantity ≥ 0, exactly: `numerator / denominator` milli-units (`denominator` ≥ 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    numerator: i128,
    denominator: i128,
}

impl Quantity {
    /// Parses `<sign><number><suffix>`: binary `Ki`…`Ei`, decimal `n u m k M G T P E`, or an
    /// exponent `e3`/`E-2`. Negative values are refused (no reader has a use for them).
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let too_large = || QuantityError::TooLarge(text.into());
        if text.len() > MAX_QUANTITY_LEN {
            return Err(syntax(text));
        }
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (mantissa, fraction_digits) = mantissa(number, text)?;
        let (base, power) = scale(suffix).ok_or_else(|| syntax(text))?;
        if !(-MAX_EXPONENT..=MAX_EXPONENT).contains(&power) {
            return Err(too_large());
        }
        if negative && mantissa != 0 {
            return Err(QuantityError::Negative(text.into()));
        }
        let pow = |base: i128, exp: u32| base.checked_pow(exp).ok_or_else(too_large);
        // milli = mantissa × 1000 × base^power / 10^fraction_digits
        let mut numerator = mantissa.checked_mul(1000).ok_or_else(too_large)?;
        let mut denominator = pow(10, fraction_digits)?;
        let scaled = pow(base, power.unsigned_abs())?;
        if power >= 0 {
            numerator = numerator.checked_mul(scaled).ok_or_else(too_large)?;
        } else {
            denominator = denominator.checked_mul(scaled).ok_or_else(too_large)?;
        }
        Ok(Self {
            numerator,
            denominator,
        })
    }

    /// In milli-units, a finer remainder rounded as asked.
    pub fn milli(self, rounding: Rounding) -> Milli {
        let quotient = self.numerator / self.denominator;
        let rounded_up = rounding == Rounding::Up && self.numerator % self.denominator != 0;
        Milli(quotient + i128::from(rounded_up))
    }

    /// In units, the nearest `f64` (one division where the denominator allows).
    pub fn as_f64(self) -> f64 {
        match self.denominator.checked_mul(1000) {
            Some(d) => self.numerator as f64 / d as f64,
            None => self.numerator as f64 / self.denominator as f64 / 1000.0,
        }
    }
}

fn syntax(text: &str) -> QuantityError {
    QuantityError::Syntax(text.chars().take(MAX_QUANTITY_LEN).collect())
}

/// The number of `text` (digits with at most one `.`) → (its digits as an integer, how many
/// of them follow the dot).
fn mantissa(number: &str, text: &str) -> Result<(i128, u32), QuantityError> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(syntax(text));
    }
    let digits = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0');
    if significant.len() > MAX_DIGITS {
        return Err(QuantityError::TooLarge(text.into()));
    }
    let mantissa = if significant.is_empty() {
        0
    } else {
        significant.parse().map_err(|_| syntax(text))?
    };
    let fraction_digits = u32::try_from(fraction.len()).map_err(|_| syntax(text))?;
    Ok((mantissa, fraction_digits))
}

/// A suffix → `(base, power)`: the value is multiplied by `base^power`; `None` when it is none.
fn scale(suffix: &str) -> Option<(i128, i32)> {
    Some(match suffix {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (1024, 1),
        "Mi" => (1024, 2),
        "Gi" => (1024, 3),
        "Ti" => (1024, 4),
        "Pi" => (1024, 5),
        "Ei" => (1024, 6),
        exponent => {
            let digits = exponent
                .strip_prefix(['e', 'E'])
                .filter(|d| !d.is_empty())?;
            // Rust's integer parse takes one leading sign, as the exponent may have; an
            // exponent too large for an i32 is out of range, not malformed.
            let power = match digits.parse::<i32>() {
                Ok(power) => power,
                Err(e)
                    if matches!(
                        e.kind(),
                        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow
                    ) =>
                {
                    i32::MAX
                }
                Err(_) => return None,
            };
            (10, power)
        }
    })
}

/// Parses a quantity into milli-units, a finer remainder rounded as asked.
pub fn parse_quantity(text: &str, rounding: Rounding) -> Result<Milli, QuantityError> {
    Quantity::parse(text).map(|q| q.milli(rounding))
}

#[cfg(test)]
#[path = "quantity_tests.rs"]
mod tests;
