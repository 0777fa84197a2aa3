//! A server with users and rights, and a Rust client calling it through the
//! same `Orm` API (feature `http`).
//!
//! `cargo run -p burrow --features http --example server_and_client`

use std::sync::Arc;

use burrow::http::{Auth, Group, RemoteEngine, Rights, Server};
use burrow::prelude::*;
use burrow::sqlite::SqliteEngine;

#[derive(Record, Debug, Clone)]
struct Note {
    id: i64,
    text: String,
}

fn main() -> burrow::Result<()> {
    let model = Model::new().with::<Note>();
    let hosted = Arc::new(Database::open(
        model.clone(),
        Arc::new(SqliteEngine::memory()?),
    )?);
    let auth = Auth::new()
        .group(Group::new("staff").all_tables(Rights::ALL))
        .group(Group::new("readers").all_tables(Rights::READ))
        .user("ann", "a long passphrase", "staff")?
        .user("bob", "another passphrase", "readers")?;
    // Port 0: the system picks a free one.
    let server = Server::builder(hosted, "root")
        .auth(auth)
        .bind("127.0.0.1:0")?;
    println!("serving {}", server.url());
    println!("try: curl -s {}/timestamp", server.url());

    // Ann writes through the HTTP client engine.
    let ann = RemoteEngine::builder(&server.url())
        .login("ann", "a long passphrase")
        .connect()?;
    let db = Database::open(model.clone(), Arc::new(ann))?;
    let id = db.add(&mut Note {
        id: 0,
        text: "written over HTTP".into(),
    })?;
    println!("ann added note {id}: {}", db.retrieve::<Note>(id)?.text);

    // Bob may read, not write.
    let bob = RemoteEngine::builder(&server.url())
        .login("bob", "another passphrase")
        .connect()?;
    let ro = Database::open(model, Arc::new(bob))?;
    println!("bob reads {} note(s)", ro.count::<Note>("", &[])?);
    let refused = ro.add(&mut Note {
        id: 0,
        text: "not allowed".into(),
    });
    println!("bob's write: {}", refused.unwrap_err());

    server.shutdown();
    Ok(())
}
