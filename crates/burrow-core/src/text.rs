//! Text from bytes, checked.

use std::str::Utf8Error;

/// `b` as text when it is UTF-8, exactly as [`std::str::from_utf8`]
/// answers, with ASCII (nearly every stored name, date and code) recognised
/// a word at a time: on the short texts of a row the general check costs
/// several times more, and a whole-table read pays it for every field.
#[inline]
pub fn utf8(b: &[u8]) -> Result<&str, Utf8Error> {
    if !any_word(b, 0, |w| w & 0x8080_8080_8080_8080 != 0) {
        // SAFETY: ASCII is UTF-8.
        #[allow(unsafe_code)]
        return Ok(unsafe { std::str::from_utf8_unchecked(b) });
    }
    std::str::from_utf8(b)
}

/// Whether `hit` holds for some eight bytes of `b` read as a little-endian
/// word: every whole word, then a tail shorter than a word as the last eight
/// bytes (overlapping the word before), or padded with `pad` when `b` is
/// shorter than a word. The standard library's byte-wise checks take a byte
/// at a time below a word and around the alignment of longer texts, which on
/// the short texts of a row costs several times this. `hit` must hold for no
/// word of `pad` bytes and judge each byte on its own, so that bytes read
/// twice or padding change no answer.
#[inline(always)]
pub(crate) fn any_word(b: &[u8], pad: u8, hit: impl Fn(u64) -> bool) -> bool {
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().expect("eight bytes"));
    if b.len() < 8 {
        let mut w = [pad; 8];
        w[..b.len()].copy_from_slice(b);
        return hit(u64::from_le_bytes(w));
    }
    if b.chunks_exact(8).any(|w| hit(word(w))) {
        return true;
    }
    b.len() % 8 != 0 && hit(word(&b[b.len() - 8..]))
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

    /// Every length a word, its tail or its padding can cut differently,
    /// with one byte above ASCII (valid or not as UTF-8) at every place.
    #[test]
    fn a_high_byte_is_seen_at_every_place() {
        for len in 0..=25 {
            let plain = vec![b'x'; len];
            assert_eq!(utf8(&plain), std::str::from_utf8(&plain));
            for at in 0..len {
                for high in [0x80, 0xc3, 0xff] {
                    let mut b = plain.clone();
                    b[at] = high;
                    assert_eq!(utf8(&b), std::str::from_utf8(&b), "{b:?}");
                }
                let mut b = plain.clone();
                b.splice(at..at + 1, "\u{e9}".bytes());
                assert!(utf8(&b).is_ok());
            }
        }
    }
}
