//! TLS to the members, on rustls with the ring provider: the trust (the CA certificates a
//! member's server certificate must chain to) and the glue for both drivers.
//!
//! - [`ServerTrust`] holds the CA certificates and a ready rustls [`ClientConfig`]. It is the
//!   `MakeTlsConnect` of tokio-postgres (implemented here over tokio-rustls, no extra crate).
//! - [`mysql_ssl_opts`] turns it into mysql_async's [`mysql_async::SslOpts`] (mysql_async runs
//!   its own rustls connector; see that function for what it does and does not check).
//!
//! ## Verification
//! [`Verify::Ca`] (the default) is libpq's `sslmode=verify-ca`: the server's chain must lead to
//! one of the trusted CAs, every certificate of it must be valid now (expiry checked) and fit for
//! a TLS server, but the host name is not compared with the certificate. The operator dials
//! members by pod IP (or a per-pod DNS name the certificate may not carry), which no
//! certificate names, so the name check would refuse every member. A certificate any of the
//! trusted CAs signed is therefore accepted for any member: the CA must issue server
//! certificates for this cluster's members only. [`Verify::Full`] adds the name check
//! (`sslmode=verify-full`).
//!
//! Verify-ca wraps rustls' WebPKI verifier and forgives exactly its name error
//! (`NotValidForName`, `NotValidForNameContext`): rustls checks the chain, the validity dates and
//! the key usage before the name, so a certificate that reaches the name check has passed the
//! rest.
//!
//! The provider is always ring, passed explicitly, never rustls' process default. (mysql_async
//! builds its connector from the process default: with ring the only provider compiled in, that
//! is ring too.)

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

/// How much of the server certificate is checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Verify {
    /// The chain leads to a trusted CA and is valid now; the host name is not compared
    /// (`sslmode=verify-ca`). The default: members are dialled by pod IP.
    #[default]
    Ca,
    /// As [`Verify::Ca`], and the certificate must name the host dialled
    /// (`sslmode=verify-full`).
    Full,
}

/// Why a trust could not be built, or a TLS connection not be started.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The bundle holds no `CERTIFICATE` block.
    #[error(
        "no CA certificate in the PEM bundle (a -----BEGIN CERTIFICATE----- block is expected)"
    )]
    NoCertificate,
    /// The bundle is not readable PEM.
    #[error("the CA bundle is not readable PEM: {0}")]
    Pem(#[source] rustls_pki_types::pem::Error),
    /// rustls refused a certificate of the bundle as a trust anchor.
    #[error("CA certificate {index} of the bundle (counting from 1) is refused: {source}")]
    BadCertificate {
        /// Its place in the bundle, from 1.
        index: usize,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
    /// The certificate verifier could not be built from the CAs.
    #[error("no certificate verifier from the CA bundle: {0}")]
    Verifier(#[source] rustls::client::VerifierBuilderError),
    /// The client configuration could not be built (the provider offers no protocol version).
    #[error("TLS client configuration: {0}")]
    Config(#[source] rustls::Error),
    /// The host to dial is neither a DNS name nor an IP address, so TLS has no server name.
    #[error("`{host}` is neither a DNS name nor an IP address: no TLS server name")]
    ServerName {
        /// The host given.
        host: String,
    },
}

/// The CA certificates a member's server certificate must chain to, and the rustls client
/// configuration that checks it (see the module documentation for [`Verify`]).
///
/// Cheap to clone (the configuration is shared). Its `Debug` output shows the mode and the
/// number of certificates, no bytes.
#[derive(Clone)]
pub struct ServerTrust {
    certificates: Vec<CertificateDer<'static>>,
    config: Arc<ClientConfig>,
    verify: Verify,
    server_name: Option<String>,
    peer: Option<PeerCertificate>,
}

/// The certificate the server presented in a handshake (its end-entity certificate, DER),
/// recorded by a trust made with [`ServerTrust::recording`]: what the operator compares with
/// the cluster's current certificate to know whether the server still serves an older one.
#[derive(Clone, Debug, Default)]
pub struct PeerCertificate(Arc<std::sync::Mutex<Option<CertificateDer<'static>>>>);

impl PeerCertificate {
    /// The certificate of the last handshake, once one completed.
    pub fn get(&self) -> Option<CertificateDer<'static>> {
        self.0.lock().ok().and_then(|c| c.clone())
    }

    fn set(&self, certificate: CertificateDer<'static>) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(certificate);
        }
    }
}

impl fmt::Debug for ServerTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTrust")
            .field("verify", &self.verify)
            .field("certificates", &self.certificates.len())
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl ServerTrust {
    /// A [`Verify::Ca`] trust in the CA certificates of a PEM bundle (blocks other than
    /// `CERTIFICATE`, such as a key, are skipped).
    pub fn from_pem(pem: &[u8]) -> Result<ServerTrust, TlsError> {
        ServerTrust::from_pem_verifying(pem, Verify::Ca)
    }

    /// A trust in the CA certificates of a PEM bundle, checking as `verify` says.
    pub fn from_pem_verifying(pem: &[u8], verify: Verify) -> Result<ServerTrust, TlsError> {
        let certificates = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(TlsError::Pem)?;
        if certificates.is_empty() {
            return Err(TlsError::NoCertificate);
        }
        ServerTrust::build(certificates, verify)
    }

    /// The same CAs, checking as `verify` says.
    pub fn with_verify(&self, verify: Verify) -> Result<ServerTrust, TlsError> {
        ServerTrust::build(self.certificates.clone(), verify)
    }

    fn build(
        certificates: Vec<CertificateDer<'static>>,
        verify: Verify,
    ) -> Result<ServerTrust, TlsError> {
        let mut roots = RootCertStore::empty();
        for (i, cert) in certificates.iter().enumerate() {
            roots
                .add(cert.clone())
                .map_err(|source| TlsError::BadCertificate {
                    index: i + 1,
                    source,
                })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(TlsError::Verifier)?;
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(MemberVerifier { inner, verify }))
            .with_no_client_auth();
        Ok(ServerTrust {
            certificates,
            config: Arc::new(config),
            verify,
            server_name: None,
            peer: None,
        })
    }

    /// The same trust, recording the certificate each handshake sees into `peer`
    /// (tokio-postgres connections only).
    pub fn recording(&self, peer: PeerCertificate) -> ServerTrust {
        ServerTrust {
            peer: Some(peer),
            ..self.clone()
        }
    }

    /// The same CAs, checking the certificate fully ([`Verify::Full`]) for `name` whatever
    /// address is dialled: the operator dials a member by its pod IP, which no certificate
    /// names, and checks that the certificate is the one of that member's DNS name
    /// (`<pod>.<cluster>-headless.<namespace>.svc`, covered by the cluster's certificate).
    pub fn for_name(&self, name: &str) -> Result<ServerTrust, TlsError> {
        ServerName::try_from(name.to_owned()).map_err(|_| TlsError::ServerName {
            host: name.to_owned(),
        })?;
        // A trust that checks fully already has the configuration: only the name is new (this
        // runs for every dial of a member).
        let mut trust = match self.verify {
            Verify::Full => self.clone(),
            Verify::Ca => ServerTrust::build(self.certificates.clone(), Verify::Full)?,
        };
        trust.server_name = Some(name.to_owned());
        Ok(trust)
    }

    /// The name the certificate must carry whatever address is dialled
    /// ([`ServerTrust::for_name`]), if one was given.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// How the server certificate is checked.
    pub fn verify(&self) -> Verify {
        self.verify
    }

    /// The trusted CA certificates (DER), in the bundle's order.
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        &self.certificates
    }

    /// The rustls client configuration (ring provider, TLS 1.2 and 1.3, no client
    /// certificate, the verifier of [`ServerTrust::verify`]).
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// A connector for `host` (the name or IP address dialled; used as TLS server name).
    fn connector_for(&self, host: &str) -> Result<PostgresTlsConnect, TlsError> {
        let host = self.server_name.as_deref().unwrap_or(host);
        let server_name =
            ServerName::try_from(host.to_owned()).map_err(|_| TlsError::ServerName {
                host: host.to_owned(),
            })?;
        Ok(PostgresTlsConnect {
            config: self.config.clone(),
            server_name,
            peer: self.peer.clone(),
        })
    }
}

/// rustls' WebPKI verifier, forgiving the host name in [`Verify::Ca`] mode (only that).
#[derive(Debug)]
struct MemberVerifier {
    inner: Arc<WebPkiServerVerifier>,
    verify: Verify,
}

impl ServerCertVerifier for MemberVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            // rustls reports the name only after the chain, dates and usage passed.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.verify == Verify::Ca => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

// ------------------------------------------------------------------------------ tokio-postgres

impl<S> MakeTlsConnect<S> for ServerTrust
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type TlsConnect = PostgresTlsConnect;
    type Error = TlsError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<PostgresTlsConnect, TlsError> {
        self.connector_for(domain)
    }
}

/// The TLS handshake for one tokio-postgres connection (made by [`ServerTrust`]).
pub struct PostgresTlsConnect {
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
    peer: Option<PeerCertificate>,
}

impl fmt::Debug for PostgresTlsConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresTlsConnect")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl<S> TlsConnect<S> for PostgresTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type Error = io::Error;
    type Future = TlsConnectFuture<S>;

    fn connect(self, stream: S) -> TlsConnectFuture<S> {
        TlsConnectFuture(
            tokio_rustls::TlsConnector::from(self.config).connect(self.server_name, stream),
            self.peer,
        )
    }
}

/// The handshake under way (a failed certificate check is an [`io::Error`] holding the
/// [`rustls::Error`], which the drivers report as a TLS verification failure).
pub struct TlsConnectFuture<S>(tokio_rustls::Connect<S>, Option<PeerCertificate>);

impl<S> Future for TlsConnectFuture<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    type Output = io::Result<TlsStream<S>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let peer = self.1.clone();
        Pin::new(&mut self.0).poll(cx).map_ok(|stream| {
            if let Some(peer) = peer
                && let Some(first) = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
            {
                peer.set(first.clone().into_owned());
            }
            TlsStream(stream)
        })
    }
}

/// A TLS session to a PostgreSQL server, as tokio-postgres reads and writes it.
pub struct TlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S> TlsStream<S> {
    /// The rustls session (negotiated version, cipher suite, the server's certificates).
    pub fn session(&self) -> &rustls::ClientConnection {
        self.0.get_ref().1
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for TlsStream<S> {
    /// None: `tls-server-end-point` needs the hash named by the certificate's signature
    /// algorithm, and no hashing crate of that kind is a direct dependency here. SCRAM then
    /// runs without channel binding (tokio-postgres' default `prefer`).
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

// ------------------------------------------------------------------------------ mysql_async

/// mysql_async's TLS options for a trust: TLS required (a server without TLS is an error),
/// only the trust's CAs (mysql_async's built-in webpki roots left out), no client
/// certificate, and for [`Verify::Ca`] the driver's `danger_skip_domain_validation`.
///
/// What mysql_async 0.37.1 does with these (its `src/io/tls/rustls_io.rs`): it builds its own
/// rustls connector (from the process default provider: ring, the only one compiled in) around
/// rustls' WebPKI verifier, which checks the chain to these CAs, the validity dates and the
/// key usage before the name. `skip_domain_validation` forgives an error only when its text
/// contains `NotValidForName`; the rustls of this workspace (0.23.46) reports a wrong name as
/// `NotValidForNameContext`, whose text is "certificate not valid for name ...", so the skip
/// never applies: **the server certificate must name the host dialled** (the pod IP or DNS
/// name), as with [`Verify::Full`]. The chain and the expiry are checked either way. The test
/// `mysql_async_checks_the_name_despite_skip_domain_validation` pins this.
pub fn mysql_ssl_opts(trust: &ServerTrust) -> mysql_async::SslOpts {
    // One DER certificate per entry (mysql_async reads an entry without a PEM block as DER).
    let roots = trust
        .certificates
        .iter()
        .map(|c| c.as_ref().to_vec().into())
        .collect();
    mysql_async::SslOpts::default()
        .with_root_certs(roots)
        .with_disable_built_in_roots(true)
        .with_danger_skip_domain_validation(trust.verify == Verify::Ca)
        .with_danger_accept_invalid_certs(false)
        // Checked for this name instead of the address dialled ([`ServerTrust::for_name`]).
        .with_danger_tls_hostname_override(trust.server_name.clone())
}

// ------------------------------------------------------------------------------ errors

/// When `error` (or an error it wraps, io errors included) is a TLS failure, what to report:
/// "TLS verification failure: ..." for a refused server certificate, "TLS handshake failed:
/// ..." for another TLS error, "TLS setup failed: ..." for a [`TlsError`]. `None` otherwise.
pub(crate) fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(describe(r));
        }
        if let Some(t) = e.downcast_ref::<TlsError>() {
            return Some(format!("TLS setup failed: {t}"));
        }
        // An io::Error's source() skips the error it wraps: look at that one too.
        next = match e.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
            Some(inner) => Some(inner),
            None => e.source(),
        };
    }
    None
}

fn describe(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(_)
        | rustls::Error::NoCertificatesPresented
        | rustls::Error::UnsupportedNameType => {
            format!("TLS verification failure: the server certificate is refused: {e}")
        }
        other => format!("TLS handshake failed: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A test CA.
    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
        }
    }

    /// A server certificate `ca` signed for `names`; expired since 2001 when `expired`.
    fn leaf(
        ca: &Ca,
        names: &[&str],
        expired: bool,
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, "member");
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.issuer).unwrap();
        (
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
    }

    fn server_config(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        )
    }

    /// A TLS server on 127.0.0.1 that takes one connection and writes `hello` on it.
    async fn tls_server(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(chain, key));
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await?;
            let mut tls = acceptor.accept(tcp).await?;
            tls.write_all(b"hello").await?;
            tls.shutdown().await
        });
        addr
    }

    /// Dials `addr` as `host` through the tokio-postgres connector; what the server said, or
    /// the failure as the drivers report it.
    async fn dial(
        trust: &ServerTrust,
        host: &str,
        addr: std::net::SocketAddr,
    ) -> Result<String, String> {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let connect = MakeTlsConnect::<TcpStream>::make_tls_connect(&mut trust.clone(), host)
            .map_err(|e| e.to_string())?;
        let mut tls = connect
            .connect(tcp)
            .await
            .map_err(|e| tls_failure(&e).unwrap_or_else(|| format!("not a TLS failure: {e}")))?;
        let mut said = String::new();
        tls.read_to_string(&mut said)
            .await
            .map_err(|e| e.to_string())?;
        Ok(said)
    }

    fn trusting(ca: &Ca, verify: Verify) -> ServerTrust {
        ServerTrust::from_pem_verifying(ca.pem.as_bytes(), verify).unwrap()
    }

    #[tokio::test]
    async fn verify_ca_accepts_a_certificate_of_the_ca_that_does_not_name_the_ip_dialled() {
        let a = ca("CA A");
        let (chain, key) = leaf(&a, &["member-0.example"], false);
        let addr = tls_server(chain, key).await;
        assert_eq!(
            dial(&trusting(&a, Verify::Ca), "127.0.0.1", addr).await,
            Ok("hello".to_owned())
        );
    }

    #[tokio::test]
    async fn verify_full_refuses_a_certificate_that_does_not_name_the_ip_dialled() {
        let a = ca("CA A");
        let (chain, key) = leaf(&a, &["member-0.example"], false);
        let addr = tls_server(chain.clone(), key.clone_key()).await;
        let e = dial(&trusting(&a, Verify::Full), "127.0.0.1", addr)
            .await
            .unwrap_err();
        assert!(e.starts_with("TLS verification failure"), "{e}");
        assert!(e.contains("not valid for name"), "{e}");
        // The same certificate dialled by the name it carries passes the full check.
        let addr = tls_server(chain, key).await;
        let mut full = trusting(&a, Verify::Full);
        let connect =
            MakeTlsConnect::<TcpStream>::make_tls_connect(&mut full, "member-0.example").unwrap();
        let mut tls = connect
            .connect(TcpStream::connect(addr).await.unwrap())
            .await
            .unwrap();
        let mut said = String::new();
        tls.read_to_string(&mut said).await.unwrap();
        assert_eq!(said, "hello");
    }

    #[tokio::test]
    async fn a_certificate_of_another_ca_is_refused_in_both_modes() {
        let a = ca("CA A");
        let b = ca("CA B");
        for verify in [Verify::Ca, Verify::Full] {
            // Even when it names the host dialled.
            let (chain, key) = leaf(&b, &["member-0.example", "127.0.0.1"], false);
            let addr = tls_server(chain, key).await;
            let e = dial(&trusting(&a, verify), "127.0.0.1", addr)
                .await
                .unwrap_err();
            assert!(e.starts_with("TLS verification failure"), "{verify:?}: {e}");
            assert!(e.contains("UnknownIssuer"), "{verify:?}: {e}");
        }
    }

    #[tokio::test]
    async fn an_expired_certificate_of_the_ca_is_refused() {
        let a = ca("CA A");
        for (verify, names) in [
            (Verify::Ca, &["member-0.example"][..]),
            (Verify::Full, &["127.0.0.1"][..]),
        ] {
            let (chain, key) = leaf(&a, names, true);
            let addr = tls_server(chain, key).await;
            let e = dial(&trusting(&a, verify), "127.0.0.1", addr)
                .await
                .unwrap_err();
            assert!(e.starts_with("TLS verification failure"), "{verify:?}: {e}");
            assert!(e.contains("certificate expired"), "{verify:?}: {e}");
        }
    }

    #[test]
    fn a_bundle_without_a_usable_certificate_is_refused_with_the_reason() {
        let e = ServerTrust::from_pem(b"garbage").unwrap_err();
        assert!(matches!(e, TlsError::NoCertificate), "{e:?}");
        assert!(e.to_string().contains("no CA certificate"), "{e}");

        // A key alone is no CA.
        let key = KeyPair::generate().unwrap().serialize_pem();
        let e = ServerTrust::from_pem(key.as_bytes()).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificate), "{e:?}");

        let e = ServerTrust::from_pem(
            b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap_err();
        assert!(matches!(e, TlsError::Pem(_)), "{e:?}");
        assert!(e.to_string().contains("not readable PEM"), "{e}");

        // Base64 that is no certificate: rustls refuses it as a trust anchor.
        let good = ca("CA A").pem;
        let bundle =
            format!("{good}-----BEGIN CERTIFICATE-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE-----\n");
        let e = ServerTrust::from_pem(bundle.as_bytes()).unwrap_err();
        assert!(
            matches!(e, TlsError::BadCertificate { index: 2, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("CA certificate 2"), "{e}");
    }

    #[test]
    fn a_trust_reads_every_ca_of_a_bundle_and_shows_no_bytes() {
        let (a, b) = (ca("CA A"), ca("CA B"));
        let trust = ServerTrust::from_pem(format!("{}{}", a.pem, b.pem).as_bytes()).unwrap();
        assert_eq!(trust.certificates().len(), 2);
        assert_eq!(trust.verify(), Verify::Ca);
        assert_eq!(
            trust.with_verify(Verify::Full).unwrap().verify(),
            Verify::Full
        );
        let shown = format!("{trust:?}");
        assert_eq!(
            shown,
            "ServerTrust { verify: Ca, certificates: 2, server_name: None, .. }"
        );
    }

    #[test]
    fn a_host_that_is_no_server_name_is_an_error() {
        let mut trust = ServerTrust::from_pem(ca("CA A").pem.as_bytes()).unwrap();
        let e =
            MakeTlsConnect::<TcpStream>::make_tls_connect(&mut trust, "not a host!").unwrap_err();
        assert!(matches!(e, TlsError::ServerName { .. }), "{e:?}");
        assert!(MakeTlsConnect::<TcpStream>::make_tls_connect(&mut trust, "10.1.2.3").is_ok());
    }

    // ------------------------------------------------------------------ mysql_async

    /// A fake MySQL server on 127.0.0.1 for one connection: sends a protocol-10 greeting
    /// offering TLS, reads the client's SSL request and runs the TLS handshake. The handle
    /// answers whether the handshake completed (the client accepted the certificate).
    async fn fake_mysql(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> (u16, tokio::task::JoinHandle<io::Result<()>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(chain, key));
        let task = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await?;
            let mut greeting = vec![10u8];
            greeting.extend_from_slice(b"8.0.99-fake\0");
            greeting.extend_from_slice(&7u32.to_le_bytes()); // connection id
            greeting.extend_from_slice(b"abcdefgh\0"); // scramble, filler
            // CLIENT_LONG_PASSWORD | CLIENT_PROTOCOL_41 | CLIENT_SSL | CLIENT_TRANSACTIONS |
            // CLIENT_SECURE_CONNECTION; then CLIENT_PLUGIN_AUTH in the upper half.
            greeting.extend_from_slice(&0xAA01u16.to_le_bytes());
            greeting.push(45); // utf8mb4_general_ci
            greeting.extend_from_slice(&2u16.to_le_bytes()); // autocommit
            greeting.extend_from_slice(&0x0008u16.to_le_bytes());
            greeting.push(21);
            greeting.extend_from_slice(&[0; 10]);
            greeting.extend_from_slice(b"ijklmnopqrst\0");
            greeting.extend_from_slice(b"mysql_native_password\0");
            let len = u32::try_from(greeting.len()).unwrap().to_le_bytes();
            tcp.write_all(&[len[0], len[1], len[2], 0]).await?;
            tcp.write_all(&greeting).await?;
            let mut header = [0u8; 4];
            tcp.read_exact(&mut header).await?;
            let mut request = vec![0u8; usize::from(header[0])];
            tcp.read_exact(&mut request).await?;
            acceptor.accept(tcp).await.map(drop)
        });
        (port, task)
    }

    /// Whether mysql_async, with [`mysql_ssl_opts`] of `trust`, accepts the certificate
    /// `chain` of a server dialled as 127.0.0.1; the client's error when not.
    async fn mysql_accepts(
        trust: &ServerTrust,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<(), String> {
        let (port, server) = fake_mysql(chain, key).await;
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(port)
            .user(Some("nobody"))
            .pass(Some("nothing"))
            .prefer_socket(false)
            .ssl_opts(mysql_ssl_opts(trust));
        let client = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            mysql_async::Conn::new(opts),
        )
        .await
        .expect("the client gives up in time");
        // The fake server stops after the handshake, so the client fails either way.
        let client_error = match client {
            Ok(_) => "connected".to_owned(),
            Err(e) => tls_failure(&e).unwrap_or_else(|| e.to_string()),
        };
        match server.await.unwrap() {
            Ok(()) => Ok(()),
            Err(_) => Err(client_error),
        }
    }

    #[tokio::test]
    async fn mysql_ssl_opts_check_the_chain_and_the_expiry() {
        let a = ca("CA A");
        let b = ca("CA B");
        let trust = trusting(&a, Verify::Ca);
        let (chain, key) = leaf(&a, &["127.0.0.1"], false);
        assert_eq!(mysql_accepts(&trust, chain, key).await, Ok(()));

        let (chain, key) = leaf(&b, &["127.0.0.1"], false);
        let e = mysql_accepts(&trust, chain, key).await.unwrap_err();
        assert!(e.starts_with("TLS verification failure"), "{e}");
        assert!(e.contains("UnknownIssuer"), "{e}");

        let (chain, key) = leaf(&a, &["127.0.0.1"], true);
        let e = mysql_accepts(&trust, chain, key).await.unwrap_err();
        assert!(e.starts_with("TLS verification failure"), "{e}");
        assert!(e.contains("certificate expired"), "{e}");
    }

    /// mysql_async 0.37.1 forgives a name error only when its text contains
    /// `NotValidForName`, which rustls 0.23's `NotValidForNameContext` text does not: its
    /// `skip_domain_validation` has no effect. When this test fails, mysql_async honours the
    /// skip again: [`mysql_ssl_opts`] is then verify-ca; update its documentation.
    #[tokio::test]
    async fn mysql_async_checks_the_name_despite_skip_domain_validation() {
        let a = ca("CA A");
        let trust = trusting(&a, Verify::Ca);
        assert!(mysql_ssl_opts(&trust).skip_domain_validation());
        let (chain, key) = leaf(&a, &["member-0.example"], false);
        let e = mysql_accepts(&trust, chain, key).await.unwrap_err();
        assert!(e.starts_with("TLS verification failure"), "{e}");
        assert!(e.contains("not valid for name"), "{e}");
    }

    #[tokio::test]
    async fn a_trust_for_a_name_checks_that_name_whatever_address_is_dialled() {
        let a = ca("CA A");
        let b = ca("CA B");
        let named = trusting(&a, Verify::Ca)
            .for_name("orders-1.orders-headless.shop.svc")
            .unwrap();
        assert_eq!(named.verify(), Verify::Full);
        // The member's certificate, through the wildcard of the cluster's certificate.
        let member = ["*.orders-headless.shop.svc"];
        let (chain, key) = leaf(&a, &member, false);
        let addr = tls_server(chain.clone(), key.clone_key()).await;
        assert_eq!(
            dial(&named, "127.0.0.1", addr).await,
            Ok("hello".to_owned())
        );
        assert_eq!(mysql_accepts(&named, chain, key).await, Ok(()));
        // Another cluster's certificate from the same authority is refused, on both drivers.
        let (chain, key) = leaf(&a, &["*.billing-headless.shop.svc"], false);
        let addr = tls_server(chain.clone(), key.clone_key()).await;
        let e = dial(&named, "127.0.0.1", addr).await.unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
        let e = mysql_accepts(&named, chain, key).await.unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
        // The right name from another authority is refused.
        let (chain, key) = leaf(&b, &member, false);
        let e = mysql_accepts(&named, chain, key).await.unwrap_err();
        assert!(e.contains("UnknownIssuer"), "{e}");
        assert!(trusting(&a, Verify::Ca).for_name("not a name!").is_err());
        // From a trust that checks fully, the same configuration (nothing built again).
        let full = trusting(&a, Verify::Full);
        let named = full.for_name("orders-1.orders-headless.shop.svc").unwrap();
        assert!(Arc::ptr_eq(&full.client_config(), &named.client_config()));
        assert_eq!(
            named.server_name(),
            Some("orders-1.orders-headless.shop.svc")
        );
    }
}
