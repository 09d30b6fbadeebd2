//! HTTPS for the API: `vantage server --tls-cert FILE --tls-key FILE` serves TLS 1.2/1.3
//! (rustls) with a certificate chain and key in PEM, from a public or a private CA.
//! Agents and the CLI trust a private CA with `--ca-cert FILE`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Where the server's certificate chain and private key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the server's certificate first, then any intermediates.
    pub cert: PathBuf,
    /// PEM: the private key (PKCS #8, PKCS #1 or SEC1).
    pub key: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificate chain {path}: {reason}")]
    Certificates { path: PathBuf, reason: String },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("cannot read the private key {path}: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("the key {key} does not fit the certificate {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

/// Reads the chain and key and builds the acceptor; every failure names its file.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let chain = read_chain(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|error| TlsError::Key {
        path: files.key.clone(),
        reason: error.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(chain, key))
        .map_err(|error| TlsError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
            reason: error.to_string(),
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|error| TlsError::Certificates {
            path: path.to_path_buf(),
            reason: error.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(chain)
}
