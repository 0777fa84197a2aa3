//! Persistence: round trips of every field kind in both forms, the state after a
//! crash at any point of a save, files of older versions, schema changes.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use burrow_core::chrono::{DateTime, NaiveDate, TimeZone, Utc};
use burrow_core::{Batch, Currency, Database, Error, Model, Orm, Query, Ref, Storage, Value};
use burrow_derive::Record;
use burrow_memory::{FileError, MemoryEngine, MemoryOptions};
use common::*;

fn open(opts: MemoryOptions) -> (Database, Arc<MemoryEngine>) {
    let e = Arc::new(MemoryEngine::open(opts).unwrap());
    (Database::open(model(), e.clone()).unwrap(), e)
}

/// Rows with every kind, NULLs, and the edges of each type.
fn edge_people() -> Vec<Person> {
    let mut v = people(40, 17);
    let mut max = v[0].clone();
    max.email = "max@example.org".into();
    max.last_name = "\"quoted\"\\ \u{1F600} \n\t\u{0}".into();
    max.first_name = Some(String::new());
    max.age = Some(i32::MIN);
    max.score = Some(f64::INFINITY);
    max.amount = Currency::from_scaled(i64::MAX);
    max.born = NaiveDate::from_ymd_opt(9999, 12, 31);
    max.seen = Some(Utc.timestamp_opt(253_402_300_799, 999_999_999).unwrap());
    max.active = Some(true);
    max.visits = u32::MAX;
    max.big = i64::MIN;
    max.photo = Some((0..=255).collect());
    max.meta = serde_json::json!({"deep": {"list": [1, 2.5, null, "x"]}});
    max.boss = Ref::new(i64::MAX);
    max.team = Some(i32::MAX);
    v.push(max);
    let mut min = v[1].clone();
    min.email = "min@example.org".into();
    min.first_name = None;
    min.age = None;
    min.score = Some(f64::NEG_INFINITY);
    min.amount = Currency::from_scaled(i64::MIN);
    min.born = NaiveDate::from_ymd_opt(1, 1, 1);
    min.seen = Some(DateTime::UNIX_EPOCH);
    min.active = None;
    min.photo = None;
    min.team = None;
    v.push(min);
    v
}

fn fill(c: &Database, rows: &[Person]) {
    let mut b = Batch::new();
    for p in rows {
        b.add(p.clone());
    }
    c.send(&mut b).unwrap();
}

fn all(c: &Database) -> Vec<Person> {
    c.select::<Person>(&Query::all()).unwrap()
}

fn round_trip(opts: impl Fn(&Path) -> MemoryOptions, check_text: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.data");
    let expected = {
        let (c, e) = open(opts(&path));
        fill(&c, &edge_people());
        c.delete::<Person>(42).unwrap(); // the highest ID: the next one must not reuse it
        c.delete::<Person>(3).unwrap();
        e.flush().unwrap();
        all(&c)
    };
    let bytes = std::fs::read(&path).unwrap();
    if check_text {
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.starts_with("{\"format\":\"burrow-memory\""),
            "{}",
            &text[..60]
        );
        assert!(text.contains("\"max@example.org\""));
        assert!(text.lines().count() > 40, "one row per line");
    } else {
        assert!(bytes.starts_with(b"\x89BMEM\r\n\x1a"));
    }
    let (c, _) = open(opts(&path));
    let got = all(&c);
    assert_eq!(got.len(), expected.len());
    for (a, b) in got.iter().zip(&expected) {
        assert_eq!(a, b);
    }
    let mut p = people(1, 5).remove(0);
    p.email = "next@example.org".into();
    assert_eq!(c.add(&mut p).unwrap(), 43);
    // The indexes were rebuilt.
    assert_eq!(
        c.list::<Person>("Email = 'max@example.org'", &[])
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn binary_round_trip_of_every_kind() {
    round_trip(|p| MemoryOptions::file(p), false);
}

#[test]
fn uncompressed_binary_round_trip() {
    round_trip(|p| MemoryOptions::file(p).zstd_level(None), false);
}

#[test]
fn json_round_trip_of_every_kind() {
    round_trip(|p| MemoryOptions::file(p).json(), true);
}

#[test]
fn changing_the_format_converts_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.data");
    {
        let (c, _) = open(MemoryOptions::file(&path));
        fill(&c, &people(10, 1));
    }
    let expected = {
        let (c, _) = open(MemoryOptions::file(&path).json());
        let mut p = people(1, 2).remove(0);
        p.email = "x@example.org".into();
        c.add(&mut p).unwrap();
        all(&c)
    };
    assert_eq!(std::fs::read(&path).unwrap()[0], b'{');
    let (c, _) = open(MemoryOptions::file(&path));
    assert_eq!(all(&c), expected);
}

fn file_error(r: Result<MemoryEngine, Error>) -> String {
    file_error_at(r, "")
}

fn file_error_at(r: Result<MemoryEngine, Error>, context: &str) -> String {
    match r {
        Ok(_) => panic!("a damaged file was loaded ({context})"),
        Err(Error::Engine { source, .. }) => {
            let fe = source
                .downcast_ref::<FileError>()
                .unwrap_or_else(|| panic!("not a FileError: {source}"));
            assert!(fe.to_string().contains(&fe.path().display().to_string()));
            fe.reason().to_owned()
        }
        Err(e) => panic!("unexpected error {e}"),
    }
}

/// Offsets to damage a file of `len` bytes at: every header byte (magic,
/// version, lengths, checksum), the first and last payload bytes, and a spread
/// in between.
fn offsets(len: usize, header: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..header.min(len)).collect();
    v.extend([header, header + 1, len / 3, len / 2, len - 2, len - 1]);
    v.extend((header..len).step_by((len / 40).max(1)));
    v.sort_unstable();
    v.dedup();
    v.retain(|&o| o < len);
    v
}

fn crash_during_write(json: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.data");
    let opts = || {
        let o = MemoryOptions::file(&path);
        if json {
            o.json()
        } else {
            o
        }
    };
    // The last good state, and the bytes of the next save.
    let good_rows = {
        let (c, _) = open(opts());
        fill(&c, &people(60, 3));
        all(&c)
    };
    let good = std::fs::read(&path).unwrap();
    let next = {
        let (c, _) = open(opts());
        fill(
            &c,
            &people(30, 4)
                .into_iter()
                .map(|mut p| {
                    p.email = format!("n-{}", p.email);
                    p
                })
                .collect::<Vec<_>>(),
        );
        c.delete::<Person>(5).unwrap();
        drop(c); // the engine saves on drop
        std::fs::read(&path).unwrap()
    };
    assert_ne!(good, next);
    let tmp = {
        let mut n = path.file_name().unwrap().to_os_string();
        n.push(".tmp");
        path.with_file_name(n)
    };
    let header = if json { 40 } else { 36 };
    // A crash before the rename: the final file is the good one, the temporary
    // one anything. The good state loads, whatever the temporary file holds.
    for off in offsets(next.len(), header) {
        for damaged in [next[..off].to_vec(), flip(&next, off)] {
            std::fs::write(&path, &good).unwrap();
            std::fs::write(&tmp, &damaged).unwrap();
            let (c, _) = open(opts());
            assert_eq!(all(&c), good_rows, "temp damaged at {off}");
            assert!(!tmp.exists(), "the leftover temporary file is removed");
        }
    }
    // Damage to the final file itself (a disk that lied, a copy cut short) is
    // refused with the file's name, never half loaded.
    for off in offsets(next.len(), header) {
        for (what, damaged) in [
            ("truncated", next[..off].to_vec()),
            ("flipped", flip(&next, off)),
        ] {
            if damaged.trim_ascii_end() == next.trim_ascii_end() {
                continue; // only the final newline is gone: the document is whole
            }
            std::fs::write(&path, &damaged).unwrap();
            let reason = file_error_at(MemoryEngine::open(opts()), &format!("{what} at {off}"));
            assert!(!reason.is_empty(), "{what} at {off}");
        }
    }
    // Appended garbage is refused too.
    let mut longer = next.clone();
    longer.extend_from_slice(b"garbage");
    std::fs::write(&path, &longer).unwrap();
    file_error(MemoryEngine::open(opts()));
    // The intact new file loads.
    std::fs::write(&path, &next).unwrap();
    let (c, _) = open(opts());
    assert_eq!(all(&c).len(), 89);
}

fn flip(b: &[u8], at: usize) -> Vec<u8> {
    let mut v = b.to_vec();
    v[at] ^= 0x55;
    v
}

#[test]
fn crash_during_a_binary_write() {
    crash_during_write(false);
}

#[test]
fn crash_during_a_json_write() {
    crash_during_write(true);
}

#[test]
fn a_missing_folder_or_foreign_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert!(MemoryEngine::open(MemoryOptions::file(dir.path().join("no/such/file"))).is_err());
    let path = dir.path().join("foreign");
    std::fs::write(&path, b"SQLite format 3\0").unwrap();
    assert!(file_error(MemoryEngine::open(MemoryOptions::file(&path))).contains("magic"));
    std::fs::write(&path, b"").unwrap();
    assert!(file_error(MemoryEngine::open(MemoryOptions::file(&path))).contains("empty"));
    // A newer format version is refused, not misread.
    let mut v = b"\x89BMEM\r\n\x1a".to_vec();
    v.extend_from_slice(&[9, 0]);
    v.resize(36, 0);
    std::fs::write(&path, &v).unwrap();
    assert!(file_error(MemoryEngine::open(MemoryOptions::file(&path))).contains("version 9"));
}

#[test]
fn save_on_commit_and_flush_rules() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.data");
    let opts = MemoryOptions::file(&path)
        .save_on_commit(true)
        .lock_timeout(Duration::from_millis(100));
    let (c, e) = open(opts);
    let tx = c.transaction().unwrap();
    let mut p = people(1, 1).remove(0);
    tx.add(&mut p).unwrap();
    // The file holds committed data only: a flush waits for the transaction.
    assert!(matches!(e.flush(), Err(Error::Busy { .. })));
    assert!(!path.exists());
    tx.commit().unwrap();
    // Another engine on the same file sees the committed row without a drop.
    let (other, _) = open(MemoryOptions::file(&path));
    assert_eq!(all(&other).len(), 1);
    drop(other);
    // A batch commits (through its transaction) and saves.
    fill(
        &c,
        &people(5, 2)
            .into_iter()
            .map(|mut p| {
                p.email = format!("b-{}", p.email);
                p
            })
            .collect::<Vec<_>>(),
    );
    let (other, _) = open(MemoryOptions::file(&path));
    assert_eq!(all(&other).len(), 6);
}

#[test]
fn an_open_transaction_is_not_saved_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.data");
    let tx = {
        let (c, e) = open(MemoryOptions::file(&path));
        fill(&c, &people(3, 1));
        e.flush().unwrap();
        // Committed but not saved yet: the drop must save it.
        let mut p = people(1, 3).remove(0);
        p.email = "committed".into();
        c.add(&mut p).unwrap();
        let tx = e.clone().begin().unwrap();
        let mut p = people(1, 2).remove(0);
        p.email = "uncommitted".into();
        tx.insert(<Person as burrow_core::Record>::table(), None, &p)
            .unwrap();
        tx
    };
    // The handle holds the last reference to the engine: dropping it rolls
    // back, then drops the engine, which saves.
    drop(tx);
    let (c, _) = open(MemoryOptions::file(&path));
    let emails: Vec<String> = all(&c).into_iter().map(|p| p.email).collect();
    assert_eq!(emails.len(), 4, "{emails:?}");
    assert!(emails.iter().any(|m| m == "committed"));
    assert!(!emails.iter().any(|m| m == "uncommitted"));
}

/// The fixture: written once by `write_fixture` with format version 1, kept in
/// the repository so that every later version must still read it.
const FIXTURE: &str = "tests/fixtures/people-v1.bmem";

/// Literal rows (independent of the test data generators, which may change):
/// every kind, NULLs, and the edges of each type.
fn fixture_rows() -> Vec<Person> {
    let base = Person {
        id: 0,
        email: "a@example.org".into(),
        last_name: "Dupont".into(),
        first_name: Some("Anna".into()),
        age: Some(42),
        score: Some(12.625),
        amount: Currency::from_scaled(12_345),
        born: NaiveDate::from_ymd_opt(1980, 2, 29),
        seen: Some(Utc.timestamp_opt(1_700_000_000, 500_000_000).unwrap()),
        active: Some(true),
        visits: 7,
        big: -5_000_000_000,
        photo: Some(vec![0, 1, 254, 255]),
        meta: serde_json::json!({"k": [1, "two", null]}),
        boss: Ref::new(1),
        team: Some(3),
    };
    let nulls = Person {
        email: "b@example.org".into(),
        last_name: String::new(),
        first_name: None,
        age: None,
        score: None,
        born: None,
        seen: None,
        active: None,
        photo: None,
        meta: serde_json::Value::Null,
        team: None,
        ..base.clone()
    };
    let max = Person {
        email: "c@example.org".into(),
        last_name: "\"q\"\\ \u{1F600} \n\t\u{0} Éloïse".into(),
        first_name: Some(String::new()),
        age: Some(i32::MAX),
        score: Some(f64::INFINITY),
        amount: Currency::from_scaled(i64::MAX),
        born: NaiveDate::from_ymd_opt(9999, 12, 31),
        seen: Some(Utc.timestamp_opt(253_402_300_799, 999_999_999).unwrap()),
        active: Some(false),
        visits: u32::MAX,
        big: i64::MAX,
        photo: Some((0..=255).collect()),
        boss: Ref::new(i64::MAX),
        team: Some(i32::MAX),
        ..base.clone()
    };
    let min = Person {
        email: "d@example.org".into(),
        age: Some(i32::MIN),
        score: Some(f64::NEG_INFINITY),
        amount: Currency::from_scaled(i64::MIN),
        born: NaiveDate::from_ymd_opt(1, 1, 1),
        seen: Some(DateTime::UNIX_EPOCH),
        visits: 0,
        big: i64::MIN,
        photo: Some(Vec::new()),
        boss: Ref::new(i64::MIN),
        team: Some(i32::MIN),
        ..base.clone()
    };
    let mut v = vec![base, nulls, max, min];
    for i in 0..4 {
        let mut p = v[i].clone();
        p.email = format!("{i}-{}", p.email);
        v.push(p);
    }
    v
}

#[test]
#[ignore = "writes the committed fixture; run by hand only for a new fixture"]
fn write_fixture() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let _ = std::fs::remove_file(&path);
    let (c, e) = open(MemoryOptions::file(&path));
    fill(&c, &fixture_rows());
    c.delete::<Person>(8).unwrap();
    c.delete::<Person>(2).unwrap();
    e.flush().unwrap();
}

#[test]
fn the_version_1_fixture_still_loads() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixture.bmem");
    std::fs::copy(&src, &path).unwrap();
    let (c, _) = open(MemoryOptions::file(&path));
    let mut want: Vec<Person> = fixture_rows()
        .into_iter()
        .enumerate()
        .map(|(i, mut p)| {
            p.id = i as i64 + 1;
            p
        })
        .filter(|p| p.id != 8 && p.id != 2)
        .collect();
    assert_eq!(all(&c), want);
    let mut p = want.pop().unwrap();
    p.email = "new@example.org".into();
    assert_eq!(c.add(&mut p).unwrap(), 9, "the high-water mark is kept");
}

#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core", table = "Evolve")]
struct EvolveV1 {
    id: i64,
    #[burrow(unique)]
    code: String,
    gone: Option<i64>,
    size: i32,
}

#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core", table = "Evolve")]
struct EvolveV2 {
    id: i64,
    #[burrow(unique)]
    code: String,
    size: i64,
    added: String,
    maybe: Option<NaiveDate>,
}

#[test]
fn schema_changes_keep_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evolve.data");
    let open_with = |m: Model| {
        let e = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).unwrap());
        Database::open(m, e).unwrap()
    };
    {
        let c = open_with(Model::new().with::<EvolveV1>().with::<Person>());
        for i in 0..5 {
            let mut r = EvolveV1 {
                id: 0,
                code: format!("c{i}"),
                gone: Some(i * 10),
                size: i as i32,
            };
            c.add(&mut r).unwrap();
        }
        fill(&c, &people(4, 1));
    }
    {
        // V2 drops `gone`, widens `size`, adds two fields; Person is not claimed.
        let c = open_with(Model::new().with::<EvolveV2>());
        let rows = c.select::<EvolveV2>(&Query::all()).unwrap();
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[2].size, 2);
        assert_eq!(rows[2].added, "");
        assert_eq!(rows[2].maybe, None);
        let mut r = rows[1].clone();
        r.added = "new".into();
        r.size = 1 << 40;
        c.update(&mut r).unwrap();
        let mut dup = rows[0].clone();
        dup.code = "c3".into();
        assert!(c.update(&mut dup).is_err(), "unique still enforced");
    }
    {
        // Back to V1: the dropped field kept its values, Person its rows; the
        // widened value no longer fits an i32.
        let e = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).unwrap());
        let err = Database::open(Model::new().with::<EvolveV1>(), e.clone())
            .err()
            .unwrap();
        assert!(matches!(err, Error::Schema(_)), "{err}");
        let c = Database::open(Model::new().with::<Person>(), e).unwrap();
        assert_eq!(all(&c).len(), 4);
    }
}

#[test]
fn duplicates_in_a_file_are_a_schema_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dups.json");
    {
        let (c, _) = open(MemoryOptions::file(&path).json());
        fill(&c, &people(3, 1));
    }
    // Edit the JSON by hand (and fix its checksum): two rows with one email.
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace("p1@example.org", "p0@example.org");
    let at = text.rfind(",\"crc32\":\"").unwrap();
    let crc = crc32fast::hash(&text.as_bytes()[..at]);
    let text = format!("{},\"crc32\":\"{crc:08x}\"}}\n", &text[..at]);
    std::fs::write(&path, text).unwrap();
    let e = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).unwrap());
    let err = Database::open(model(), e.clone()).err().unwrap();
    assert!(matches!(err, Error::Schema(_)), "{err}");
    // Nothing was lost: the table is still pending and written back as it was.
    drop(e);
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .matches("p0@example.org")
            .count()
            == 2
    );
}

#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core", table = "Sample")]
struct Sample {
    id: i64,
    first_name: String,
    last_name: String,
    amount: Currency,
    birth_date: NaiveDate,
    last_change: DateTime<Utc>,
    created_at: DateTime<Utc>,
}

fn sample(i: usize, at: DateTime<Utc>) -> Sample {
    Sample {
        id: 0,
        first_name: format!("Salvador{i}"),
        last_name: format!("Dali{}", i * 7),
        amount: Currency::from_scaled(((i as i64).wrapping_mul(7_919_993) % 100_000_000) + 12_345),
        birth_date: NaiveDate::from_ymd_opt(1900, 1, 1).unwrap()
            + burrow_core::chrono::Days::new((i % 40_000) as u64),
        last_change: at,
        created_at: at,
    }
}

/// Saves and loads 1,000,000 rows (no timing here: see the `persist_1m` example).
#[test]
fn a_million_rows_save_and_load() {
    const N: usize = 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("million.bmem");
    let at = Utc.timestamp_opt(1_760_000_000, 123_456_789).unwrap();
    {
        let e = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).unwrap());
        let c = Database::open(Model::new().with::<Sample>(), e.clone()).unwrap();
        let table = <Sample as burrow_core::Record>::table();
        for chunk in 0..N / 100_000 {
            let tx = e.clone().begin().unwrap();
            for i in chunk * 100_000..(chunk + 1) * 100_000 {
                tx.insert(table, None, &sample(i, at)).unwrap();
            }
            tx.commit().unwrap();
        }
        assert_eq!(c.count::<Sample>("", &[]).unwrap(), N as u64);
        e.flush().unwrap();
    }
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size > 1_000_000 && size < 60_000_000, "{size} bytes");
    let e = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).unwrap());
    let c = Database::open(Model::new().with::<Sample>(), e).unwrap();
    assert_eq!(c.count::<Sample>("", &[]).unwrap(), N as u64);
    for i in [0usize, 1, 4_321, 999_999] {
        let mut want = sample(i, at);
        want.id = i as i64 + 1;
        assert_eq!(c.retrieve::<Sample>(want.id).unwrap(), want);
    }
    let v = c.one_field_value::<Sample>("FirstName", "LastName = ?", &[Value::from("Dali6999993")]);
    assert_eq!(v.unwrap(), Some(Value::from("Salvador999999")));
}

/// A table whose rows were added out of ID order is saved (and backed up)
/// in ascending ID order, which the loader requires, while a writer goes on
/// changing it after the state was taken.
#[test]
fn rows_added_out_of_id_order_save_and_back_up_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.data");
    let backup = dir.path().join("people.backup");
    let expected = {
        let (c, e) = open(MemoryOptions::file(&path));
        for (i, id) in [50, 7, 31, 2, 99, 13].into_iter().enumerate() {
            let mut p = people(1, 100 + i as u64).remove(0);
            p.email = format!("p{id}@example.org");
            assert_eq!(c.add_with_id(&mut p, id).unwrap(), id);
        }
        c.delete::<Person>(31).unwrap();
        e.flush().unwrap();
        e.backup(&backup).unwrap();
        let expected = all(&c);
        // Changes after the state was taken reach neither file.
        c.delete::<Person>(7).unwrap();
        expected
    };
    assert_eq!(
        expected.iter().map(|p| p.id).collect::<Vec<_>>(),
        [2, 7, 13, 50, 99]
    );
    for file in [&backup, &path] {
        let e = Arc::new(MemoryEngine::open_backup(file, MemoryOptions::default()).unwrap());
        let c = Database::open(model(), e).unwrap();
        let got = all(&c);
        if file == &backup {
            assert_eq!(got, expected);
        } else {
            // The engine saved again when it was dropped, with row 7 gone.
            assert_eq!(
                got.iter().map(|p| p.id).collect::<Vec<_>>(),
                [2, 13, 50, 99]
            );
        }
    }
}
