//! A fixed-point amount with four decimals, as in accounting software.

use std::fmt;
use std::ops::{Add, Neg, Sub};
use std::str::FromStr;

/// An exact amount with four decimals, held as an integer count of 1/10,000.
///
/// Sums never drift the way `f64` does: `0.1 + 0.2` is exactly `0.3`. SQL engines
/// store the scaled integer, so sorting and equality in SQL are exact too.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Currency(i64);

/// The amount, as `Display` writes it (`Currency(3.75)`), not the scaled
/// integer inside.
impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Currency({self})")
    }
}

/// The scale of [`Currency`]: four decimals.
pub const CURRENCY_SCALE: i64 = 10_000;

impl Currency {
    /// Zero.
    pub const ZERO: Currency = Currency(0);

    /// From a count of 1/10,000 units (`Currency::from_scaled(12_345)` is 1.2345).
    pub const fn from_scaled(units: i64) -> Self {
        Currency(units)
    }

    /// The count of 1/10,000 units.
    pub const fn scaled(self) -> i64 {
        self.0
    }

    /// From whole units (`Currency::from_int(3)` is 3.0000), `None` on overflow.
    pub fn from_int(v: i64) -> Option<Self> {
        v.checked_mul(CURRENCY_SCALE).map(Currency)
    }

    /// From a float, rounded half away from zero to four decimals; `None` when the
    /// float is not finite or out of range.
    pub fn from_f64(v: f64) -> Option<Self> {
        let scaled = (v * CURRENCY_SCALE as f64).round();
        if scaled.is_finite() && scaled.abs() < 9.2e18 {
            Some(Currency(scaled as i64))
        } else {
            None
        }
    }

    /// The nearest float (for display or statistics; not for sums).
    pub fn to_f64(self) -> f64 {
        self.0 as f64 / CURRENCY_SCALE as f64
    }

    /// Adds, `None` on overflow.
    pub fn checked_add(self, o: Currency) -> Option<Currency> {
        self.0.checked_add(o.0).map(Currency)
    }
}

impl Add for Currency {
    type Output = Currency;
    fn add(self, o: Currency) -> Currency {
        Currency(self.0 + o.0)
    }
}

impl Sub for Currency {
    type Output = Currency;
    fn sub(self, o: Currency) -> Currency {
        Currency(self.0 - o.0)
    }
}

impl Neg for Currency {
    type Output = Currency;
    fn neg(self) -> Currency {
        Currency(-self.0)
    }
}

/// Prints at most four decimals with trailing zeros dropped (`1`, `0.5`, `-0.01`),
/// the form mORMot clients send and expect.
impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0 as i128;
        let (sign, abs) = if v < 0 { ("-", -v) } else { ("", v) };
        let int = abs / CURRENCY_SCALE as i128;
        let mut frac = abs % CURRENCY_SCALE as i128;
        if frac == 0 {
            return write!(f, "{sign}{int}");
        }
        let mut digits = 4;
        while frac % 10 == 0 {
            frac /= 10;
            digits -= 1;
        }
        write!(f, "{sign}{int}.{frac:0digits$}")
    }
}

/// The error of parsing a [`Currency`] from text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseCurrencyError(String);

impl fmt::Display for ParseCurrencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not a currency amount with at most 4 decimals: {:?}",
            self.0
        )
    }
}

impl std::error::Error for ParseCurrencyError {}

impl FromStr for Currency {
    type Err = ParseCurrencyError;

    /// Parses `[-]digits[.digits]` exactly; more than four decimals is an error
    /// rather than a silent rounding.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseCurrencyError(s.to_owned());
        let (neg, body) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let (int_part, frac_part) = body.split_once('.').unwrap_or((body, ""));
        if int_part.is_empty() && frac_part.is_empty()
            || frac_part.len() > 4
            || int_part.len() > 19
            || !int_part.bytes().all(|b| b.is_ascii_digit())
            || !frac_part.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(err());
        }
        // In i128, so that the most negative amount (whose magnitude has no
        // positive i64) parses.
        let int: i128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| err())?
        };
        let mut frac: i128 = if frac_part.is_empty() {
            0
        } else {
            frac_part.parse().map_err(|_| err())?
        };
        for _ in frac_part.len()..4 {
            frac *= 10;
        }
        let units = int * CURRENCY_SCALE as i128 + frac;
        let units = if neg { -units } else { units };
        i64::try_from(units).map(Currency).map_err(|_| err())
    }
}

impl serde::Serialize for Currency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Currency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn parse_and_print_round_trip() -> Result<(), ParseCurrencyError> {
        for (text, scaled, printed) in [
            ("1", 10_000, "1"),
            ("0.5", 5_000, "0.5"),
            ("-0.01", -100, "-0.01"),
            ("1234567.8901", 12_345_678_901, "1234567.8901"),
            ("+2.50", 25_000, "2.5"),
            (".25", 2_500, "0.25"),
        ] {
            let c: Currency = text.parse()?;
            assert_eq!(c.scaled(), scaled, "{text}");
            assert_eq!(c.to_string(), printed);
        }
        Ok(())
    }

    #[test]
    fn extremes_round_trip() -> Result<(), ParseCurrencyError> {
        for c in [
            Currency::from_scaled(i64::MIN),
            Currency::from_scaled(i64::MAX),
        ] {
            assert_eq!(c.to_string().parse::<Currency>()?, c);
        }
        assert!("922337203685477.5808".parse::<Currency>().is_err());
        assert!("99999999999999999999999999999999999999"
            .parse::<Currency>()
            .is_err());
        Ok(())
    }

    #[test]
    fn rejects_bad_text() {
        for bad in [
            "",
            "-",
            ".",
            "1.23456",
            "1e3",
            "abc",
            "1.2.3",
            "--1",
            "99999999999999999",
        ] {
            assert!(bad.parse::<Currency>().is_err(), "{bad}");
        }
    }

    #[test]
    fn sums_are_exact() {
        let tenth = Currency::from_f64(0.1).unwrap();
        let fifth = Currency::from_f64(0.2).unwrap();
        assert_eq!(tenth + fifth, "0.3".parse().unwrap());
        assert_eq!(Currency::from_f64(f64::NAN), None);
    }
}
