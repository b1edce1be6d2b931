//! Kubernetes quantities in canonical form.
//!
//! The API server stores every quantity in its canonical spelling (`1024Mi` becomes `1Gi`,
//! `1.5` becomes `1500m`, `0.5Gi` becomes `512Mi`). If the operator sent a non-canonical
//! spelling, the stored object would never compare equal to the desired one and every pass would
//! write it again. So every quantity the operator emits goes through [`canonical`] first, which
//! follows the rules of `resource.Quantity.String()` in Kubernetes:
//!
//! - the format comes from the suffix: binary (`Ki`..`Ei`), decimal SI (`n`..`E`, or none) or a
//!   decimal exponent (`e3`);
//! - binary quantities below 1024 or with a fractional value are written in decimal SI;
//! - binary quantities use the largest power of 1024 that divides them exactly;
//! - decimal quantities use an integer mantissa and an exponent that is a multiple of three,
//!   the largest possible;
//! - precision is limited to nano units, rounding up.

/// How a quantity is written, decided by its suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    BinarySi,
    DecimalSi,
    DecimalExponent,
}

/// An exact decimal: `mantissa * 10^exponent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Decimal {
    mantissa: i128,
    exponent: i32,
}

/// The canonical spelling of `quantity`, or the input unchanged when it is not a valid quantity
/// (or too large to handle exactly; the API server then reports the problem with the field).
pub fn canonical(quantity: &str) -> String {
    parse(quantity)
        .and_then(|(value, format)| format_canonical(value, format))
        .unwrap_or_else(|| quantity.to_owned())
}

/// `quantity` times `factor`, spelled canonically in the same format (`50Gi` twice is
/// `100Gi`); `None` when `quantity` is invalid or the product too large.
pub fn times(quantity: &str, factor: i128) -> Option<String> {
    let (value, format) = parse(quantity)?;
    let scaled = Decimal {
        mantissa: value.mantissa.checked_mul(factor)?,
        exponent: value.exponent,
    };
    format_canonical(scaled, format)
}

fn parse(input: &str) -> Option<(Decimal, Format)> {
    let s = input.trim();
    if s.is_empty() {
        return None;
    }
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let split = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(split);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return None;
    }
    let mut mantissa: i128 = 0;
    for b in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(b - b'0'))?;
    }
    let mut exponent = -i32::try_from(frac_part.len()).ok()?;
    let format = match suffix {
        "" => Format::DecimalSi,
        "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => {
            exponent += match suffix {
                "n" => -9,
                "u" => -6,
                "m" => -3,
                "k" => 3,
                "M" => 6,
                "G" => 9,
                "T" => 12,
                "P" => 15,
                _ => 18,
            };
            Format::DecimalSi
        }
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = match suffix {
                "Ki" => 1,
                "Mi" => 2,
                "Gi" => 3,
                "Ti" => 4,
                "Pi" => 5,
                _ => 6,
            };
            mantissa = mantissa.checked_mul(1024_i128.checked_pow(power)?)?;
            Format::BinarySi
        }
        _ => {
            let digits = suffix.strip_prefix(['e', 'E'])?;
            let e: i32 = digits.parse().ok()?;
            if !(-100..=100).contains(&e) {
                return None;
            }
            exponent = exponent.checked_add(e)?;
            Format::DecimalExponent
        }
    };
    if negative {
        mantissa = -mantissa;
    }
    // Precision is limited to nano units; Kubernetes rounds up (away from zero).
    if exponent < -9 {
        let divisor = 10_i128.checked_pow(u32::try_from(-9 - exponent).ok()?)?;
        let rounded = mantissa / divisor + i128::from(mantissa % divisor != 0) * mantissa.signum();
        mantissa = rounded;
        exponent = -9;
    }
    Some((Decimal { mantissa, exponent }, format))
}

fn format_canonical(value: Decimal, format: Format) -> Option<String> {
    if value.mantissa == 0 {
        return Some("0".to_owned());
    }
    let mut format = format;
    let mut integer = None;
    if format == Format::BinarySi {
        let as_integer = to_integer(value);
        match as_integer {
            Some(i) if i.abs() >= 1024 => integer = Some(i),
            _ => format = Format::DecimalSi,
        }
    }
    match (format, integer) {
        (Format::BinarySi, Some(mut i)) => {
            let mut power = 0;
            while power < 6 && i % 1024 == 0 {
                i /= 1024;
                power += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
            Some(format!("{i}{suffix}"))
        }
        _ => {
            let (mut mantissa, mut exponent) = (value.mantissa, value.exponent);
            while mantissa % 10 == 0 {
                mantissa /= 10;
                exponent += 1;
            }
            match exponent.rem_euclid(3) {
                1 => {
                    mantissa = mantissa.checked_mul(10)?;
                    exponent -= 1;
                }
                2 => {
                    mantissa = mantissa.checked_mul(100)?;
                    exponent -= 2;
                }
                _ => {}
            }
            if format == Format::DecimalExponent {
                return Some(if exponent == 0 {
                    mantissa.to_string()
                } else {
                    format!("{mantissa}e{exponent}")
                });
            }
            let suffix = match exponent {
                -9 => "n",
                -6 => "u",
                -3 => "m",
                0 => "",
                3 => "k",
                6 => "M",
                9 => "G",
                12 => "T",
                15 => "P",
                18 => "E",
                _ => return Some(format!("{mantissa}e{exponent}")),
            };
            Some(format!("{mantissa}{suffix}"))
        }
    }
}

/// The value as an integer, when it is one.
fn to_integer(value: Decimal) -> Option<i128> {
    if value.exponent >= 0 {
        value
            .mantissa
            .checked_mul(10_i128.checked_pow(u32::try_from(value.exponent).ok()?)?)
    } else {
        let divisor = 10_i128.checked_pow(u32::try_from(-value.exponent).ok()?)?;
        (value.mantissa % divisor == 0).then_some(value.mantissa / divisor)
    }
}

/// The value of a quantity in bytes (or base units), rounded down; `None` when invalid.
pub fn value(quantity: &str) -> Option<i128> {
    let (d, _) = parse(quantity)?;
    if d.exponent >= 0 {
        d.mantissa
            .checked_mul(10_i128.checked_pow(u32::try_from(d.exponent).ok()?)?)
    } else {
        Some(d.mantissa / 10_i128.checked_pow(u32::try_from(-d.exponent).ok()?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs of `resource.MustParse(in).String()` in Kubernetes.
    #[test]
    fn times_keeps_the_format() {
        assert_eq!(times("50Gi", 2).as_deref(), Some("100Gi"));
        assert_eq!(times("512Mi", 2).as_deref(), Some("1Gi"));
        assert_eq!(times("10G", 2).as_deref(), Some("20G"));
        assert_eq!(times("1.5Gi", 2).as_deref(), Some("3Gi"));
        assert_eq!(times("lots", 2), None);
    }

    #[test]
    fn matches_kubernetes_canonical_form() {
        for (input, want) in [
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("512Ki", "512Ki"),
            ("1000Ki", "1000Ki"),
            ("1023", "1023"),
            ("0.5Ki", "512"),
            ("1.5Ki", "1536"),
            ("500m", "500m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("1000m", "1"),
            ("1", "1"),
            ("2000", "2k"),
            ("1500", "1500"),
            ("20G", "20G"),
            ("20000M", "20G"),
            ("0.1", "100m"),
            ("100u", "100u"),
            ("1e3", "1e3"),
            ("1000e0", "1e3"),
            ("1.5e3", "1500"),
            ("0", "0"),
            ("0Gi", "0"),
            ("-1Gi", "-1Gi"),
            ("1n", "1n"),
            ("0.1n", "1n"),
            ("64Ei", "64Ei"),
        ] {
            assert_eq!(canonical(input), want, "canonical({input})");
        }
    }

    #[test]
    fn leaves_invalid_quantities_alone() {
        for input in ["", "abc", "1Gb", "1.2.3", "Gi", "1e", "--1"] {
            assert_eq!(canonical(input), input);
        }
    }

    #[test]
    fn values() {
        assert_eq!(value("1Gi"), Some(1 << 30));
        assert_eq!(value("500m"), Some(0));
        assert_eq!(value("2k"), Some(2000));
        assert_eq!(value("x"), None);
    }
}
