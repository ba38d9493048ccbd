//! Python 3's `repr()` of the few literal kinds `saved_model_cli` prints: strings, floats, and
//! lists and sets of strings.

/// `repr(s)` of a Python `str`: single quotes unless `s` holds a `'` and no `"`; backslash,
/// the quote, `\t`, `\n`, `\r` escaped; other non-printable characters as `\xNN`, `\uNNNN` or
/// `\UNNNNNNNN`. Printability follows Python's `str.isprintable` for the control, format,
/// separator and private-use characters TensorFlow names can plausibly hold; unassigned code
/// points are taken as printable (no Unicode database here).
pub(crate) fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !printable(c) => {
                let v = c as u32;
                if v < 0x100 {
                    out.push_str(&format!("\\x{v:02x}"));
                } else if v < 0x10000 {
                    out.push_str(&format!("\\u{v:04x}"));
                } else {
                    out.push_str(&format!("\\U{v:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable` for one character (see `str_repr` for the approximation).
fn printable(c: char) -> bool {
    let v = c as u32;
    !matches!(v,
        0..=0x1f | 0x7f..=0xa0 | 0xad
        | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x180e
        | 0x1680 | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064 | 0x2066..=0x206f
        | 0x3000 | 0xd800..=0xf8ff | 0xfeff | 0xfff9..=0xfffb | 0xfffe | 0xffff
        | 0x110bd | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a | 0xe0001 | 0xe0020..=0xe007f
        | 0xf0000..=0x10ffff)
}

/// `repr(x)` of a Python `float`: the shortest digits that round-trip, in positional notation
/// for decimal exponents -4..=15 and `1e+16`-style otherwise; `inf`, `-inf`, `nan`.
pub(crate) fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-7", "1e16", "0e0".
    let sci = format!("{x:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mant) = match mant.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mant),
    };
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    if !(-4..16).contains(&exp) {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.unsigned_abs());
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        format!("{sign}0.{zeros}{digits}")
    } else {
        let point = point as usize;
        if digits.len() <= point {
            let zeros = "0".repeat(point - digits.len());
            format!("{sign}{digits}{zeros}.0")
        } else {
            let (int, frac) = digits.split_at(point);
            format!("{sign}{int}.{frac}")
        }
    }
}

/// `repr(list_of_str)`: `['a', 'b']`.
pub(crate) fn str_list_repr<S: AsRef<str>>(items: &[S]) -> String {
    let parts: Vec<String> = items.iter().map(|s| str_repr(s.as_ref())).collect();
    format!("[{}]", parts.join(", "))
}

/// `repr(set_of_str)`: `{'a', 'b'}`, or `set()` when empty. Python prints a set in hash order,
/// which depends on the process (PYTHONHASHSEED); this prints the items in the order given.
pub(crate) fn str_set_repr<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return "set()".into();
    }
    let parts: Vec<String> = items.iter().map(|s| str_repr(s.as_ref())).collect();
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_like_python() {
        assert_eq!(str_repr("serve"), "'serve'");
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(str_repr("t\tn\nb\\"), "'t\\tn\\nb\\\\'");
        assert_eq!(str_repr("\u{0}\u{7f}\u{a0}é"), "'\\x00\\x7f\\xa0é'");
        assert_eq!(str_repr("\u{2028}\u{1F600}"), "'\\u2028\u{1F600}'");
        assert_eq!(str_repr(""), "''");
    }

    #[test]
    fn floats_like_python() {
        for (x, want) in [
            (1.5, "1.5"),
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789.125, "123456789.125"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (-2.5e300, "-2.5e+300"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (5e-324, "5e-324"),
        ] {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn collections_like_python() {
        assert_eq!(str_list_repr(&["train", "gpu"]), "['train', 'gpu']");
        assert_eq!(str_list_repr::<&str>(&[]), "[]");
        assert_eq!(str_set_repr(&["Const"]), "{'Const'}");
        assert_eq!(str_set_repr::<&str>(&[]), "set()");
    }
}
