//! Timestamps found in recordings, as milliseconds since the Unix epoch.
//! Only differences matter: they become the monotonic instants the core's
//! time limit is checked with.

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `date` is (year, month, day), `clock` (hour, minute, second, millisecond),
/// `offset_min` the zone's offset east of UTC in minutes.
fn to_ms(date: (i64, u32, u32), clock: (u32, u32, u32, u32), offset_min: i64) -> Option<u64> {
    let (year, month, day) = date;
    let (h, min, s, ms) = clock;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || min > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs =
        days * 86_400 + i64::from(h) * 3_600 + i64::from(min) * 60 + i64::from(s) - offset_min * 60;
    u64::try_from(secs * 1_000 + i64::from(ms)).ok()
}

/// `2026-02-12T15:36:41.068Z` or with an offset `+01:00`; fraction optional.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<u32> { text.get(from..from + len)?.parse().ok() };
    if b.len() < 20 || b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return None;
    }
    if !matches!(b.get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    let (year, month, day) = (i64::from(num(0, 4)?), num(5, 2)?, num(8, 2)?);
    let (h, min, s) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let mut at = 19;
    let mut ms = 0u32;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let digits = b[at..].iter().take_while(|c| c.is_ascii_digit()).count();
        // Milliseconds: the first three digits, padded with zeros.
        ms = b[at..at + digits]
            .iter()
            .chain(b"000")
            .take(3)
            .fold(0, |ms, d| ms * 10 + u32::from(d - b'0'));
        at += digits;
    }
    let offset = match b.get(at) {
        Some(b'Z' | b'z') => 0,
        Some(sign @ (b'+' | b'-')) => {
            let oh = i64::from(num(at + 1, 2)?);
            let om = i64::from(num(at + 4, 2)?);
            let total = oh * 60 + om;
            if *sign == b'-' {
                -total
            } else {
                total
            }
        }
        _ => return None,
    };
    to_ms((year, month, day), (h, min, s, ms), offset)
}

/// An HTTP date: `Mon, 01 Dec 2025 06:05:43 GMT`.
pub fn parse_http_date_ms(text: &str) -> Option<u64> {
    let mut parts = text.split_whitespace();
    let _weekday = parts.next()?;
    let day: u32 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':');
    let h = clock.next()?.parse().ok()?;
    let min = clock.next()?.parse().ok()?;
    let s = clock.next()?.parse().ok()?;
    to_ms((year, month, day), (h, min, s, 0), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1_500));
        // Fractions: the first three digits are the milliseconds.
        for (fraction, ms) in [
            (".05", 50),
            (".123456", 123),
            (".999", 999),
            (".", 0),
            ("", 0),
        ] {
            let text = format!("1970-01-01T00:00:01{fraction}Z");
            assert_eq!(parse_rfc3339_ms(&text), Some(1_000 + ms), "{text}");
        }
        let a = parse_rfc3339_ms("2026-02-12T15:36:39.372Z").unwrap();
        let b = parse_rfc3339_ms("2026-02-12T15:37:37.047Z").unwrap();
        assert_eq!(b - a, 57_675);
        assert_eq!(parse_rfc3339_ms("2026-02-12T16:36:39.372+01:00"), Some(a));
        assert_eq!(parse_rfc3339_ms("2026-02-12"), None);
        assert_eq!(parse_rfc3339_ms("2026-13-12T15:36:39Z"), None);
    }

    #[test]
    fn http_date() {
        let a = parse_http_date_ms("Mon, 01 Dec 2025 06:05:43 GMT").unwrap();
        let b = parse_http_date_ms("Mon, 01 Dec 2025 06:07:19 GMT").unwrap();
        assert_eq!(b - a, 96_000);
        assert_eq!(parse_rfc3339_ms("2025-12-01T06:05:43Z"), Some(a));
        assert_eq!(parse_http_date_ms("yesterday"), None);
    }
}
