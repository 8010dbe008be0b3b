//! TLS on the main listener: `[server] tls_cert` and `tls_key` loaded into
//! a rustls acceptor (ring provider, TLS 1.2 and 1.3, ALPN `http/1.1`), so
//! `https://` and `wss://` work without a proxy in front.
//!
//! The files are read once, at start; every failure names the key and the
//! file, and the process does not start.

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig as RustlsConfig;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::ServerConfig;

/// Why the TLS certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("{key}: cannot read {path:?}: {source}")]
    Read {
        /// The config key naming the file.
        key: &'static str,
        /// The file.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not well-formed PEM.
    #[error("{key}: {path:?} is not valid PEM: {why}")]
    Pem {
        /// The config key naming the file.
        key: &'static str,
        /// The file.
        path: String,
        /// What the parser said.
        why: String,
    },
    /// No `CERTIFICATE` section in the certificate file.
    #[error("server.tls_cert: no certificate in {path:?} (expected PEM \"BEGIN CERTIFICATE\")")]
    NoCertificate {
        /// The file.
        path: String,
    },
    /// No private key section in the key file.
    #[error(
        "server.tls_key: no private key in {path:?} (expected PEM PKCS#8, PKCS#1 or SEC1 \"BEGIN … PRIVATE KEY\")"
    )]
    NoKey {
        /// The file.
        path: String,
    },
    /// The key is unusable or does not belong to the certificate.
    #[error("server.tls_key: cannot be used with server.tls_cert: {why}")]
    Unusable {
        /// What rustls said.
        why: String,
    },
}

/// The acceptor for `server`'s certificate and key; `None` when TLS is off
/// (validation guarantees the two keys are set together).
pub(crate) fn acceptor(server: &ServerConfig) -> Result<Option<TlsAcceptor>, TlsError> {
    let (Some(cert_path), Some(key_path)) = (&server.tls_cert, &server.tls_key) else {
        return Ok(None);
    };
    let certs = certificates(cert_path)?;
    let key = private_key(key_path)?;
    let unusable = |err: tokio_rustls::rustls::Error| TlsError::Unusable {
        why: err.to_string(),
    };
    let mut config = RustlsConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(unusable)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(unusable)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

fn read(key: &'static str, path: &str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        key,
        path: path.to_owned(),
        source,
    })
}

fn bad_pem(key: &'static str, path: &str) -> impl Fn(pem::Error) -> TlsError {
    move |err| TlsError::Pem {
        key,
        path: path.to_owned(),
        why: err.to_string(),
    }
}

/// Every certificate in the file, leaf first.
fn certificates(path: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    const KEY: &str = "server.tls_cert";
    let bytes = read(KEY, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad_pem(KEY, path))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The first private key in the file.
fn private_key(path: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    const KEY: &str = "server.tls_key";
    let bytes = read(KEY, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|err| match err {
        pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_owned(),
        },
        other => bad_pem(KEY, path)(other),
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A temporary directory holding `files`, removed on drop.
    struct Files(PathBuf);

    impl Files {
        fn new(name: &str, files: &[(&str, &str)]) -> Self {
            let dir =
                std::env::temp_dir().join(format!("pushgate-tls-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            for (file, text) in files {
                std::fs::write(dir.join(file), text).expect("write");
            }
            Self(dir)
        }

        fn path(&self, file: &str) -> String {
            self.0.join(file).display().to_string()
        }

        fn server(&self, cert: &str, key: &str) -> ServerConfig {
            ServerConfig {
                tls_cert: Some(self.path(cert)),
                tls_key: Some(self.path(key)),
                ..ServerConfig::default()
            }
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn self_signed() -> (String, String) {
        let cert =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
        (cert.cert.pem(), cert.signing_key.serialize_pem())
    }

    fn error(files: &Files, cert: &str, key: &str) -> String {
        match acceptor(&files.server(cert, key)) {
            Ok(_) => panic!("{cert} + {key} should be refused"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn no_tls_keys_means_no_acceptor() {
        assert!(acceptor(&ServerConfig::default()).expect("ok").is_none());
    }

    #[test]
    fn a_matching_certificate_and_key_make_an_acceptor() {
        let (cert, key) = self_signed();
        let files = Files::new("ok", &[("cert.pem", &cert), ("key.pem", &key)]);
        let acceptor = acceptor(&files.server("cert.pem", "key.pem")).expect("loads");
        assert!(acceptor.is_some());
    }

    #[test]
    fn every_failure_names_its_key_and_file() {
        let (cert, key) = self_signed();
        let (other_cert, _) = self_signed();
        let files = Files::new(
            "bad",
            &[
                ("cert.pem", &cert),
                ("key.pem", &key),
                ("other.pem", &other_cert),
                ("empty.pem", ""),
                ("broken.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n"),
            ],
        );
        let cases = [
            ("missing.pem", "key.pem", "server.tls_cert: cannot read"),
            ("cert.pem", "missing.pem", "server.tls_key: cannot read"),
            ("empty.pem", "key.pem", "server.tls_cert: no certificate"),
            ("key.pem", "key.pem", "server.tls_cert: no certificate"),
            ("broken.pem", "key.pem", "server.tls_cert: "),
            ("cert.pem", "empty.pem", "server.tls_key: no private key"),
            ("cert.pem", "cert.pem", "server.tls_key: no private key"),
            ("other.pem", "key.pem", "server.tls_key: cannot be used"),
        ];
        for (cert, key, expected) in cases {
            let err = error(&files, cert, key);
            assert!(err.starts_with(expected), "{cert} + {key}: {err}");
        }
        let err = error(&files, "missing.pem", "key.pem");
        assert!(err.contains("missing.pem"), "{err}");
    }
}
