//! TLS to PostgreSQL, chosen by the URL's `sslmode` and `sslrootcert` with
//! libpq's meanings, so a URL that works with `psql` works here:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | – |
//! | `prefer` (default) | when the server offers it | not checked |
//! | `require` | always | not checked; checked like `verify-ca` when `sslrootcert` is given |
//! | `verify-ca` | always | signed by the CA of `sslrootcert` |
//! | `verify-full` | always | signed by a trusted CA and naming the host |
//!
//! The trusted CAs are the PEM file `sslrootcert`; for `verify-full` without
//! one (or with `sslrootcert=system`), the public web roots. `verify-ca` needs
//! `sslrootcert`: the public roots would vouch for any public certificate,
//! whatever its name. Unlike libpq, nothing is read from `~/.postgresql`.
//! Without the `tls` feature the engine speaks plain TCP only: `prefer` then
//! means plain, and the modes that need TLS are refused with a message naming
//! the feature.

use burrow_core::{Error, Result};

use crate::options::url_query;

/// How a connection uses TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The URL's TLS settings, and the URL without them for `tokio-postgres`
/// (which knows `disable`, `prefer` and `require` only).
pub(crate) struct TlsSettings {
    pub url: String,
    pub mode: SslMode,
    pub root_cert: Option<String>,
}

impl TlsSettings {
    pub(crate) fn from_url(url: &str) -> Result<TlsSettings> {
        let mut mode = SslMode::Prefer;
        let mut root_cert = None;
        for (k, v) in url_query(url) {
            match k.as_str() {
                "sslmode" => {
                    mode = match v.as_str() {
                        "disable" => SslMode::Disable,
                        // libpq's `allow` tries plain first: plain is what
                        // this engine gives it.
                        "allow" | "prefer" => SslMode::Prefer,
                        "require" => SslMode::Require,
                        "verify-ca" => SslMode::VerifyCa,
                        "verify-full" => SslMode::VerifyFull,
                        other => {
                            return Err(Error::BadInput(format!(
                                "sslmode={other:?}: expected disable, allow, prefer, require, \
                                 verify-ca or verify-full"
                            )))
                        }
                    }
                }
                "sslrootcert" => root_cert = Some(percent_decoded(&v)?),
                _ => {}
            }
        }
        let url = match url.split_once('?') {
            Some((base, query)) => {
                let rest: Vec<&str> = query
                    .split('&')
                    .filter(|kv| {
                        let k = kv.split_once('=').map_or(*kv, |(k, _)| k);
                        !k.eq_ignore_ascii_case("sslmode") && !k.eq_ignore_ascii_case("sslrootcert")
                    })
                    .collect();
                if rest.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", rest.join("&"))
                }
            }
            None => url.to_owned(),
        };
        Ok(TlsSettings {
            url,
            mode,
            root_cert,
        })
    }

    /// The mode `tokio-postgres` negotiates with.
    pub(crate) fn driver_mode(&self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as M;
        match self.mode {
            SslMode::Disable => M::Disable,
            SslMode::Prefer => M::Prefer,
            _ => M::Require,
        }
    }
}

/// `%2F` and the like in a path given in a URL.
fn percent_decoded(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| Error::BadInput(format!("bad %-escape in sslrootcert {s:?}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::BadInput(format!("sslrootcert {s:?} is not UTF-8")))
}

#[cfg(feature = "tls")]
pub(crate) use with_tls::connector;

#[cfg(feature = "tls")]
mod with_tls {
    use std::sync::Arc;

    use burrow_core::{Error, Result};
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::crypto::{
        verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms,
    };
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
    use tokio_postgres_rustls::MakeRustlsConnect;

    use super::{SslMode, TlsSettings};

    /// The connector for `settings`; `None` when TLS is off.
    pub(crate) fn connector(settings: &TlsSettings) -> Result<Option<MakeRustlsConnect>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let system = settings.root_cert.as_deref() == Some("system");
        let check = match (settings.mode, &settings.root_cert) {
            (SslMode::Disable, _) => return Ok(None),
            // As libpq 16: the public roots vouch for any name, so they are
            // only worth trusting together with the host name.
            (SslMode::VerifyFull, _) => Check::Full,
            (_, Some(_)) if system => {
                return Err(Error::BadInput(
                    "sslrootcert=system needs sslmode=verify-full: any public certificate \
                     would pass a weaker check"
                        .into(),
                ))
            }
            (SslMode::Prefer, _) | (SslMode::Require, None) => Check::Nothing,
            (SslMode::Require, Some(_)) => Check::Chain,
            (SslMode::VerifyCa, Some(_)) => Check::Chain,
            (SslMode::VerifyCa, None) => {
                return Err(Error::BadInput(
                    "sslmode=verify-ca needs sslrootcert, the CA to check the server's \
                     certificate against (the public roots would accept any public \
                     certificate, whatever its name)"
                        .into(),
                ))
            }
        };
        let algorithms = provider.signature_verification_algorithms;
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            Check::Nothing => Arc::new(Lenient {
                chain: None,
                algorithms,
            }),
            Check::Chain | Check::Full => {
                let mut roots = RootCertStore::empty();
                match settings.root_cert.as_deref().filter(|_| !system) {
                    Some(path) => {
                        let pem = std::fs::read(path).map_err(|e| {
                            Error::BadInput(format!("sslrootcert {path:?} cannot be read: {e}"))
                        })?;
                        for cert in CertificateDer::pem_slice_iter(&pem) {
                            let cert = cert.map_err(|e| {
                                Error::BadInput(format!("sslrootcert {path:?}: {e}"))
                            })?;
                            roots.add(cert).map_err(|e| {
                                Error::BadInput(format!("sslrootcert {path:?}: {e}"))
                            })?;
                        }
                        if roots.is_empty() {
                            return Err(Error::BadInput(format!(
                                "sslrootcert {path:?} holds no PEM certificate"
                            )));
                        }
                    }
                    None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
                }
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| Error::BadInput(format!("TLS roots: {e}")))?;
                if check == Check::Full {
                    webpki
                } else {
                    Arc::new(Lenient {
                        chain: Some(webpki),
                        algorithms,
                    })
                }
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::BadInput(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Some(MakeRustlsConnect::new(config)))
    }

    #[derive(Clone, Copy, PartialEq)]
    enum Check {
        Nothing,
        Chain,
        Full,
    }

    /// The certificate checks libpq makes short of `verify-full`: with no
    /// chain (`prefer`, `require` without a root certificate) none, the link
    /// encrypted but the certificate taken as presented; with one (`verify-ca`)
    /// the chain must lead to a trusted CA, whatever name the certificate
    /// gives. Either way the handshake's signatures are verified against the
    /// certificate presented.
    #[derive(Debug)]
    struct Lenient {
        chain: Option<Arc<WebPkiServerVerifier>>,
        algorithms: WebPkiSupportedAlgorithms,
    }

    impl ServerCertVerifier for Lenient {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            let Some(chain) = &self.chain else {
                return Ok(ServerCertVerified::assertion());
            };
            match chain.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                r => r,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(message, cert, dss, &self.algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.algorithms.supported_schemes()
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn ssl_options_are_read_and_removed() -> Result<()> {
        let s = TlsSettings::from_url(
            "postgres://u@h/db?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
        )?;
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(s.root_cert.as_deref(), Some("/tmp/ca.pem"));
        assert_eq!(s.url, "postgres://u@h/db?application_name=x");
        let s = TlsSettings::from_url("postgres://u@h/db?sslmode=disable")?;
        assert_eq!(
            (s.mode, s.url.as_str()),
            (SslMode::Disable, "postgres://u@h/db")
        );
        assert_eq!(
            TlsSettings::from_url("postgres://u@h/db")?.mode,
            SslMode::Prefer
        );
        assert!(TlsSettings::from_url("postgres://u@h/db?sslmode=always").is_err());
        assert!(TlsSettings::from_url("postgres://u@h/db?sslrootcert=%zz").is_err());
        Ok(())
    }
}
