//! HTTPS, with the `tls` feature: the server's acceptor and the client's
//! connector, both rustls with its `ring` provider (chosen explicitly, so that
//! another crate enabling a second provider cannot make the choice ambiguous).
//!
//! Certificates and keys come as PEM. The server takes its certificate chain
//! and private key (PKCS #8, PKCS #1 or SEC1); the client trusts the public web
//! roots (`webpki-roots`) unless given its own CAs.

use std::net::TcpStream;
use std::sync::Arc;

use burrow_core::{Error, Result};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, StreamOwned};

use crate::remote::Stream;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn bad(what: &str, e: impl std::fmt::Display) -> Error {
    Error::BadInput(format!("TLS: {what}: {e}"))
}

fn certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(what, e))?;
    if certs.is_empty() {
        return Err(bad(what, "no PEM certificate found"));
    }
    Ok(certs)
}

/// The server's TLS settings, from its certificate chain and private key.
pub(crate) fn acceptor(cert_pem: &[u8], key_pem: &[u8]) -> Result<tokio_rustls::TlsAcceptor> {
    let chain = certs(cert_pem, "the server certificate")?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad("the private key", e))?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("protocol versions", e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| bad("the certificate and key", e))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// What the client needs to open TLS connections to one host.
pub(crate) struct Connector {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl Connector {
    /// For `host` (a name or an IP address, without the port), trusting the
    /// CAs in `roots_pem`, or the public web roots when `None`.
    pub(crate) fn new(host: &str, roots_pem: Option<&[u8]>) -> Result<Connector> {
        let mut roots = RootCertStore::empty();
        match roots_pem {
            Some(pem) => {
                for c in certs(pem, "the trusted CA certificates")? {
                    roots
                        .add(c)
                        .map_err(|e| bad("a trusted CA certificate", e))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("protocol versions", e))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let name = ServerName::try_from(bare.to_owned())
            .map_err(|e| bad(&format!("server name {bare:?}"), e))?;
        Ok(Connector {
            config: Arc::new(config),
            name,
        })
    }

    /// Wraps a connected socket; the handshake happens on first use.
    pub(crate) fn wrap(&self, tcp: TcpStream) -> Result<Stream> {
        let conn = ClientConnection::new(self.config.clone(), self.name.clone())
            .map_err(|e| Error::engine("remote", format!("TLS: {e}")))?;
        Ok(Stream::Tls(Box::new(StreamOwned::new(conn, tcp))))
    }
}
