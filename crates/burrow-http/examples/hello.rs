//! A handler of its own on Burrow's server core: TechEmpower's `/plaintext`
//! and `/json`.
//! `cargo run --release -p burrow-http --example hello -- 127.0.0.1:8080 [threads]`,
//! then e.g. `wrk -c 256 -t 2 -d 5 http://127.0.0.1:8080/plaintext`.
//! Serves until it reads a line on standard input (or its input closes).

use burrow_http::web::{Handler, HttpServer, Request, Response};

struct Hello;

#[derive(serde::Serialize)]
struct Message {
    message: &'static str,
}

impl Handler for Hello {
    /// Nothing kept per connection.
    type Conn = ();

    async fn call(&self, _: &mut (), req: Request) -> Response {
        if req.method() != "GET" && req.method() != "HEAD" {
            return Response::error(405, "Method Not Allowed");
        }
        match req.path() {
            "/plaintext" => Response::with("text/plain", b"Hello, World!".to_vec()),
            "/json" => {
                // Serialized per request, as TechEmpower's rules ask.
                let body = serde_json::to_vec(&Message {
                    message: "Hello, World!",
                })
                .unwrap_or_default();
                Response::with("application/json", body)
            }
            _ => Response::error(404, "Not Found"),
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args.get(1).map_or("127.0.0.1:8080", String::as_str);
    let mut builder = HttpServer::builder(Hello);
    if let Some(n) = args.get(2) {
        builder = builder.threads(n.parse()?);
    }
    let server = builder.bind(addr)?;
    println!("http://{}/plaintext", server.local_addr());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    server.shutdown();
    Ok(())
}
