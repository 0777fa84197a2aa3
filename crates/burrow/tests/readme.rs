//! The README's client-server program is the `server_and_client` example,
//! which CI builds and runs: the two must not drift apart. (README blocks
//! that need no feature are compiled and run as doctests of this crate.)

#[test]
fn the_readme_shows_the_server_and_client_example_as_it_is() {
    let readme = include_str!("../../../README.md");
    let example = include_str!("../examples/server_and_client.rs");
    let from = readme
        .find("## Client-server")
        .expect("a Client-server section");
    let block = &readme[from..];
    let start = block.find("```rust,ignore\n").expect("a code block") + "```rust,ignore\n".len();
    let len = block[start..].find("```\n").expect("the end of the block");
    let shown = &block[start..start + len];
    assert!(shown.len() > 500, "the block is a whole program");
    assert!(
        example.ends_with(shown),
        "README's Client-server block differs from examples/server_and_client.rs"
    );
}
