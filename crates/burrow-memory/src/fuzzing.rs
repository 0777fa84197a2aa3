//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz). **Not part of
//! the API**: hidden from the documentation, no stability promise, may change
//! or go at any time.

use std::path::Path;

use burrow_core::Error;

use crate::persist::{self, FileError, FileTable, Source, HEADER_LEN, MAGIC};

fn sources(tables: &[FileTable]) -> Vec<&dyn Source> {
    tables.iter().map(|t| t as &dyn Source).collect()
}

/// The loader on a file made of `data`: its first byte chooses how. Bytes as
/// they are reach few paths past the checksums, so the other forms make the
/// checksums right: a binary payload in a valid header, a header of the
/// input's own with its lengths and checksum fixed (any compression code and
/// announced size), or a JSON document with its checksum appended.
pub fn load(data: &[u8]) {
    let Some((&how, rest)) = data.split_first() else {
        return;
    };
    let file = match how % 4 {
        0 => rest.to_vec(),
        1 => {
            let (header, stored) = persist::binary_file(rest, None).expect("a header");
            [header, stored].concat()
        }
        2 => {
            if rest.len() < HEADER_LEN {
                return;
            }
            let mut f = rest.to_vec();
            f[..8].copy_from_slice(&MAGIC);
            let stored = (f.len() - HEADER_LEN) as u64;
            f[12..20].copy_from_slice(&stored.to_le_bytes());
            let mut crc = crc32fast::Hasher::new();
            crc.update(&f[..32]);
            crc.update(&f[HEADER_LEN..]);
            let crc = crc.finalize().to_le_bytes();
            f[32..36].copy_from_slice(&crc);
            f
        }
        _ => {
            let mut f = rest.to_vec();
            let crc = crc32fast::hash(&f);
            f.extend_from_slice(format!(",\"crc32\":\"{crc:08x}\"}}\n").as_bytes());
            f
        }
    };
    check(&file);
}

/// A file is refused with a [`FileError`], or loads into tables that write
/// back, in every form, into files that load into the same tables: the same
/// bytes through the binary form, the same values through JSON (a null's
/// bytes in a binary row are not read, so JSON writes them as zeros).
pub fn check(file: &[u8]) {
    let path = Path::new("fuzz.bmem");
    let tables = match persist::parse_file(path, file) {
        Ok(t) => t,
        Err(Error::Engine { source, .. }) if source.downcast_ref::<FileError>().is_some() => return,
        Err(e) => panic!("refused without a FileError: {e:?}"),
    };
    let payload = persist::binary_payload(&sources(&tables));
    let json = persist::json_file(&sources(&tables)).expect("a JSON file of tables it read");
    for zstd in [None, Some(1)] {
        let (header, stored) = persist::binary_file(&payload, zstd).expect("a binary file");
        let back = persist::parse_file(path, &[header, stored].concat())
            .unwrap_or_else(|e| panic!("a binary file it wrote is refused: {e}"));
        assert_eq!(persist::binary_payload(&sources(&back)), payload);
    }
    let back = persist::parse_file(path, &json)
        .unwrap_or_else(|e| panic!("a JSON file it wrote is refused: {e}"));
    let again = persist::json_file(&sources(&back)).expect("a JSON file of tables it read");
    assert_eq!(
        String::from_utf8_lossy(&again),
        String::from_utf8_lossy(&json)
    );
}
