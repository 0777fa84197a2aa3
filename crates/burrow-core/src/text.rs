//! Text from bytes, checked.

use std::str::Utf8Error;

/// `b` as text when it is UTF-8, exactly as [`std::str::from_utf8`]
/// answers, with ASCII (nearly every stored name, date and code) recognised
/// a word at a time: on the short texts of a row the general check costs
/// several times more, and a whole-table read pays it for every field.
#[inline]
pub fn utf8(b: &[u8]) -> Result<&str, Utf8Error> {
    if b.is_ascii() {
        // SAFETY: ASCII is UTF-8.
        #[allow(unsafe_code)]
        return Ok(unsafe { std::str::from_utf8_unchecked(b) });
    }
    std::str::from_utf8(b)
}

#[cfg(test)]
mod test {
    use super::utf8;

    #[test]
    fn answers_as_the_standard_check() {
        for b in [
            &b""[..],
            b"plain ASCII, long enough to span several words of eight bytes",
            "caf\u{e9} and \u{1f980}".as_bytes(),
            b"\xff",
            b"ok then \xc3",
            b"\xed\xa0\x80 surrogate",
        ] {
            assert_eq!(utf8(b), std::str::from_utf8(b), "{b:?}");
        }
    }
}
